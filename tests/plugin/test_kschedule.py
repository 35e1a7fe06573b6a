"""``Sweep.schedule``, ``Bench.check_schedule`` and ``assert_schedule_holds`` on the simulated
backend; vLLM's own rules for ``num_speculative_tokens_per_batch_size`` (real engines:
``tests/e2e/test_e2e_kschedule.py``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_specdecode import (
    Bench,
    ConfigError,
    GateError,
    KSchedule,
    ScheduleCheck,
    assert_schedule_holds,
)
from pytest_specdecode.baselines import files
from pytest_specdecode.engines import dynamic_sd
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.measure.kschedule import KChoice, choose_k, ranges
from pytest_specdecode.measure.result import Result
from pytest_specdecode.measure.sweep import Sweep

from ..fakes import CONFTEST, FakeSource, use_fake
from ..helpers import fake_result
from ..schedule_reports import SCHEDULE_SUITE

DRAFT = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}
KEY = dynamic_sd.SCHEDULE_KEY
REPO = Path(__file__).resolve().parents[2]
needs_rules = pytest.mark.skipif(
    dynamic_sd.installed_rules() is None, reason="the installed vLLM has no dynamic-SD rules"
)


def result(speedup: float, low: float | None = None, high: float | None = None) -> Result:
    low = speedup * 0.95 if low is None else low
    high = speedup * 1.05 if high is None else high
    return replace(fake_result(), speedup=speedup, speedup_ci=(low, high))


def sweep_of(table: dict[tuple[int, int], Result], base: dict[str, object] | None = None) -> Sweep:
    sweep = Sweep("t.py::test_s", base_config=dict(base if base is not None else DRAFT))
    for (k, c), r in sorted(table.items()):
        sweep.add(k, c, r)
    return sweep


# -- the choice at one concurrency -------------------------------------------------------------
def test_the_smallest_k_within_the_tolerance_of_the_best_is_chosen() -> None:
    by_k = {1: result(1.50), 2: result(1.92), 4: result(2.00)}
    choice = choose_k(8, by_k, 0.05)
    assert (choice.k, choice.best_k) == (2, 4)
    assert choice.speedup == 1.92 and choice.best_speedup == 2.00
    assert "k=2: 1.92x is within 5% of the fastest, k=4 (2.00x)" in choice.reason
    # 1.92 >= 0.95 * 2.00 = 1.90, but not >= 0.97 * 2.00 = 1.94
    assert choose_k(8, by_k, 0.03).k == 4
    assert choose_k(8, by_k, 0.0).k == 4
    assert choose_k(8, by_k, 0.25).k == 1  # 1.50 >= 0.75 * 2.00
    assert choose_k(8, by_k, 0.0).reason == "k=4: the fastest (2.00x)"


def test_speculation_is_off_where_the_best_interval_lies_below_one() -> None:
    off = choose_k(32, {2: result(0.90, 0.85, 0.95), 4: result(0.80, 0.70, 0.90)}, 0.05)
    assert (off.k, off.best_k, off.speedup, off.speedup_ci) == (0, 2, 1.0, (1.0, 1.0))
    assert off.best_speedup_ci == (0.85, 0.95)
    assert "off: even the best k=2 is slower than the target alone (0.90x" in off.reason
    # below 1.0 by its point estimate, but the interval reaches 1.0: not switched off
    assert choose_k(32, {2: result(0.97, 0.93, 1.01)}, 0.05).k == 2


def test_ranges_start_at_one_cover_every_measured_concurrency_and_merge_equal_neighbours() -> None:
    def choices(*pairs: tuple[int, int]) -> list[KChoice]:
        return [KChoice(c, k, k, 1.0, (1.0, 1.0), 1.0, (1.0, 1.0), "") for c, k in pairs]

    assert ranges(choices((1, 4), (8, 2), (32, 0))) == ((1, 1, 4), (2, 8, 2), (9, 32, 0))
    assert ranges(choices((4, 4), (16, 4), (64, 1))) == ((1, 16, 4), (17, 64, 1))
    assert ranges(choices((32, 0), (2, 4), (8, 4))) == ((1, 8, 4), (9, 32, 0))  # any order
    assert ranges(choices((1, 2), (8, 4), (16, 2))) == ((1, 1, 2), (2, 8, 4), (9, 16, 2))


# -- the schedule of a sweep -----------------------------------------------------------------
TABLE = {
    (1, 1): result(1.60), (2, 1): result(1.90), (4, 1): result(2.30),
    (1, 8): result(1.50), (2, 8): result(1.75), (4, 8): result(1.80),
    (1, 32): result(0.90, 0.85, 0.95), (2, 32): result(0.85, 0.8, 0.9),
    (4, 32): result(0.70, 0.65, 0.75),
}  # fmt: skip


def test_a_sweep_gives_contiguous_ranges_and_a_config_for_vllm() -> None:
    schedule = sweep_of(TABLE).schedule()
    assert [(c.concurrency, c.k, c.best_k) for c in schedule.choices] == [
        (1, 4, 4), (8, 2, 4), (32, 0, 1),
    ]  # fmt: skip
    assert schedule.entries == ((1, 1, 4), (2, 8, 2), (9, 32, 0))
    assert schedule.speculative_config == {
        **DRAFT, "num_speculative_tokens": 4, KEY: [[1, 1, 4], [2, 8, 2], [9, 32, 0]],
    }  # fmt: skip
    assert schedule.summary() == (
        "k=4 at batch 1, k=2 up to 8, off above 8 (measured up to batch 32; larger batches "
        "stay off, as vLLM carries the last range forward)"
    )
    assert [schedule.k_at(b) for b in (1, 2, 8, 9, 32, 500)] == [4, 2, 2, 0, 0, 0]
    assert sweep_of(TABLE).schedule(tolerance=0.0).entries == ((1, 8, 4), (9, 32, 0))


def test_the_engine_k_is_the_largest_scheduled_one_and_a_schedule_in_the_base_is_replaced() -> None:
    base = {**DRAFT, "num_speculative_tokens": 8, KEY: [[1, 4, 8]]}
    table = {(k, c): result(1.0 + 0.1 * k) for k in (1, 2) for c in (1, 16)}
    schedule = sweep_of(table, base).schedule(tolerance=0.0)
    assert schedule.entries == ((1, 16, 2),)
    assert schedule.speculative_config["num_speculative_tokens"] == 2
    assert KEY not in schedule.base_config
    assert schedule.summary().startswith("k=2 at every batch size (measured up to batch 16;")
    slow = {(k, 1): result(0.5, 0.4, 0.6) for k in (1, 2)}
    off = sweep_of(slow).schedule()
    assert off.entries == ((1, 1, 0),) and off.speculative_config["num_speculative_tokens"] == 4


def test_a_uniform_schedule_is_written_as_a_plain_fixed_k() -> None:
    """One k at every batch size is vLLM's plain ``num_speculative_tokens``: a schedule runs
    the engine differently even where it never changes k (vllm#49548)."""
    table = {(k, c): result(1.0 + 0.1 * k) for k in (1, 2) for c in (1, 8, 32)}
    schedule = sweep_of(table, {**DRAFT, KEY: [[1, 4, 8]]}).schedule(tolerance=0.0)
    assert schedule.speculative_config == {**DRAFT, "num_speculative_tokens": 2}
    assert schedule.entries == ((1, 32, 2),) and schedule.uniform
    data = json.loads(json.dumps(schedule.to_dict()))
    assert KEY not in data["speculative_config"] and data["entries"] == [[1, 32, 2]]
    assert KSchedule.from_dict(data) == schedule
    # more than one range, or speculation off everywhere: still a schedule
    assert KEY in sweep_of(TABLE).schedule().speculative_config
    off = sweep_of({(k, 1): result(0.5, 0.4, 0.6) for k in (1, 2)}).schedule()
    assert not off.uniform and off.speculative_config[KEY] == [[1, 1, 0]]


def test_a_sweep_of_a_scheduled_config_runs_each_k_fixed() -> None:
    source = FakeSource()
    bench = Bench("org/target", {**DRAFT, KEY: [[1, 8, 4], [9, 64, 1]]}, source=source,
                  progress=None)  # fmt: skip
    sweep = bench.sweep(["p"], max_tokens=4, num_speculative_tokens=[1, 2], concurrency=[16])
    assert sweep.base_config == DRAFT
    assert [r.speculative_config for r in bench.results] == [
        {**DRAFT, "num_speculative_tokens": k} for k in (1, 2)
    ]


def test_bad_tolerances_and_empty_sweeps_are_refused() -> None:
    for bad in (-0.1, 1.0, "5%", True):
        with pytest.raises(ConfigError, match=r"schedule\(tolerance=...\): expected a fraction"):
            sweep_of(TABLE).schedule(tolerance=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="the sweep measured nothing"):
        Sweep("t.py::test_s").schedule()


def test_the_schedule_round_trips_and_travels_with_the_sweep() -> None:
    sweep = sweep_of(TABLE)
    schedule = sweep.schedule()
    data = json.loads(json.dumps(schedule.to_dict(), allow_nan=False))
    assert KSchedule.from_dict(data) == schedule
    assert data["speculative_config"] == schedule.speculative_config
    assert data["summary"] == schedule.summary()
    assert sweep.to_dict()["schedule"] == schedule.to_dict()
    assert Sweep("t.py::test_s").to_dict()["schedule"] is None


# -- vLLM's rules ------------------------------------------------------------------------------
@needs_rules
@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ([[2, 8, 4]], r"first batch-size range must start at 1.*\[2, 8, 4\] starts at 2; "
                      r"start it at 1, e.g. \[1, 8, 4\]"),
        ([[1, 8, 4], [8, 16, 2]], r"non-overlapping.*\[8, 16, 2\] starts at or before the end "
                                  r"of \[1, 8, 4\].*e.g. \[9, 16, 2\]"),
        ([[1, 8, -1]], r"entry \[1, 8, -1\]: .*>= 0; use 0 to switch speculation off"),
        ([[1, 8, 4], [16, 9, 2]], r"entry \[16, 9, 2\]: Batch-size range start must be <= end"
                                  r".*swap them: \[9, 16, 2\]"),
        ([[0, 8, 4]], r"entry \[0, 8, 4\]: Batch-size range \(0, 8\) must be positive"),
        ([[1, 8, 6]], r"entry \[1, 8, 6\] asks for k=6 but num_speculative_tokens is 4, and "
                      r"vLLM caps every entry at it; set num_speculative_tokens to 6"),
        ([], r"expected a non-empty list of \[start, end, k\]"),
        ([[1, 8]], r"entry \[1, 8\] is not \[start, end, k\]"),
        ([[1, "8", 4]], r"entry \[1, '8', 4\] is not \[start, end, k\]"),
    ],
)  # fmt: skip
def test_a_bad_schedule_is_refused_before_any_engine_starts(schedule: object, message: str) -> None:
    source = FakeSource()
    config = {**DRAFT, KEY: schedule}
    with pytest.raises(ConfigError, match=r"Bench\(speculative_config=...\): " + KEY + ": "):
        Bench("org/target", config, source=source, progress=None)
    with pytest.raises(ConfigError, match=message):
        Bench("org/target", config, source=source, progress=None)
    assert source.starts == 0


@needs_rules
def test_the_rules_are_vllms_own_and_vllm_is_not_imported() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from pytest_specdecode.engines import dynamic_sd as d;"
        "r = d.installed_rules(); assert r is not None and r.source.endswith('utils.py');"
        "assert r.validate([[9, 16, 2], [1, 8, 4]]) == [(1, 8, 4), (9, 16, 2)];"
        "print(sorted(m for m in ('vllm', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@needs_rules
def test_k_at_agrees_with_vllms_lookup() -> None:
    rules = dynamic_sd.installed_rules()
    assert rules is not None
    for entries in ([(1, 1, 4), (2, 8, 2), (9, 32, 0)], [(1, 4, 3), (10, 16, 1)], [(1, 2, 4)]):
        dense = rules.lookup([list(e) for e in entries], 64, 4)
        assert [dynamic_sd.k_at(entries, b) for b in range(1, 65)] == dense[1:]


def test_a_rules_file_that_imports_vllm_is_not_loaded(tmp_path: Path) -> None:
    rules = tmp_path / "utils.py"
    body = (
        "def validate_and_normalize_dynamic_sd_schedule(s):\n    return s\n"
        "def build_dynamic_sd_schedule_lookup(s, b, k):\n    return []\n"
    )
    rules.write_text("from vllm.logger import init_logger\n" + body)
    assert dynamic_sd.load_rules(rules) is None
    rules.write_text("from __future__ import annotations\n" + body)
    assert dynamic_sd.load_rules(rules) is not None
    assert dynamic_sd.load_rules(tmp_path / "missing.py") is None


def test_without_vllms_rules_only_the_shape_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dynamic_sd, "installed_rules", lambda: None)
    assert dynamic_sd.check_schedule([[9, 16, 2], [1, 8, 4]], 4, "x") == [(1, 8, 4), (9, 16, 2)]
    with pytest.raises(ConfigError, match=r"x: num_speculative_tokens_per_batch_size: entry"):
        dynamic_sd.check_schedule([[1, 8]], 4, "x")


@pytest.mark.parametrize(
    ("config", "kwargs", "message"),
    [
        ({"method": "custom_class", "model": "pkg.Proposer"}, {},
         "does not work with method 'custom_class': vLLM calls a custom_class proposer "
         "without the scheduled k"),
        ({"method": "ngram"}, {"data_parallel_size": 2},
         "with data_parallel_size=2: vLLM drops the schedule"),
    ],
)  # fmt: skip
def test_methods_and_settings_that_would_ignore_a_schedule_are_refused(
    config: dict[str, object], kwargs: dict[str, object], message: str
) -> None:
    spec = {**config, "num_speculative_tokens": 4, KEY: [[1, 8, 4], [9, 64, 1]]}
    with pytest.raises(ConfigError, match=message):
        EngineConfig.create("org/target", spec, kwargs).check_speculative_config("here")


# -- the check against the best fixed k --------------------------------------------------------
SPEEDUPS = {
    (1, 1): 1.6, (2, 1): 1.9, (4, 1): 2.3,
    (1, 8): 1.5, (2, 8): 1.75, (4, 8): 1.8,
    (1, 32): 0.9, (2, 32): 0.85, (4, 32): 0.7,
}  # fmt: skip


def swept(source: FakeSource) -> tuple[Bench, KSchedule]:
    source.speedup_fn = lambda k, c: SPEEDUPS[(k, c)]
    bench = Bench("org/target", DRAFT, source=source, progress=None, trials=6)
    sweep = bench.sweep(["p1", "p2"], max_tokens=8, num_speculative_tokens=[1, 2, 4],
                        concurrency=[1, 8, 32])  # fmt: skip
    return bench, sweep.schedule()


def test_check_runs_the_schedule_against_the_best_fixed_k_at_each_concurrency() -> None:
    source = FakeSource()
    bench, schedule = swept(source)
    assert schedule.entries == ((1, 1, 4), (2, 8, 2), (9, 32, 0))
    check = bench.check_schedule(schedule, ["p1", "p2"], max_tokens=8)
    labels = [r.label for r in bench.results[9:]]
    assert labels == [
        "fixed k=4 c=1", "fixed k=4 c=8", "schedule c=1", "schedule c=8",
    ]  # fmt: skip  # the engines running from the sweep first, then the schedule's; none at k=0
    rows = {row.concurrency: row for row in check.rows}
    assert (rows[1].scheduled_k, rows[1].fixed_k) == (4, 4)
    assert (rows[8].scheduled_k, rows[8].fixed_k) == (2, 4)
    assert rows[8].scheduled_speedup == pytest.approx(1.75, rel=0.05)
    assert rows[8].fixed_speedup == pytest.approx(1.8, rel=0.05)
    assert rows[32].scheduled_speedup is None and rows[32].fixed_speedup == pytest.approx(0.9, 0.05)
    assert "speculation off: the sweep's best k=1 was slower than the target alone" in rows[32].note
    assert "vLLM still runs one draft forward pass per step at k=0" in rows[32].note
    assert check.holds and all(row.holds for row in check.rows)
    assert_schedule_holds(check)
    scheduled = bench.results[11]  # after the fixed k's two runs
    assert scheduled.speculative_config[KEY] == [[1, 1, 4], [2, 8, 2], [9, 32, 0]]
    assert ScheduleCheck.from_dict(json.loads(json.dumps(check.to_dict()))) == check


def test_a_schedule_slower_than_the_fixed_k_fails_the_gate_with_both_speedups() -> None:
    source = FakeSource()
    bench, schedule = swept(source)
    # at check time k=2 at batch 8 has become much slower than k=4
    source.speedup_fn = lambda k, c: {**SPEEDUPS, (2, 8): 1.2}[(k, c)]
    check = bench.check_schedule(schedule, ["p1", "p2"], max_tokens=8, concurrency=[8, 20])
    assert [r.concurrency for r in check.rows] == [8, 20]
    assert not check.holds and [r.concurrency for r in check.failing] == [8]
    assert check.rows[1].scheduled_k == 0 and check.rows[1].fixed_speedup is None
    with pytest.raises(GateError) as info:
        assert_schedule_holds(check)
    message = str(info.value)
    assert "is more than 5% slower than the best fixed k at concurrency 8:" in message
    row = check.rows[0]
    assert row.scheduled_speedup == pytest.approx(1.2, rel=0.05)
    assert row.fixed_speedup == pytest.approx(1.8, rel=0.05)
    assert f"c=8: schedule (k=2) {row.scheduled_speedup:.2f}x" in message
    assert f"vs fixed k=4 {row.fixed_speedup:.2f}x" in message
    assert "95% CI" in message and "(schedule/fixed 95% CI 0." in message
    assert "does not hold (the interval of schedule/fixed needs to reach 0.95)" in message
    assert row.ratio_ci is not None and row.ratio_ci[1] < 0.95
    assert "concurrency 20" not in message.split(":")[2]
    again = Bench("org/target", DRAFT, source=source, progress=None, trials=6)
    loose = again.check_schedule(schedule, ["p"], max_tokens=8, concurrency=[8], tolerance=0.5)
    assert loose.holds and loose.tolerance == 0.5
    with pytest.raises(
        ConfigError,
        match=r"check_schedule\(\): its result 'schedule c=8' would be stored under"
        r" the key 'bench\[schedule c=8\]', which this test's earlier check_schedule\(\) "
        r"holds; give each check_schedule\(\) of a test a distinct label, e.g\. "
        r'check_schedule\(..., label="short"\)',
    ):
        again.check_schedule(schedule, ["p"], max_tokens=8, concurrency=[8])  # one per label


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": [0]}, r"check_schedule\(concurrency=...\): expected a list of distinct"),
        ({"concurrency": [1, 1]}, "distinct positive integers"),
        ({"tolerance": 2}, r"check_schedule\(tolerance=...\): expected a fraction"),
        ({"label": ""}, r"check_schedule\(label=...\): expected a non-empty string"),
        ({"label": 3}, r"check_schedule\(label=...\): expected a non-empty string"),
    ],
)
def test_bad_check_arguments_are_refused_before_anything_runs(
    kwargs: dict[str, object], message: str
) -> None:
    source = FakeSource()
    bench, schedule = swept(source)
    before = len(bench.results)
    with pytest.raises(ConfigError, match=message):
        bench.check_schedule(schedule, ["p"], max_tokens=8, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="expected the KSchedule of sweep.schedule"):
        bench.check_schedule(schedule.to_dict(), ["p"], max_tokens=8)  # type: ignore[arg-type]
    assert len(bench.results) == before


# -- in pytest ---------------------------------------------------------------------------------
def test_the_fixture_reports_the_schedule_and_its_check(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = use_fake(pytester, monkeypatch)
    source.speedup_fn = lambda k, c: {1: 1.5, 4: 2.0}[k] if c == 1 else {1: 1.3, 4: 1.1}[k]
    pytester.makepyfile(test_suite=SCHEDULE_SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdecode-report", "report.json")
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "report.json").read_text())
    (sweep,) = report["sweeps"]
    assert sweep["schedule"]["entries"] == [[1, 1, 4], [2, 16, 1]]
    (check,) = report["schedule_checks"]
    assert check["nodeid"] == "test_suite.py::test_schedule" and check["holds"] is True
    assert [(r["concurrency"], r["scheduled_k"], r["fixed_k"]) for r in check["rows"]] == [
        (1, 4, 4), (16, 1, 1),
    ]  # fmt: skip
    assert check["schedule"]["speculative_config"][KEY] == [[1, 1, 4], [2, 16, 1]]
    labels = [r["label"] for r in report["results"]]
    assert labels[-4:] == ["fixed k=1 c=16", "fixed k=4 c=1", "schedule c=1", "schedule c=16"]


def test_schedule_checks_made_in_workers_reach_the_controller(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(CONFTEST.format(repo=str(REPO)))
    pytester.makepyfile(
        test_suite=SCHEDULE_SUITE.replace("def test_schedule(specdecode):",
                                 "@pytest.mark.parametrize('i', range(2))\n"
                                 "def test_schedule(specdecode, i):")
    )  # fmt: skip
    result = pytester.runpytest_subprocess(
        "-n", "2", "-p", "no:cacheprovider", "--specdecode-no-reorder",
        "--specdecode-report", "report.json",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    report = json.loads((pytester.path / "report.json").read_text())
    assert sorted(c["nodeid"] for c in report["schedule_checks"]) == [
        "test_suite.py::test_schedule[0]", "test_suite.py::test_schedule[1]",
    ]  # fmt: skip
    assert all(s["schedule"] is not None for s in report["sweeps"])


def test_a_row_fails_only_when_the_schedule_is_shown_slower() -> None:
    from pytest_specdecode.measure.kschedule import holds

    # the interval of schedule/fixed, tolerance 5%: the floor is 0.95
    assert holds((0.81, 0.98), 0.05)  # 0.89, but its interval reaches the floor
    assert holds((0.90, 0.95), 0.05)
    assert not holds((0.77, 0.945), 0.05)  # even its upper end is below the floor
    assert holds((0.97, 1.001), 0.0) and not holds((0.9, 0.999), 0.0)


def aa_rows(
    tolerance: float, reps: int = 2000, rounds: int = 5, sd: float = 0.1, *, fixed_exact: bool
) -> int:
    """How many of ``reps`` A/A rows fail: the scheduled engine and the fixed k with the same
    true speedup (2x), each measured in its own ``rounds`` rounds with log-normal noise of
    ``sd``, judged by ``check_row`` (``fixed_exact``: the rule before, which took the fixed k's
    point estimate as exact: schedule's upper end below (1 - tolerance) x fixed)."""
    import math
    import random

    from pytest_specdecode.measure.kschedule import KChoice, Planned, check_row
    from pytest_specdecode.measure.stats import ratio_interval

    rng = random.Random(20261206)
    choice = KChoice(8, 2, 2.0, (1.9, 2.1), 4, 2.0, (1.9, 2.1), "")
    planned = Planned(8, 2, 4, choice, True)
    failed = 0
    for _ in range(reps):
        measured = {}
        for name in ("schedule c=8", "fixed k=4 c=8"):
            ratios = [2.0 * math.exp(rng.gauss(0.0, sd)) for _ in range(rounds)]
            speedup, ci = ratio_interval(ratios)
            measured[name] = replace(fake_result(), speedup=speedup, speedup_ci=ci, ratios=ratios)
        row = check_row(planned, measured, tolerance)
        if fixed_exact:
            assert row.scheduled_speedup_ci and row.fixed_speedup
            failed += row.scheduled_speedup_ci[1] < (1 - tolerance) * row.fixed_speedup
        else:
            failed += not row.holds
    return failed


def test_an_a_a_pair_fails_at_the_designed_rate_and_the_old_rule_did_not() -> None:
    # tolerance 0: the row fails where the 95% interval's upper end is below 1: at most 2.5%
    # of A/A pairs by design (35 of 2000 with this seed; Welch's df make it a little careful)
    assert 20 <= aa_rows(0.0, fixed_exact=False) <= 50
    # the rule that took the fixed k's point estimate as exact: about twice as often (103)
    assert aa_rows(0.0, fixed_exact=True) > 80
    # the default 5% tolerance at 10% round noise: 3 of 2000 (the old rule: 17)
    assert aa_rows(0.05, fixed_exact=False) <= 6 < aa_rows(0.05, fixed_exact=True)


def test_a_uniform_schedule_of_the_best_k_is_that_engine_run_once_not_compared() -> None:
    source = FakeSource()
    source.speedup_fn = lambda k, c: {1: 1.5, 4: 2.0}[k] / (1 + c / 64)
    bench = Bench("org/target", DRAFT, source=source, progress=None, trials=4)
    sweep = bench.sweep(["p1"], max_tokens=8, num_speculative_tokens=[1, 4], concurrency=[1, 8])
    schedule = sweep.schedule()
    assert schedule.uniform and schedule.speculative_config == {**DRAFT}
    check = bench.check_schedule(schedule, ["p1"], max_tokens=8)
    labels = [r.label for r in bench.results[4:]]
    assert labels == ["schedule c=1", "schedule c=8"]  # no "fixed k=4" run: the same engine
    for row in check.rows:
        assert row.same_engine and row.holds and row.ratio_ci is None
        assert row.fixed_speedup == row.scheduled_speedup
        assert "is the fixed k=4 engine: holds (the same configuration, not compared)" in (
            row.describe()
        )
    assert check.holds
    assert ScheduleCheck.from_dict(json.loads(json.dumps(check.to_dict()))) == check


# -- two sweeps or two checks in one test -------------------------------------------------------
TWICE = """
import pytest
from pytest_specdecode import assert_schedule_holds

SPEC = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}
mark = pytest.mark.specdecode("k_schedule", target="org/target", speculative_config=SPEC)
GRID = dict(num_speculative_tokens=[1, 4], concurrency=[1, 16])

@mark
def test_sweeps(specdecode):
    short = specdecode.sweep(["p"], max_tokens=8, label="short", **GRID)
    long = specdecode.sweep(["a longer prompt"], max_tokens=32, label="long", **GRID)
    check = specdecode.check_schedule(short.schedule(), ["p"], max_tokens=8, label="short")
    again = specdecode.check_schedule(long.schedule(), ["p"], max_tokens=32, label="long")
    assert_schedule_holds(check)
    assert_schedule_holds(again)

@mark
def test_second_sweep_unlabelled(specdecode):
    specdecode.sweep(["p"], max_tokens=8, **GRID)
    specdecode.sweep(["a longer prompt"], max_tokens=32, **GRID)

@mark
def test_second_check_unlabelled(specdecode):
    schedule = specdecode.sweep(["p"], max_tokens=8, **GRID).schedule()
    specdecode.check_schedule(schedule, ["p"], max_tokens=8)
    specdecode.check_schedule(schedule, ["p"], max_tokens=32)
"""


def test_two_sweeps_and_two_checks_of_a_test_need_labels(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With distinct labels both sweeps and both checks run and are reported apart; without,
    the second call is refused before it measures anything, naming itself and the fix."""
    source = use_fake(pytester, monkeypatch)
    source.speedup_fn = lambda k, c: {1: 1.5, 4: 2.0}[k] if c == 1 else {1: 1.3, 4: 1.1}[k]
    pytester.makepyfile(test_suite=TWICE)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--specdecode-report", "report.json", "--specdecode-trials", "3"
    )
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_suite.py::test_second_sweep_unlabelled: sweep(): its result 'k=1 c=1' would "
            "be stored under the key 'test_suite.py::test_second_sweep_unlabelled[[]k=1 c=1[]]', "
            "which this test's earlier sweep() holds; give each sweep() of a test a distinct "
            'label, e.g. sweep(..., label="short") and sweep(..., label="long")',
            "*test_suite.py::test_second_check_unlabelled: check_schedule(): its result "
            "'schedule c=1' would be stored under the key *, which this test's earlier "
            "check_schedule() holds; give each check_schedule() of a test a distinct label*",
        ],
        consecutive=False,
    )
    assert "TypeError" not in result.stdout.str()
    report = files.load(pytester.path / "report.json")  # schema-checked
    by_test: dict[str, list[str]] = {}
    for r in report["results"]:
        by_test.setdefault(r["nodeid"].rsplit("::", 1)[-1], []).append(r["label"])
    grid = ["k=1 c=1", "k=1 c=16", "k=4 c=1", "k=4 c=16"]
    # the refused second calls measured nothing: only the first call's results
    assert by_test["test_second_sweep_unlabelled"] == grid
    checked = ["fixed k=1 c=16", "fixed k=4 c=1", "schedule c=1", "schedule c=16"]
    assert sorted(by_test["test_second_check_unlabelled"]) == sorted(grid + checked)
    labelled = by_test["test_sweeps"]
    assert sorted(labelled) == sorted(
        [f"{which} {name}" for which in ("short", "long") for name in grid + checked]
    )
    sweeps = [s for s in report["sweeps"] if s["nodeid"].endswith("test_sweeps")]
    assert [s["label"] for s in sweeps] == ["short", "long"]
    assert [s["schedule"]["nodeid"] for s in sweeps] == [
        "test_suite.py::test_sweeps[short]", "test_suite.py::test_sweeps[long]"
    ]  # fmt: skip
    checks = [c for c in report["schedule_checks"] if c["nodeid"].endswith("test_sweeps")]
    assert [c["label"] for c in checks] == ["short", "long"]
    assert ScheduleCheck.from_dict(checks[1]).label == "long"
    out = result.stdout.str()
    assert "test_suite.py::test_sweeps[short]: best k per concurrency" in out
    assert "test_suite.py::test_sweeps[long]: schedule " in out


def test_a_sweep_label_must_be_a_non_empty_string() -> None:
    bench = Bench("org/target", DRAFT, source=FakeSource(), progress=None, trials=3)
    for bad in ("", " ", 3):
        with pytest.raises(ConfigError, match=r"sweep\(label=...\): expected a non-empty string"):
            bench.sweep(["p"], max_tokens=4, num_speculative_tokens=[1], label=bad)  # type: ignore[arg-type]
    assert bench.results == []
    sweep = bench.sweep(["p"], max_tokens=4, num_speculative_tokens=[1, 2], label="a")
    assert [r.label for r in bench.results] == ["a k=1 c=1", "a k=2 c=1"] and sweep.label == "a"
    with pytest.raises(ConfigError, match=r"run\(label='a k=1 c=1'\): this test already stored"):
        bench.run(["p"], max_tokens=4, label="a k=1 c=1")
