"""Ctrl-C during an engine start or in the middle of a run: pytest exits within seconds and
leaves no engine process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .e2e_support import (
    ENGINE_KWARGS,
    build_pair,
    kill_run,
    needs_vllm,
    processes_with_tag,
    surviving_processes,
)

pytestmark = [needs_vllm, pytest.mark.slow]

SUITE = """
import pytest

@pytest.mark.specdecode("structured", speculative_config={{
    "method": "draft_model", "model": {draft!r}, "num_speculative_tokens": 4}})
def test_long(specdecode):
    specdecode.run(["the hot word is"] * 4, max_tokens=256, trials=50)
"""

#: How long pytest may take to exit after the Ctrl-C.
EXIT_SECONDS = 20


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return build_pair(tmp_path_factory.mktemp("interrupt") / "pair")


class Run:
    """A pytest run of :data:`SUITE` whose output lines are collected as they come."""

    def __init__(self, root: Path, pair: dict[str, str]) -> None:
        (root / "pytest.ini").write_text("[pytest]\n")
        (root / "test_suite.py").write_text(SUITE.format(draft=pair["draft"]))
        self.tag = f"specdecode-int-{uuid.uuid4().hex}"
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s",
                "test_suite.py", "--specdecode-target", pair["target"],
                "--specdecode-engine-kwargs", json.dumps(ENGINE_KWARGS),
            ],
            # SPT_NOENV: vLLM retitles its processes (VLLM::EngineCore) with setproctitle,
            # which otherwise overwrites /proc/PID/environ, and the tag with it.
            cwd=root, env={**os.environ, "SPECDECODE_E2E_TAG": self.tag, "SPT_NOENV": "1"},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            # A shell without job control starts background jobs with SIGINT ignored, and
            # Python then installs no KeyboardInterrupt handler: give the run a terminal's Ctrl-C.
            preexec_fn=_default_sigint,
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

    def wait_for(self, found: Callable[[], bool], what: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not found():
            assert self.proc.poll() is None, f"the run ended before {what}:\n{self.output}"
            assert time.monotonic() < deadline, f"no {what} within {timeout} s:\n{self.output}"
            time.sleep(0.2)

    def seen(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def interrupt(self) -> None:
        """Ctrl-C; then pytest must exit within :data:`EXIT_SECONDS`."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"pytest still runs {EXIT_SECONDS} s after Ctrl-C:\n{self.output}")
        self._reader.join(10)

    def kill_leftovers(self) -> None:
        """Whatever the test's outcome, leave nothing running."""
        kill_run(self.proc, self.tag)


@pytest.fixture
def run(tmp_path: Path, pair: dict[str, str]) -> Iterator[Callable[[], Run]]:
    runs: list[Run] = []

    def start() -> Run:
        runs.append(Run(tmp_path, pair))
        return runs[-1]

    yield start
    for r in runs:
        r.kill_leftovers()


def _engine_cores(tag: str) -> list[str]:
    return [p for p in processes_with_tag(tag) if "VLLM::EngineCore" in p]


def test_ctrl_c_during_an_engine_start(run: Callable[[], Run]) -> None:
    r = run()
    r.wait_for(lambda: r.seen("starting baseline engine"), "engine start")
    # the worker has started vLLM's engine core: the start is under way
    r.wait_for(lambda: bool(_engine_cores(r.tag)), "VLLM::EngineCore process")
    assert not r.seen("ready in"), r.output
    r.interrupt()
    assert "KeyboardInterrupt" in r.output, r.output
    assert surviving_processes(r.tag) == []


def test_ctrl_c_in_the_middle_of_a_round(run: Callable[[], Run]) -> None:
    r = run()
    r.wait_for(lambda: r.seen("round 1/"), "first round")
    assert len(processes_with_tag(r.tag)) >= 3  # pytest, two workers and their engine cores
    r.interrupt()
    assert "KeyboardInterrupt" in r.output, r.output
    assert surviving_processes(r.tag) == []
