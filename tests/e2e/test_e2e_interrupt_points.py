"""Ctrl-C at the points a run passes through besides an engine start and a round: during the
warm-up, during ``sample_equivalence``, while the report and the saved run are written at the
session's end, and a second Ctrl-C while the first one's shutdown is under way. Each time
pytest (or a plain ``Bench`` script) exits within :data:`EXIT_SECONDS`, leaves no process
behind, and no output file half-written. The engines run in the plugin's worker (they start
in less than half the time) except for the second Ctrl-C, which must find vLLM's engine-core
processes still shutting down; Ctrl-C with vLLM's processes at an engine start and in a round
is tests/e2e/test_e2e_interrupt.py."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ..e2e_support import (
    ENGINE_KWARGS,
    SLOW_RENAME,
    Proc,
    needs_vllm,
    processes_with_tag,
    surviving_processes,
)

pytestmark = [needs_vllm, pytest.mark.slow]

#: How long pytest or the script may take to exit after the Ctrl-C.
EXIT_SECONDS = 20
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
         "prompt_lookup_min": 2}  # fmt: skip
PROMPTS = ["the hot word is"] * 4

SUITE = """
import pytest

SPEC = {spec!r}


@pytest.mark.specdecode("structured", speculative_config=SPEC)
def test_it(specdecode):
    {body}
"""

SCRIPT = """
import json, sys
from pytest_specdecode import Bench

target, draft, engine = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
spec = {speculative}
with Bench(target, spec, engine, trials=50) as bench:
    {body}
"""


@pytest.fixture
def start(tmp_path: Path, pair: dict[str, str]) -> Iterator[Callable[..., Proc]]:
    """Start a pytest run of a one-test suite (``body`` its test's code) or, with
    ``script=True``, a plain ``Bench`` script (``body`` the code in its ``with`` block);
    ``speculative``: the speculative engine's config (n-gram in a suite, the draft model in a
    script unless given); ``vllm_processes``: engines in vLLM's own layout."""
    started: list[Proc] = []

    def run(
        body: str,
        *,
        script: bool = False,
        speculative: dict[str, object] | None = None,
        options: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        vllm_processes: bool = False,
    ) -> Proc:
        if script:
            spec = speculative or {"method": "draft_model", "model": pair["draft"],
                                   "num_speculative_tokens": 4}  # fmt: skip
            (tmp_path / "bench_script.py").write_text(SCRIPT.format(speculative=spec, body=body))
            args = [sys.executable, "bench_script.py", pair["target"], pair["draft"],
                    json.dumps(ENGINE_KWARGS)]  # fmt: skip
        else:
            (tmp_path / "pytest.ini").write_text("[pytest]\n")
            suite = SUITE.format(spec=speculative or NGRAM, body=body)
            (tmp_path / "test_suite.py").write_text(suite)
            args = [
                sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s",
                "test_suite.py", "--specdecode-target", pair["target"],
                "--specdecode-engine-kwargs", json.dumps(ENGINE_KWARGS), *options,
            ]  # fmt: skip
        started.append(Proc(args, tmp_path, env, vllm_processes=vllm_processes))
        return started[-1]

    yield run
    for proc in started:
        proc.kill_leftovers()


def _both_ready(p: Proc) -> bool:
    return p.count(" ready in ") >= 2


def _engine_cores(tag: str) -> list[str]:
    return [p for p in processes_with_tag(tag) if "VLLM::EngineCore" in p]


def test_ctrl_c_during_the_warm_up(start: Callable[..., Proc]) -> None:
    p = start(f"specdecode.run({PROMPTS!r}, max_tokens=256, trials=50)")
    p.wait_for(lambda: _both_ready(p), "both engines ready")
    p.ctrl_c()  # the warm-up round (one per engine, 4 x 256 tokens) starts on their start
    assert p.exits(EXIT_SECONDS) != 0
    assert not p.count("round 1/"), p.output  # it was still warming up
    assert "KeyboardInterrupt" in p.output, p.output
    assert surviving_processes(p.tag) == []


@pytest.mark.parametrize("how", ["pytest", "script"])
def test_ctrl_c_during_sample_equivalence(start: Callable[..., Proc], how: str) -> None:
    call = f"sample_equivalence({PROMPTS[:1]!r}, samples=20000, tokens=32)"
    if how == "script":
        p = start(f"bench.{call}", script=True, speculative=NGRAM)
    else:
        p = start(f"specdecode.{call}")
    p.wait_for(lambda: p.count("sampling 20000 continuations") == 1, "the sampling line")
    p.wait_for(lambda: _both_ready(p), "both engines ready")
    time.sleep(1)
    p.ctrl_c()
    assert p.exits(EXIT_SECONDS) != 0
    assert "KeyboardInterrupt" in p.output, p.output
    if how == "script":
        assert "in sample_equivalence" in p.output, p.output
        assert p.lines[-1].startswith("KeyboardInterrupt"), p.output
        assert not [line for line in p.lines if "Warning" in line or "leaked" in line], p.output
    assert surviving_processes(p.tag) == []


#: In the script of the second Ctrl-C: the idle engine's shutdown, which takes vLLM a second or
#: two (a busy runner once let it finish before the test could send the second Ctrl-C), is held
#: open for a minute; the busy engine is killed as before.
SLOW_IDLE_SHUTDOWN = """
    import time
    from pytest_specdecode.engines import local
    _close = local.Engine.close
    def _slow_close(self, timeout=60.0):
        if not self._pending:  # idle: the one asked to shut down
            print("[test] shutting the idle engine down", file=sys.stderr, flush=True)
            time.sleep(60)
        _close(self, timeout)
    local.Engine.begin_close = lambda self: None  # the shutdown begins in _slow_close
    local.Engine.close = _slow_close
"""


def test_a_second_ctrl_c_while_shutting_down(start: Callable[..., Proc]) -> None:
    """A ``Bench`` script interrupted in its warm-up: the busy engine is killed, the idle one
    asked to shut down; a second Ctrl-C while that one is still shutting down kills it at once."""
    p = start(
        SLOW_IDLE_SHUTDOWN.strip() + f"\n    bench.run({PROMPTS!r}, max_tokens=256)",
        script=True, speculative=NGRAM, vllm_processes=True,
    )  # fmt: skip
    p.wait_for(lambda: _both_ready(p), "both engines ready")
    cores = len(_engine_cores(p.tag))
    assert cores == 2, p.output
    p.ctrl_c()
    p.wait_for(lambda: p.count("[test] shutting the idle engine down") == 1, "the shutdown", 20)
    assert _engine_cores(p.tag), p.output  # the idle engine's, its shutdown under way
    p.ctrl_c()  # (the busy one is killed before or after it: their order in the pool)
    assert p.exits(EXIT_SECONDS) != 0
    assert "in run_paired" in p.output and "    warm(base)\n" in p.output, p.output  # warm-up
    assert p.lines[-1].startswith("KeyboardInterrupt"), p.output
    assert surviving_processes(p.tag) == []


@pytest.mark.parametrize("slow", ["report.json", "saved.json"])
def test_ctrl_c_while_an_output_file_is_written(
    start: Callable[..., Proc], tmp_path: Path, pair: dict[str, str], slow: str
) -> None:
    """At the session's end the report is written, then the saved run (each through a
    temporary file and a rename); a Ctrl-C inside either write leaves each file complete:
    the new one, or the one from before."""
    before = '{"format_version": 1, "results": [], "environment": {}, "session": {}}\n'
    for name in ("report.json", "saved.json"):
        (tmp_path / name).write_text(before)
    (tmp_path / "conftest.py").write_text(SLOW_RENAME)
    p = start(
        # the draft model drafts from the first token on, so short rounds measure and save
        # (n-gram needs 128 tokens before the random tiny target repeats itself)
        f"specdecode.run({PROMPTS[:2]!r}, max_tokens=16)",
        speculative={"method": "draft_model", "model": pair["draft"], "num_speculative_tokens": 4},
        # the fewest rounds a saved run takes (sizing by noise would take up to 90)
        options=("--specdecode-report", "report.json", "--specdecode-save", "saved.json",
                 "--specdecode-baseline-trials", "20"),
        env={"SLOW_FILE": slow},
    )  # fmt: skip
    p.wait_for(lambda: p.count("[test] renaming ") == 1, f"the write of {slow}", 600)
    p.ctrl_c()
    assert p.exits(EXIT_SECONDS) != 0
    assert "KeyboardInterrupt" in p.output, p.output
    assert surviving_processes(p.tag) == []
    assert sorted(f.name for f in tmp_path.iterdir() if f.name.endswith(".tmp")) == []
    assert (tmp_path / slow).read_text() == before  # untouched
    report = json.loads((tmp_path / "report.json").read_text())
    if slow == "saved.json":  # the report, written first, is the new one, whole
        assert [r["nodeid"] for r in report["results"]] == ["test_suite.py::test_it"], report
    else:  # interrupted before the save began
        assert (tmp_path / "saved.json").read_text() == before
