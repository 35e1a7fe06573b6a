"""Ctrl-C during an engine start or in the middle of a run: pytest exits within seconds and
leaves no engine process behind."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .e2e_support import (
    ENGINE_KWARGS,
    Proc,
    build_pair,
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


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return build_pair(tmp_path_factory.mktemp("interrupt") / "pair")


@pytest.fixture
def run(tmp_path: Path, pair: dict[str, str]) -> Iterator[Callable[[], Proc]]:
    """Start a pytest run of :data:`SUITE` (its output lines collected as they come)."""
    runs: list[Proc] = []

    def start() -> Proc:
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
            )
        )  # fmt: skip
        return runs[-1]

    yield start
    for r in runs:
        r.kill_leftovers()


def _engine_cores(tag: str) -> list[str]:
    return [p for p in processes_with_tag(tag) if "VLLM::EngineCore" in p]


def test_ctrl_c_during_an_engine_start(run: Callable[[], Proc]) -> None:
    r = run()
    r.wait_for(lambda: bool(r.count("starting baseline engine")), "engine start")
    # the worker has started vLLM's engine core: the start is under way
    r.wait_for(lambda: bool(_engine_cores(r.tag)), "VLLM::EngineCore process")
    assert not r.count("ready in"), r.output
    r.ctrl_c()
    r.exits(EXIT_SECONDS)
    assert "KeyboardInterrupt" in r.output, r.output
    assert surviving_processes(r.tag) == []


def test_ctrl_c_in_the_middle_of_a_round(run: Callable[[], Proc]) -> None:
    r = run()
    r.wait_for(lambda: bool(r.count("round 1/")), "first round")
    assert len(processes_with_tag(r.tag)) >= 3  # pytest, two workers and their engine cores
    r.ctrl_c()
    r.exits(EXIT_SECONDS)
    assert "KeyboardInterrupt" in r.output, r.output
    assert surviving_processes(r.tag) == []
