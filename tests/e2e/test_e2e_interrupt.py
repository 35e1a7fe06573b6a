"""Ctrl-C or SIGTERM during an engine start or in the middle of a run: pytest exits within
seconds with its summary, and leaves no engine process and no engine log folder behind."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ..e2e_support import (
    ENGINE_KWARGS,
    Proc,
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
    specdecode.run(["the hot word is"] * 4, max_tokens=64, trials=50)
"""

#: How long pytest may take to exit after the Ctrl-C.
EXIT_SECONDS = 20
#: pytest's exit status for an interrupted session.
INTERRUPTED = int(pytest.ExitCode.INTERRUPTED)


@pytest.fixture
def run(tmp_path: Path, pair: dict[str, str]) -> Iterator[Callable[..., Proc]]:
    """Start a pytest run of :data:`SUITE` (its output lines collected as they come), its
    engines in vLLM's layout unless ``vllm_processes=False``."""
    runs: list[Proc] = []

    def start(vllm_processes: bool = True) -> Proc:
        (tmp_path / "tmp").mkdir()  # the run's temporary folder: its engine logs go there
        (tmp_path / "pytest.ini").write_text("[pytest]\n")
        (tmp_path / "test_suite.py").write_text(SUITE.format(draft=pair["draft"]))
        runs.append(
            Proc(
                [
                    sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s",
                    "test_suite.py", "--specdecode-target", pair["target"],
                    "--specdecode-engine-kwargs", json.dumps(ENGINE_KWARGS),
                ],
                tmp_path,
                {"TMPDIR": str(tmp_path / "tmp")},
                vllm_processes=vllm_processes,
            )
        )  # fmt: skip
        return runs[-1]

    yield start
    for r in runs:
        r.kill_leftovers()


def _engine_cores(tag: str) -> list[str]:
    return [p for p in processes_with_tag(tag) if "VLLM::EngineCore" in p]


def _log_folders(tmp_path: Path) -> list[str]:
    """The engine log folders (``specdecode-logs-*``) the run left in its temporary folder."""
    return [p.name for p in (tmp_path / "tmp").glob("specdecode-logs-*")]


def test_ctrl_c_during_an_engine_start(run: Callable[..., Proc], tmp_path: Path) -> None:
    r = run()
    r.wait_for(lambda: bool(r.count("starting baseline engine")), "engine start")
    # the worker has started vLLM's engine core: the start is under way
    r.wait_for(lambda: bool(_engine_cores(r.tag)), "VLLM::EngineCore process")
    assert not r.count("ready in"), r.output
    r.ctrl_c()
    r.exits(EXIT_SECONDS)
    assert "KeyboardInterrupt" in r.output, r.output
    assert surviving_processes(r.tag) == []
    assert _log_folders(tmp_path) == []


def test_ctrl_c_in_the_middle_of_a_round(run: Callable[..., Proc], tmp_path: Path) -> None:
    r = run()
    r.wait_for(lambda: bool(r.count("round 1/")), "first round")
    assert len(processes_with_tag(r.tag)) >= 3  # pytest, two workers and their engine cores
    r.ctrl_c()
    r.exits(EXIT_SECONDS)
    assert "KeyboardInterrupt" in r.output, r.output
    assert surviving_processes(r.tag) == []
    assert _log_folders(tmp_path) == []


@pytest.mark.parametrize("during", ["an engine start", "a round"])
def test_sigterm_is_handled_as_ctrl_c(
    run: Callable[..., Proc], tmp_path: Path, during: str
) -> None:
    """SIGTERM (``kill``, a CI job's cancel, a container's stop) ends the run as Ctrl-C does:
    the summary printed, pytest's interrupted status, no process and no log folder left.
    Python's default SIGTERM ends pytest at once (status -15, no summary, the folder left).
    In a round the engines run in the plugin's worker (a start 15 s shorter): the Ctrl-C test
    above covers a round with vLLM's processes, and SIGTERM reaches them only through pytest."""
    r = run(vllm_processes=during == "an engine start")
    if during == "an engine start":
        r.wait_for(lambda: bool(_engine_cores(r.tag)), "VLLM::EngineCore process")
        assert not r.count("ready in"), r.output
    else:
        r.wait_for(lambda: bool(r.count("round 1/")), "first round")
    os.kill(r.proc.pid, signal.SIGTERM)
    assert r.exits(EXIT_SECONDS) == INTERRUPTED, r.output
    assert "KeyboardInterrupt: SIGTERM (handled as Ctrl-C)" in r.output, r.output
    assert re.search(r"(no tests ran|\d+ \w+) in [\d.]+s", r.output), r.output  # the summary
    assert surviving_processes(r.tag) == []
    assert _log_folders(tmp_path) == []
