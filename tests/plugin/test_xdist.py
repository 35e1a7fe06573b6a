"""pytest-xdist: GPU assignment per worker, and results gathered on the controller."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode.baselines.files import load
from pytest_specdecode.engines.hardware import Gpu
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.plugin.xdist import check_worker_count, gpu_groups

from ..fakes import CONFTEST as FAKE_CONFTEST

pytest.importorskip("xdist")

REPO = Path(__file__).resolve().parents[2]

GPUS = tuple(Gpu(i, "NVIDIA H100", 80.0, 79.0) for i in range(4))


def test_gpu_groups() -> None:
    assert gpu_groups(GPUS, 1) == ["0", "1", "2", "3"]
    assert gpu_groups(GPUS, 2) == ["0,1", "2,3"]
    assert gpu_groups(GPUS, 3) == ["0,1,2"]
    assert gpu_groups((), 1) == []


def test_more_workers_than_gpus_is_an_error() -> None:
    check_worker_count(4, gpu_groups(GPUS, 1), 4, 1)
    with pytest.raises(ConfigError, match="-n 3: each pytest-xdist worker needs 2 GPU"):
        check_worker_count(3, gpu_groups(GPUS, 2), 4, 2)
    check_worker_count(8, [], 0, 1)  # no GPU: CPU engines, any worker count


CONFTEST = FAKE_CONFTEST.format(repo=str(REPO))

SUITE = """
import os
import pytest

SPEC = {"method": "ngram", "num_speculative_tokens": 4}

@pytest.mark.parametrize("i", range(6))
@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_run(specdecode, i):
    specdecode.run(["p"], max_tokens=4)
    specdecode.run(["p"], max_tokens=4, label="second")
"""


def test_two_workers_one_table_one_report(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    # xdist's own load scheduling (the tests share engines: grouped, one worker would run all)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider",
                                           "--specdecode-no-reorder",
                                           "--specdecode-report", "report.json")  # fmt: skip
    result.assert_outcomes(passed=6)
    out = result.stdout.str()
    assert out.count("speculative decoding summary") == 1
    table = out.split("speculative decoding summary", 1)[1]
    assert len([line for line in table.splitlines() if line.startswith("test_run[")]) == 12
    report = json.loads((pytester.path / "report.json").read_text())
    assert len(report["results"]) == 12
    assert {r["worker"] for r in report["results"]} == {"gw0", "gw1"}
    assert report["session"]["workers"] == 2
    assert all(r["passed"] is True for r in report["results"])


def test_comparisons_made_in_workers_reach_the_report(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    args = ("-p", "no:cacheprovider", "--specdecode-no-reorder")
    pytester.runpytest_subprocess(*args, "--specdecode-save", "base.json", "-k", "not test_run[5]")
    monkeypatch.setenv("FAKE_SPEEDUP", "1.5")
    result = pytester.runpytest_subprocess("-n", "2", *args, "--specdecode-compare", "base.json",
                                           "--specdecode-report", "report.json")  # fmt: skip
    result.assert_outcomes(failed=5, passed=1)
    report = load(pytester.path / "report.json")  # validated against the schema
    assert {r["worker"] for r in report["results"]} == {"gw0", "gw1"}
    decisions = {(c["key"], c["figure"]): c["decision"] for c in report["comparisons"]}
    keys = [f"test_suite.py::test_run[{i}]{label}" for i in range(5) for label in ("", "[second]")]
    assert decisions == {
        **{(key, "speedup"): "regressed" for key in keys},
        **{(key, "acceptance_rate"): "unchanged" for key in keys},
        ("test_suite.py::test_run[5]", None): "new",
        ("test_suite.py::test_run[5][second]", None): "new",
    }
    assert len(report["comparisons"]) == len(decisions)


RANKING_SUITE = """
import pytest

CANDIDATES = {
    "n2": {"method": "ngram", "num_speculative_tokens": 2},
    "n4": {"method": "ngram", "num_speculative_tokens": 4},
}

@pytest.mark.parametrize("i", range(4))
@pytest.mark.specdecode("chat", target="org/target", speculative_config=CANDIDATES["n2"])
def test_choose(specdecode, i):
    specdecode.choose_draft(["p"], CANDIDATES, max_tokens=4).assert_best("n2", within=0.5)
"""


def test_rankings_made_in_workers_reach_the_controller(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=RANKING_SUITE)
    # xdist's own load scheduling (the tests share engines: grouped, one worker would run all)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider",
                                           "--specdecode-no-reorder",
                                           "--specdecode-report", "report.json")  # fmt: skip
    result.assert_outcomes(passed=4)
    summary = result.stdout.str().split("speculative decoding summary", 1)[1]
    lines = [line for line in summary.splitlines() if line.startswith("choose_draft ")]
    assert sorted(line.split(": draft ranking")[0] for line in lines) == [
        f"choose_draft test_suite.py::test_choose[{i}]" for i in range(4)
    ]
    assert all("draft ranking: n" in line and "; best: n" in line for line in lines)
    assert summary.count("rank    candidate") == 4  # each ranking's table
    report = json.loads((pytester.path / "report.json").read_text())
    assert {r["worker"] for r in report["results"]} == {"gw0", "gw1"}
    rankings = report["rankings"]
    assert sorted(r["nodeid"] for r in rankings) == [
        f"test_suite.py::test_choose[{i}]" for i in range(4)
    ]
    for ranking in rankings:
        assert sorted(c["name"] for c in ranking["candidates"]) == ["n2", "n4"]
        assert ranking["best"] in ("n2", "n4") and ranking["reason"]
    (checklist,) = report["checklist"]
    choices = [line for line in checklist["lines"] if line["question"].startswith("choice: ")]
    assert len(choices) == 8  # both candidates of each of the four rankings


PRODUCTS_SUITE = """
import pytest

NGRAM = {"method": "ngram", "num_speculative_tokens": 2}

# xdist sends each worker two neighbouring tests: each worker sweeps and samples
@pytest.mark.parametrize("test", ["sweep[0]", "sampling[0]", "sweep[1]", "sampling[1]"])
@pytest.mark.specdecode("structured", target="org/target", speculative_config=NGRAM)
def test_make(specdecode, test):
    if test.startswith("sweep"):
        specdecode.sweep(["p"], max_tokens=4, num_speculative_tokens=[1, 2], concurrency=[1, 2])
    else:
        specdecode.sample_equivalence(["p"], samples=40, tokens=3)
"""


def _products(
    pytester: pytest.Pytester, *args: str, passed: int = 4
) -> tuple[list[str], dict[str, Any], str]:
    """The summary's sweep and sample_equivalence lines (up to the figures), the JSON report
    and the HTML report of a run of PRODUCTS_SUITE."""
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--specdecode-no-reorder",
                                           "--specdecode-report", "report.json",
                                           "--specdecode-html", "report.html", *args)  # fmt: skip
    result.assert_outcomes(passed=passed)
    summary = result.stdout.str().split("speculative decoding summary", 1)[1]
    lines = sorted(
        line.split(": ", 2)[0] + ": " + line.split(": ", 2)[1].split(" at ")[0]
        for line in summary.splitlines()
        if line.startswith(("sweep ", "sample_equivalence "))
    )
    report = json.loads((pytester.path / "report.json").read_text())
    return lines, report, (pytester.path / "report.html").read_text()


def test_sweeps_and_distribution_checks_made_in_workers_reach_the_controller(
    pytester: pytest.Pytester,
) -> None:
    """What a worker makes reaches the controller's summary, JSON and HTML as a single
    process reports it."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=PRODUCTS_SUITE)
    single = _products(pytester)
    lines, report, page = _products(pytester, "-n", "2")
    assert {r["worker"] for r in report["results"]} == {"gw0", "gw1"}
    assert lines == single[0]
    tests = {
        "sweeps": ["sweep[0]", "sweep[1]"],
        "distribution_checks": ["sampling[0]", "sampling[1]"],
    }
    assert lines == sorted(
        [
            f"sample_equivalence test_suite.py::test_make[{t}]: same distribution"
            for t in tests["distribution_checks"]
        ]
        + [f"sweep test_suite.py::test_make[{t}]: best k per concurrency" for t in tests["sweeps"]]
    )
    for kind, names in tests.items():
        assert sorted(x["nodeid"] for x in report[kind]) == [
            f"test_suite.py::test_make[{t}]" for t in names
        ]
        assert [sorted(x) for x in report[kind]] == [sorted(x) for x in single[1][kind]]
    assert [len(s["points"]) for s in report["sweeps"]] == [4, 4]
    assert all(
        c["samples_per_engine"] == 40 and c["positions"] for c in report["distribution_checks"]
    )
    for t in tests["sweeps"]:
        assert f"Sweep: test_suite.py::test_make[{t}]" in page
    for t in tests["distribution_checks"]:
        assert f"<li>test_suite.py::test_make[{t}]: same distribution" in page
    # a session that only checks distributions still reports them
    lines, report, page = _products(pytester, "-n", "2", "-k", "sampling", passed=2)
    assert len(lines) == 2 and report["results"] == [] and len(report["distribution_checks"]) == 2


LOADS_SUITE = """
import pytest

NGRAM = {"method": "ngram", "num_speculative_tokens": 2}


@pytest.mark.parametrize("i", [0, 1])
@pytest.mark.specdecode("traffic", target="org/target", speculative_config=NGRAM)
def test_load(specdecode, i):
    specdecode.load(["p"], max_tokens=8, rates=[1.0 + i, float("inf")], requests=4)
"""


def test_loads_made_in_workers_reach_the_controller(pytester: pytest.Pytester) -> None:
    """Load results cross pytest-xdist like every other product: the controller's summary,
    JSON (with the checklist) and HTML have both."""
    pytester.makeconftest(FAKE_CONFTEST.format(repo=str(REPO)))
    pytester.makepyfile(test_suite=LOADS_SUITE)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider",
                                           "--specdecode-no-reorder",
                                           "--specdecode-report", "report.json",
                                           "--specdecode-html", "report.html")  # fmt: skip
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    names = [f"test_suite.py::test_load[{i}]" for i in (0, 1)]
    for name in names:
        assert f"load {name}: speculation" in out, out
    report = json.loads((pytester.path / "report.json").read_text())
    assert sorted(x["nodeid"] for x in report["loads"]) == names
    assert sorted(x["points"][0]["rate"] for x in report["loads"]) == [1.0, 2.0]
    assert any(line["question"] == "traffic" for c in report["checklist"] for line in c["lines"])
    page = (pytester.path / "report.html").read_text()
    for name in names:
        assert f"Under load: {name}" in page
