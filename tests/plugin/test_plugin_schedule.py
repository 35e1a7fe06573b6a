"""The plugin's engine schedule through pytest: tests sharing engines run together, the pool
evicts the engine needed farthest ahead, ``--specdecode-no-reorder`` keeps the file order,
pytest-xdist sends tests sharing engines to one worker, and the summary says where the time
went. The real EnginePool runs FakeWorker engines (tests/fakes.py): no vLLM."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ..fakes import FakeSource, fake_pool

REPO = Path(__file__).resolve().parents[2]

#: The issue's suite: two configurations shared by three tests (the cost ratio comes from
#: inside the speculative engine: no draft model starts alone).
SUITE = """
import pytest

DRAFT = {"model": "org/draft", "num_speculative_tokens": 4}
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}

@pytest.mark.specdecode("structured", target="org/target", speculative_config=DRAFT)
def test_draft_first(specdecode):
    specdecode.run(["p"], max_tokens=4)

@pytest.mark.specdecode("structured", target="org/target", speculative_config=NGRAM)
def test_ngram(specdecode):
    specdecode.run(["p"], max_tokens=4)

def test_plain():
    pass

@pytest.mark.specdecode("creative", target="org/target", speculative_config=DRAFT)
def test_draft_again(specdecode):
    specdecode.run(["p"], max_tokens=4)
"""

ARGS = ("-v", "-p", "no:cacheprovider", "--specdecode-trials", "3",
        "-W", "ignore::pytest_specdecode.errors.UncheckedCompatibilityWarning")  # fmt: skip


class PoolPlugin:
    """Puts a session's specdecode tests on a real EnginePool of FakeWorkers."""

    def __init__(self, world: FakeSource) -> None:
        self.world = world
        self.messages: list[str] = []  # the pool's progress lines

    def pytest_specdecode_engine_source(self, config: Any, settings: Any) -> Any:
        return fake_pool(self.world, progress=self.messages.append)


def run_order(output: str) -> list[str]:
    return re.findall(r"::(test_\w+) PASSED", output)


def run(pytester: pytest.Pytester, *args: str) -> tuple[PoolPlugin, Any, dict[str, Any]]:
    plugin = PoolPlugin(FakeSource())
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess(
        *ARGS, "--specdecode-report", "report.json", *args, plugins=[plugin]
    )
    result.assert_outcomes(passed=4)
    report = json.loads((pytester.path / "report.json").read_text())
    return plugin, result, report


def test_tests_sharing_engines_run_together_and_no_engine_starts_twice(
    pytester: pytest.Pytester,
) -> None:
    plugin, result, report = run(pytester)
    out = result.stdout.str()
    assert run_order(out) == ["test_draft_first", "test_draft_again", "test_plain", "test_ngram"]
    spawned = [what for kind, what in plugin.world.events if kind == "spawn"]
    assert len(spawned) == 3 and len(set(spawned)) == 3, spawned  # each engine once
    assert not any("restarting" in m for m in plugin.messages)
    time = report["session"]["time"]
    assert (time["engine_starts"], time["restarts"]) == (3, 0)
    assert set(time) == {
        "engine_starts", "restarts", "start_seconds", "stop_seconds", "warmup_seconds",
        "round_seconds", "sampling_seconds", "load_seconds", "other_seconds",
    }  # fmt: skip
    assert 0 <= time["other_seconds"] <= report["session"]["wall_seconds"]
    assert report["session"]["reordered"] is True
    # when the run started, in UTC (the HTML report's top line)
    assert re.fullmatch(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", report["session"]["started"])
    assert re.search(
        r"time: [\d.]+ s wall: 3 engine starts [\d.]+ s, shutdowns [\d.]+ s, warm-up [\d.]+ s", out
    )


def test_no_reorder_keeps_the_file_order_and_names_the_restart(
    pytester: pytest.Pytester,
) -> None:
    plugin, result, report = run(pytester, "--specdecode-no-reorder")
    out = result.stdout.str()
    assert run_order(out) == ["test_draft_first", "test_ngram", "test_plain", "test_draft_again"]
    assert report["session"]["time"]["restarts"] == 1
    assert report["session"]["reordered"] is False
    assert any(
        m.startswith("restarting speculative engine (org/target, draft_model k=4, draft org/draft)"
                     ": it was shut down to make room for speculative engine (org/target, ngram")
        for m in plugin.messages
    ), plugin.messages  # fmt: skip
    assert "4 engine starts (1 restart)" in out


def test_reordering_keeps_the_result_keys(pytester: pytest.Pytester) -> None:
    _, _, report = run(pytester)
    assert sorted(r["nodeid"] for r in report["results"]) == [
        "test_suite.py::test_draft_again",
        "test_suite.py::test_draft_first",
        "test_suite.py::test_ngram",
    ]


# -- pytest-xdist: one worker per engine group --------------------------------------------

XDIST_CONFTEST = """
import sys
sys.path.insert(0, {repo!r})
from tests.fakes import FakeSource, fake_pool

def pytest_specdecode_engine_source(config, settings):
    return fake_pool(FakeSource())
"""

XDIST_SUITE = """
import pytest

DRAFT = {{"model": "org/draft", "num_speculative_tokens": 4}}
NGRAM = {{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}}
{tests}
"""

XDIST_TEST = """
@pytest.mark.specdecode("structured", target="org/target", speculative_config={spec})
def test_{i}_{name}(specdecode):
    specdecode.run(["p"], max_tokens=4)
"""


def test_xdist_sends_tests_sharing_engines_to_one_worker(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    tests = "".join(
        XDIST_TEST.format(i=i, name=name, spec=name.upper())
        for i, name in enumerate(["draft", "ngram"] * 4)
    )
    pytester.makeconftest(XDIST_CONFTEST.format(repo=str(REPO)))
    pytester.makepyfile(test_suite=XDIST_SUITE.format(tests=tests))
    result = pytester.runpytest_subprocess("-n", "2", *ARGS, "--specdecode-report", "report.json")
    result.assert_outcomes(passed=8)
    report = json.loads((pytester.path / "report.json").read_text())
    workers: dict[str, set[str]] = {}
    for entry in report["results"]:
        assert "@" not in entry["nodeid"]  # keyed by the plain node id
        workers.setdefault(entry["method"], set()).add(entry["worker"])
    assert all(len(w) == 1 for w in workers.values()), workers
    time = report["session"]["time"]
    # each worker starts its group's engines once: two baselines, two speculative
    assert (time["engine_starts"], time["restarts"]) == (4, 0), time
    assert time["other_seconds"] is None
    out = result.stdout.str()
    assert "scheduling tests via EngineGroupScheduling" in out
    assert "over 2 pytest-xdist workers" in out


def test_no_reorder_leaves_xdist_scheduling_alone(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(XDIST_CONFTEST.format(repo=str(REPO)))
    pytester.makepyfile(test_suite=XDIST_SUITE.format(tests=XDIST_TEST.format(
        i=0, name="ngram", spec="NGRAM")))  # fmt: skip
    result = pytester.runpytest_subprocess("-n", "2", "--specdecode-no-reorder", *ARGS)
    result.assert_outcomes(passed=1)
    assert "scheduling tests via LoadScheduling" in result.stdout.str()
