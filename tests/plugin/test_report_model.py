"""``Report.from_dict``: a report read once into typed objects, checked, and given back.

Every product type round-trips (``X.from_dict(x.to_dict()).to_dict() == x.to_dict()``,
through JSON, with unknown figures and optional fields), and a whole report, recorded or made
on the simulated engines, is given back as read: ``Report.from_dict(d).to_dict() == d``.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode.baselines import files
from pytest_specdecode.baselines.compare import Verdict
from pytest_specdecode.baselines.report import Report, ReportEntry
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.measure.bench import Bench
from pytest_specdecode.measure.choice import Candidate, Ranking
from pytest_specdecode.measure.equivalence import DistributionCheck
from pytest_specdecode.measure.kschedule import KSchedule, ScheduleCheck
from pytest_specdecode.measure.load import LoadResult
from pytest_specdecode.measure.phases import PhaseSummary
from pytest_specdecode.measure.result import Outcome, Result, entry
from pytest_specdecode.measure.sweep import Sweep

from .. import load_reports, phase_reports, schedule_reports
from ..fakes import FakeSource, use_fake
from ..helpers import fake_result

#: the simulated engines' models are not downloaded, so their compatibility is not checked
pytestmark = pytest.mark.filterwarnings(
    "ignore::pytest_specdecode.errors.UncheckedCompatibilityWarning"
)

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "docs" / "data" / "example-suites.json"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
DRAFT = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}


def through_json(data: Any) -> Any:
    """``data`` as a report file holds it."""
    return json.loads(json.dumps(data, allow_nan=False))


def report(results: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return through_json({"format_version": 1, "results": results, "environment": {}, **more})


def round_trips(data: dict[str, Any]) -> Report:
    read = Report.from_dict(data, "test report")
    assert read.to_dict() == data
    assert Report.from_dict(read.to_dict(), "again").to_dict() == data
    return read


# -- each type ----------------------------------------------------------------------------------


def unknowns(result: Result) -> Result:
    """``result`` with its optional and non-finite figures exercised."""
    return replace(
        result, label="odd", alpha=math.nan, cost_ratio=None, efficiency=math.inf,
        speedup_ci=(math.nan, 2.0), request_acceptance=(None, 2.5), least_gain=(1, 0),
        notes={"memory": {"draft_gib": 0.1}}, concurrency=4, draft=None,
        baseline=replace(result.baseline, tpot=None, memory_gib=math.nan, kv_cache_tokens=None),
    )  # fmt: skip


@pytest.mark.parametrize("with_outputs", [True, False])
@pytest.mark.parametrize("odd", [False, True])
def test_a_result_round_trips(with_outputs: bool, odd: bool) -> None:
    result = unknowns(fake_result()) if odd else fake_result()
    written = through_json(result.to_dict(with_outputs=with_outputs))
    read = Result.from_dict(written)
    assert read.to_dict(with_outputs=with_outputs) == written
    assert (read.baseline.token_ids == [[1, 2, 3], [4, 5, 6]]) is with_outputs


def test_a_result_with_phases_round_trips_null_figures_included() -> None:
    for phases in (
        phase_reports.phases(),
        phase_reports.phases(break_even=None, acceptance=None, clock="cuda-events"),
        phase_reports.phases(spec=phase_reports.empty_step()),
    ):
        written = through_json(
            replace(fake_result(), phases=PhaseSummary.from_dict(phases)).to_dict()
        )
        assert written["phases"]["acceptance_length"] == phases["acceptance_length"]
        assert Result.from_dict(written).to_dict() == written


def test_an_old_entry_lacking_newer_keys_is_read_with_their_defaults() -> None:
    written = through_json(fake_result().to_dict())
    for key in ("label", "alpha", "phases", "request_acceptance", "least_gain", "samples"):
        del written[key]
    read = Result.from_dict(written)
    assert read.phases is None and read.least_gain == () and read.label == ""
    again = read.to_dict()
    assert Result.from_dict(again).to_dict() == again


def test_a_sweep_round_trips_with_or_without_its_results() -> None:
    sweep = schedule_reports.sweep()
    written = schedule_reports.sweep_dict()
    alone = Sweep.from_dict(written)
    assert alone.to_dict() == written
    assert alone.base_config == sweep.base_config
    k, c, point = alone.points[0]
    assert (k, c, point.label, point.target) == (1, 1, "k=1 c=1", "")  # figures only
    by_key = {(sweep.nodeid, sweep.point_label(k, c)): r for k, c, r in sweep.points}
    linked = Sweep.from_dict(written, by_key)
    assert linked.to_dict() == written
    assert [r for _, _, r in linked.points] == [r for _, _, r in sweep.points]
    # a result under the point's key whose figures are not the point's is not taken for it
    other = {key: replace(r, speedup=r.speedup * 2) for key, r in by_key.items()}
    assert Sweep.from_dict(written, other).points[0][2].target == ""


def test_a_labelled_sweep_with_unknown_figures_round_trips() -> None:
    sweep = Sweep("t.py::test_s", base_config=dict(DRAFT), label="long")
    sweep.add(2, 1, replace(fake_result(), acceptance_rate=math.nan, speedup_ci=(1.2, 2.2)))
    sweep.add(2, 8, replace(fake_result(), phases=PhaseSummary.from_dict(phase_reports.phases())))
    written = through_json(sweep.to_dict())
    assert written["label"] == "long" and written["points"][0]["acceptance_rate"] is None
    assert sweep.point_label(2, 8) == "long k=2 c=8"
    assert Sweep.from_dict(written).to_dict() == written
    assert Sweep.from_dict(through_json(Sweep("t.py::test_s").to_dict())).points == []


def test_a_schedule_check_and_its_schedule_round_trip() -> None:
    for written in (
        schedule_reports.check_dict(),
        schedule_reports.check_dict(schedule_reports.FELL_SHORT),
    ):
        assert ScheduleCheck.from_dict(written).to_dict() == written
    schedule = schedule_reports.sweep_dict()["schedule"]
    assert KSchedule.from_dict(schedule).to_dict() == schedule


@pytest.mark.parametrize(
    "points", [load_reports.CROSSING, load_reports.PAYING, load_reports.SLOWER]
)
def test_a_load_round_trips(points: Any) -> None:
    for written in (
        load_reports.load_dict(points),
        load_reports.load_dict(
            points, label="bursty", slo={"tpot_ms": 25.0}, draft=None, method="ngram"
        ),
    ):
        assert LoadResult.from_dict(written).to_dict() == written


def ranking() -> Ranking:
    figures = {"fast": (2.0, (1.8, 2.2)), "close": (1.9, (1.7, 2.1)), "slow": (0.9, (0.8, 0.95)),
               "unknown": (math.nan, (math.nan, math.nan))}  # fmt: skip
    results = {
        name: replace(fake_result(), label=name, speedup=s, speedup_ci=ci, verdict=verdict)
        for (name, (s, ci)), verdict in zip(
            figures.items(), ["worth it", "worth it", "not worth it", "inconclusive"], strict=True
        )
    }
    return Ranking.of("t.py::test_choose", results)


def test_a_ranking_round_trips_with_or_without_its_results() -> None:
    ranked = ranking()
    written = through_json(ranked.to_dict())
    assert written["candidates"][-1]["speedup"] is None and written["tied"] == ["close"]
    alone = Ranking.from_dict(written)
    assert alone.to_dict() == written and alone.names == ranked.names
    assert alone["fast"].result.target == ""  # figures only
    by_key = {(ranked.nodeid, c.result.label): c.result for c in ranked.candidates}
    linked = Ranking.from_dict(written, by_key)
    assert linked.to_dict() == written and linked["fast"].result == ranked["fast"].result
    single = through_json(Candidate("x", fake_result()).to_dict())
    assert Candidate.from_dict(single).to_dict() == single


def test_a_distribution_check_round_trips() -> None:
    check = Bench("org/target", NGRAM, source=FakeSource(), progress=None).sample_equivalence(
        ["p", "q"], samples=40, tokens=3
    )
    written = through_json(check.to_dict())
    read = DistributionCheck.from_dict(written)
    assert read.to_dict() == written and read.tests == check.tests
    assert DistributionCheck.from_dict(check.to_dict()).to_dict() == check.to_dict()


def test_a_verdict_round_trips_in_both_forms() -> None:
    verdicts = [
        Verdict("t.py::a", "speedup", "regressed", 2.0, 1.5, None, "speedup:5%", "t.py::a", 12),
        Verdict("t.py::a", "speedup", "unchanged", 2.0, 2.0, None, "speedup:5%", "t.py::a"),
        Verdict("t.py::b[x]", "acceptance_rate", "unchanged", 0.5, 0.7, None,
                "acceptance_rate:0.05", "t.py::b"),
        Verdict("t.py::b[x]", "acceptance_rate", "improved", 0.5, 0.7, 0.001,
                "acceptance_rate:5%", "t.py::b"),
        Verdict("t.py::c", "match_rate", "unchanged", None, 1.0, None, "match_rate:5%"),
        Verdict("t.py::d", "", "new", nodeid="t.py::d"),
        Verdict("t.py::e", "", "missing"),
    ]  # fmt: skip
    decisions = [v.decision for v in verdicts]
    assert decisions.count("inconclusive") == 3
    for verdict in verdicts:
        written = through_json(verdict.to_dict())
        read = Verdict.from_dict(written)
        assert read.to_dict() == written
        assert read.status == verdict.status and read.tolerance == verdict.tolerance
        assert Verdict.from_dict(through_json(vars(verdict))) == verdict  # a worker's


# -- whole reports ------------------------------------------------------------------------------


def test_the_recorded_report_round_trips_with_linked_results() -> None:
    data = files.load(RECORDED)
    read = round_trips(data)
    assert {kind for kind in files.PRODUCTS if getattr(read, kind)} == set(files.PRODUCTS)
    assert read.comparisons is None and read.checklist == data["checklist"]
    assert len(read.results) == len(data["results"]) and read.session == data["session"]
    sweep = read.sweeps[0]
    for k, c, result in sweep.points:  # each point is the report's own result
        assert result is read.result(sweep.nodeid, sweep.point_label(k, c))
    for candidate in read.rankings[0].candidates:
        assert candidate.result is read.result(read.rankings[0].nodeid, candidate.name)
    assert read.results[0].with_outputs and not read.results[0].remote


def test_a_report_entry_keeps_its_outcome_worker_and_stored_keys() -> None:
    result = fake_result()
    plain = entry(result, Outcome(False, ("speedup 2.0x below 3.0x",)), with_outputs=False)
    remote = {**entry(result, None), "worker": "gw1"}
    saved = {
        **entry(replace(result, label="saved"), Outcome(True)),
        "environment": {"vllm": "0.32.0", "torch": None, "device": {}, "models": {}},
        "sessions": [{"mean_log_ratio": 0.69, "var_log_ratio": 0.01, "rounds": 30}],
        "from_a_newer_version": {"kept": [1, 2]},
    }
    data = report([plain, remote, saved])
    read = round_trips(data)
    first, second, third = read.results
    assert first.outcome == Outcome(False, ("speedup 2.0x below 3.0x",))
    assert not first.with_outputs and "token_ids" not in data["results"][0]["baseline"]
    assert second.remote and second.worker == "gw1" and second.outcome == Outcome()
    assert third.sessions is not None and third.sessions[0].rounds == 30
    assert third.environment == saved["environment"] and third.extra == {
        "from_a_newer_version": {"kept": [1, 2]}
    }
    assert ReportEntry.from_dict(data["results"][1]).to_dict() == data["results"][1]


def test_a_report_of_each_product_made_by_the_bench_round_trips() -> None:
    source = FakeSource()
    bench = Bench("org/target", DRAFT, source=source, progress=None, name="t.py::test_all")
    bench.run(["p1", "p2"], max_tokens=4)
    sweep = bench.sweep(["p"], max_tokens=4, num_speculative_tokens=[1, 4], concurrency=[1, 8])
    check = bench.check_schedule(sweep.schedule(), ["p"], max_tokens=4)
    ranking = bench.choose_draft(["p"], {"draft": DRAFT, "ngram": NGRAM}, max_tokens=4)
    equivalence = bench.sample_equivalence(["p"], samples=40, tokens=3)
    load = bench.load(["p"], max_tokens=8, rates=[2.0, math.inf], requests=6)
    phases = [r.phases for r in bench.results]
    assert all(p is not None for p in phases)
    base = {
        "results": [entry(r, Outcome(True)) for r in bench.results],
        "session": {"started": "x"},
    }
    products = {
        "sweeps": [sweep.to_dict()], "schedule_checks": [check.to_dict()],
        "rankings": [ranking.to_dict()], "distribution_checks": [equivalence.to_dict()],
        "loads": [load.to_dict()],
    }  # fmt: skip
    for kind, value in products.items():
        round_trips(report(base["results"], session=base["session"], **{kind: value}))
    read = round_trips(report(base["results"], **products))
    assert read.sweeps[0].to_dict() == through_json(sweep.to_dict())
    assert [r for _, _, r in read.sweeps[0].points] == [
        Result.from_dict(through_json(r.to_dict())) for _, _, r in sweep.points
    ]
    assert read.rankings[0].best == ranking.best
    assert read.loads[0].crossover_rate == load.crossover_rate


SUITE = """
import math
import pytest

SPEC = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}

@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_every_product(specdecode):
    specdecode.run(["p1", "p2"], max_tokens=4)
    sweep = specdecode.sweep(["p"], max_tokens=4, num_speculative_tokens=[1, 4],
                             concurrency=[1, 8], label="long")
    specdecode.check_schedule(sweep.schedule(), ["p"], max_tokens=4)
    specdecode.choose_draft(["p"], {"draft": SPEC, "ngram": NGRAM}, max_tokens=4)
    specdecode.sample_equivalence(["p"], samples=40, tokens=3)
    specdecode.load(["p"], max_tokens=8, rates=[2.0, math.inf], requests=6)
"""


def test_reports_the_plugin_writes_round_trip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report, a saved run (entries with their environment and sessions) and a compared
    run (with its comparisons), written by the plugin on the simulated engines."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makepyfile(test_suite=SUITE)
    use_fake(pytester, monkeypatch)
    first = pytester.runpytest_inprocess(
        "--specdecode-report", "r.json", "--specdecode-save", "b.json", "-p", "no:cacheprovider"
    )
    assert first.ret == 0, first.stdout.str()
    second = pytester.runpytest_inprocess(
        "--specdecode-compare", "b.json", "--specdecode-report", "c.json"
    )
    assert second.ret in (0, 1), second.stdout.str()
    for name in ("r.json", "b.json", "c.json"):
        data = files.load(pytester.path / name)
        read = round_trips(data)
        assert {kind for kind in files.PRODUCTS if getattr(read, kind)} == set(files.PRODUCTS)
        assert read.sweeps[0].label == "long" and read.sweeps[0].points[0][2].target == "org/target"
    saved = Report.from_dict(files.load(pytester.path / "b.json"), "b.json")
    assert all(e.sessions for e in saved.results if len(e.result.ratios) >= 2)
    assert all(e.environment is not None for e in saved.results)
    compared = Report.from_dict(files.load(pytester.path / "c.json"), "c.json")
    assert compared.comparisons and all(isinstance(v, Verdict) for v in compared.comparisons)


# -- bad input ----------------------------------------------------------------------------------


def recorded() -> dict[str, Any]:
    data: dict[str, Any] = files.load(RECORDED)
    return data


def broken(edit: Any) -> dict[str, Any]:
    data = copy.deepcopy(recorded())
    edit(data)
    return data


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["results"][2].__setitem__("speedup", "fast"),
         r"run\.json: invalid at results/2/speedup: 'fast' is not of type 'number'"),
        (lambda d: d["results"][0].pop("target"),
         r"run\.json: invalid at results/0: 'target' is a required property"),
        (lambda d: d["results"][1]["baseline"].pop("generated_tokens"),
         r"invalid at results/1/baseline: 'generated_tokens' is a required property"),
        (lambda d: d["results"][0].__setitem__("worker", 3),
         r"invalid at results/0/worker: 3 is not of type 'string', 'null'"),
        (lambda d: d["results"][0]["gate_failures"].append(7),
         r"invalid at results/0/gate_failures/0: 7 is not of type 'string'"),
        (lambda d: d["sweeps"][0]["points"][1].__setitem__("concurrency", "8"),
         r"invalid at sweeps/0/points/1/concurrency: '8' is not of type 'integer'"),
        (lambda d: d["rankings"][0]["candidates"][1].__setitem__("tied", "no"),
         r"invalid at rankings/0/candidates/1/tied: 'no' is not of type 'boolean'"),
        (lambda d: d["rankings"][0]["candidates"][0].pop("name"),
         r"invalid at rankings/0/candidates/0: 'name' is a required property"),
        (lambda d: d["distribution_checks"][0]["tests"][0]["top_baseline"].append([1]),
         r"invalid at distribution_checks/0/tests/0/top_baseline/\d+: \[1\] is too short"),
        (lambda d: d["loads"][0]["points"][0].__setitem__("rate", -1),
         r"invalid at loads/0/points/0/rate"),
        (lambda d: d["schedule_checks"][0].__setitem__("rows", []),
         r"invalid at schedule_checks/0/rows: \[\] should be non-empty"),
        (lambda d: d.__setitem__("comparisons", [{"key": "x"}]),
         r"invalid at comparisons/0: 'figure' is a required property"),
        (lambda d: d.__setitem__("checklist", {"a": 1}),
         r"invalid at checklist: \{'a': 1\} is not of type 'array'"),
        (lambda d: d["results"][3].__setitem__("alpha", math.nan),
         r"invalid at results/3/alpha: nan is not a finite number"),
        (lambda d: d.__setitem__("format_version", 2),
         r"run\.json: format_version 2 is not supported"),
        (lambda d: d.pop("environment"),
         r"invalid at top level: 'environment' is a required property"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_naming_where_and_the_path(edit: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Report.from_dict(broken(edit), "run.json")


def test_what_is_not_a_report_object_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"worker output: invalid at top level: expected a JSON object"
    ):
        Report.from_dict([1, 2], "worker output")


def test_what_only_the_types_refuse_names_the_item() -> None:
    """Past the schemas, a value a type cannot take still names where it is."""
    data = broken(lambda d: d["results"][0].__setitem__("divergences", [
        {"prompt_index": 0, "token_index": 1, "baseline_token": 2, "speculative_token": 3,
         "surprise": True}
    ]))  # fmt: skip
    with pytest.raises(ConfigError, match=r"run\.json: invalid at results/0: .*surprise"):
        Report.from_dict(data, "run.json")
