"""The figure table: one row per figure that the tolerances, the tables, the exports and the
JUnit XML properties all ask (a row added shows up in each), and the one number reader."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_specdecode import figure_table
from pytest_specdecode.baselines.report import Report, ReportEntry
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.figure_table import (
    FIGURE_TABLE,
    PARTS,
    Figure,
    comparable,
    ends,
    exported,
    figure,
    finite,
    headline,
    interval,
    real,
)
from pytest_specdecode.measure.kschedule import ScheduleRow
from pytest_specdecode.measure.phases import PhaseSummary
from pytest_specdecode.reporting import export, table
from pytest_specdecode.tolerances import FIGURES, parse_tolerances

from ..helpers import fake_result
from ..phase_reports import entries


def _report() -> dict[str, Any]:
    """One result with phase figures, one load point and one schedule-check row."""
    side = {"tokens_per_second": 100.0}
    result = {
        "nodeid": "t.py::test_a", "label": "", "speedup": 1.8, "speedup_ci": [1.7, 1.9],
        "acceptance_rate": 0.6, "mean_acceptance_length": 3.4, "match_rate": 1.0,
        "num_drafts": 7, "baseline": side, "speculative": {"tokens_per_second": 180.0},
        "phases": {"break_even_length": 2.1, "break_even_ci": [1.9, 2.3], "draft_share": 0.37,
                   "verify_cost": 1.2, "acceptance_length": 3.4, "spill_ms": 0.5},
    }  # fmt: skip
    point = {
        "rate": 2.0, "tpot_speedup": 1.4, "tpot_speedup_ci": [1.2, 1.6],
        "baseline": {"tpot": {"50": 0.02}, "goodput": 1.5},
        "speculative": {"tpot": {"50": 0.015}, "goodput": 1.8},
    }  # fmt: skip
    row = {"concurrency": 4, "scheduled_k": 3, "fixed_k": 2, "scheduled_speedup": 1.5,
           "scheduled_speedup_ci": [1.4, 1.6], "fixed_speedup": 1.45,
           "fixed_speedup_ci": [1.3, 1.6]}  # fmt: skip
    return {
        "results": [result],
        "loads": [{"nodeid": "t.py::test_load", "label": "", "points": [point]}],
        "schedule_checks": [{"nodeid": "t.py::test_schedule", "rows": [row]}],
    }


def _typed_report() -> Report:
    """:func:`_report` as the typed report: the same figures on a fake result, load test and
    schedule check."""
    from ..load_reports import PAYING, load_result
    from ..phase_reports import phases
    from ..schedule_reports import check

    result = fake_result()
    summary = replace(PhaseSummary.from_dict(phases()), verify_cost=1.2)
    result = replace(
        result, nodeid="t.py::test_a", speedup=1.8, speedup_ci=(1.7, 1.9), acceptance_rate=0.6,
        mean_acceptance_length=3.4, match_rate=1.0, num_drafts=7,
        baseline=replace(result.baseline, tokens_per_second=100.0, prefix_cache_hit_rate=0.9),
        speculative=replace(result.speculative, tokens_per_second=180.0,
                            prefix_cache_hit_rate=0.3),
        phases=summary, prefix_cache_gap=-0.6, prefix_cache_gap_ci=(-0.7, -0.5),
    )  # fmt: skip
    load = load_result(PAYING, nodeid="t.py::test_load")
    side = load.points[0].baseline
    point = replace(
        load.points[0], rate=2.0, tpot_speedup=1.4, tpot_speedup_ci=(1.2, 1.6),
        baseline=replace(side, tpot={50: 0.02}, goodput=1.5),
        speculative=replace(side, tpot={50: 0.015}, goodput=1.8),
        baseline_prefix_cache_hit_rate=0.9, speculative_prefix_cache_hit_rate=0.3,
        prefix_cache_gap=-0.6, prefix_cache_gap_ci=(-0.7, -0.5),
    )  # fmt: skip
    row = ScheduleRow(4, 3, 2, 1.5, (1.4, 1.6), 1.45, (1.3, 1.6), True)
    return Report(
        results=(ReportEntry(result),), environment={},
        loads=(replace(load, points=(point,)),),
        schedule_checks=(replace(check(), nodeid="t.py::test_schedule", rows=(row,)),),
    )  # fmt: skip


def _properties(result: Any) -> dict[str, Any]:
    from pytest_specdecode.plugin.fixtures import SpecDecode

    fixture = SpecDecode.__new__(SpecDecode)
    fixture._node = SimpleNamespace(user_properties=[])  # type: ignore[assignment]
    fixture._record_properties(result)
    return dict(fixture._node.user_properties)  # type: ignore[union-attr]


def _result(**extra: Any) -> Any:
    """A result object as ``_record_properties`` reads it, with :func:`_typed_report`'s
    phase figures."""
    summary = _typed_report().results[0].result.phases
    return SimpleNamespace(
        label="", category="structured", method="draft_model", num_speculative_tokens=4,
        speedup=1.8, speedup_ci=(1.7, 1.9), acceptance_rate=0.6, mean_acceptance_length=3.4,
        match_rate=1.0, baseline=SimpleNamespace(tokens_per_second=100.0),
        speculative=SimpleNamespace(tokens_per_second=180.0), phases=summary, **extra,
    )  # fmt: skip


# --- the table itself --------------------------------------------------------------------------


def test_rows_are_well_formed() -> None:
    assert all(f.part in PARTS for f in FIGURE_TABLE)
    assert len({(f.part, f.name) for f in FIGURE_TABLE}) == len(FIGURE_TABLE)
    measures = [f.measure for f in FIGURE_TABLE if f.measure]
    assert len(measures) == len(set(measures))
    properties = [f.junit for f in FIGURE_TABLE if f.junit]
    properties += [f"{f.ci}_{end}" for f in FIGURE_TABLE if f.junit and f.ci for end in "lh"]
    assert len(properties) == len(set(properties))
    for part in ("result", "load", "schedule"):  # github-action-benchmark's entry of each
        assert headline(part).higher_is_better and headline(part).unit == "x"
    assert not any(f.headline for f in exported("phases"))
    assert all(f.log_scale <= f.comparable for f in FIGURE_TABLE)
    with pytest.raises(KeyError):
        figure("no_such_figure")


def test_every_comparable_figure_is_a_row_and_the_tolerances_ask_the_table() -> None:
    assert FIGURES == {f.name: f.log_scale for f in comparable()}
    # the order "known: ..." lists them in
    assert list(FIGURES) == [
        "speedup", "acceptance_rate", "mean_acceptance_length", "baseline_tokens_per_second",
        "speculative_tokens_per_second", "match_rate",
    ]  # fmt: skip
    for f in comparable():
        assert f.part == "result" and parse_tolerances(f"{f.name}:5%")[0].figure == f.name
    shown_only = [f.name for f in FIGURE_TABLE if not f.comparable]
    assert "alpha" in shown_only
    for name in shown_only:
        with pytest.raises(ConfigError, match=f"unknown figure '{name}'; known: speedup, "):
            parse_tolerances(f"{name}:5%")


def test_every_export_measure_is_a_row() -> None:
    report = _typed_report()
    written = {m for benchmark in export.bmf(report).values() for m in benchmark}
    assert written == {f.measure for f in FIGURE_TABLE if f.measure}
    smaller = export.github_action_benchmark_smaller(report)
    rows = {f.measure: f for f in FIGURE_TABLE if f.measure}
    for entry in smaller:
        row = rows[entry["name"].rsplit(" ", 1)[1]]
        assert not row.higher_is_better and entry["unit"] == row.unit
    assert len(smaller) == len([f for f in exported("phases") if not f.higher_is_better])
    bigger = export.github_action_benchmark(report)
    assert [e["name"].rsplit(" ", 1)[1] for e in bigger] == [
        headline(p).measure for p in ("result", "load", "schedule")
    ]
    assert bigger[1]["extra"] == (
        "baseline p50 TPOT ms 20.0; speculative p50 TPOT ms 15.0; "
        "baseline goodput req/s 1.50; speculative goodput req/s 1.80; "
        "baseline cache hit rate 0.900; speculative cache hit rate 0.300; "
        "cache hit rate gap -0.600 (95% CI -0.700--0.500)"
    )


def test_summary_table_headers_of_figures_come_from_the_table() -> None:
    headed = [f.header for f in FIGURE_TABLE if f.header]
    optional = {title for _, title in table.OPTIONAL}
    assert set(headed) <= set(table.HEADERS) | optional | set(table.RANKING_HEADERS)
    assert table.HEADERS[3:11] == (
        "base tok/s", "spec tok/s", "speedup [95% CI]", "accept rate", "accept len", "alpha",
        "eff.", "match",
    )  # fmt: skip
    cells = table.rows(entries([{**_report()["results"][0], "phases": None}]))[0]
    assert cells[3:6] == ["100.0", "180.0", "1.80x [1.70-1.90]"]


def test_a_new_row_shows_up_in_export_and_junit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a figure is one row: the exports and the JUnit properties pick it up."""
    before_bmf, before_props = export.bmf(_typed_report()), _properties(_result(num_drafts=7))
    assert "num-drafts" not in before_bmf["t.py::test_a"]
    assert "specdecode.num_drafts" not in before_props
    drafts = Figure("num_drafts", "result", "drafts", "drafts", True, ".0f",
                    measure="num-drafts", junit="num_drafts", digits=0)  # fmt: skip
    spill = Figure("spill_ms", "phases", "spill ms", "ms", False, ".2f", measure="spill-ms",
                   path=("speculative", "decode", "other_ms"), junit="spill_ms")  # fmt: skip
    monkeypatch.setattr(figure_table, "FIGURE_TABLE", (*FIGURE_TABLE, drafts, spill))

    report = _typed_report()
    measures = export.bmf(report)["t.py::test_a"]
    assert measures["num-drafts"] == {"value": 7.0}
    assert measures["spill-ms"] == {"value": 0.1}
    extra = export.github_action_benchmark(report)[0]["extra"]
    assert "(95% CI -0.700--0.500); drafts 7; break-even length 2.10" in extra
    assert extra.endswith("; spill ms 0.10")
    smaller = export.github_action_benchmark_smaller(report)
    assert {"name": "t.py::test_a spill-ms", "unit": "ms", "value": 0.1} in smaller

    props = _properties(_result(num_drafts=7))
    assert props["specdecode.num_drafts"] == 7
    assert props["specdecode.spill_ms"] == 0.1
    assert {k: v for k, v in props.items() if "num_drafts" not in k and "spill" not in k} == (
        before_props
    )


def test_a_row_without_a_measure_or_property_stays_out(monkeypatch: pytest.MonkeyPatch) -> None:
    shown = [dataclasses.replace(f, measure=None, junit=None) if f.name == "acceptance_rate"
             else f for f in FIGURE_TABLE]  # fmt: skip
    monkeypatch.setattr(figure_table, "FIGURE_TABLE", tuple(shown))
    assert "acceptance-rate" not in export.bmf(_typed_report())["t.py::test_a"]
    assert "acceptance rate" not in export.github_action_benchmark(_typed_report())[0]["extra"]
    assert "specdecode.acceptance_rate" not in _properties(_result())


# --- reading numbers ----------------------------------------------------------------------------


def test_finite_and_real_read_numbers_only() -> None:
    for value in (None, True, False, "1.5", [1.0], {"a": 1}):
        assert real(value) is None and finite(value) is None
    assert finite(2) == 2.0 and isinstance(finite(2), float)
    assert finite(math.nan) is None and finite(math.inf) is None
    assert real(math.inf) == math.inf and math.isnan(real(math.nan) or 0.0)


def test_interval_needs_two_numbers() -> None:
    assert interval({"ci": [1, 2.5]}, "ci") == (1.0, 2.5)
    for ci in (None, [1.0], [1.0, 2.0, 3.0], "ab", [1.0, None], [1.0, math.nan], {"a": 1, "b": 2}):
        assert interval({"ci": ci}, "ci") is None
    assert ends({"ci": [1.0, None]}, "ci") == (1.0, None)
    assert ends({"ci": [math.nan, 2]}, "ci", real)[1] == 2.0
    assert ends({}, "ci") == (None, None)


def test_a_figure_is_read_where_its_row_says() -> None:
    point = _report()["loads"][0]["points"][0]
    tpot = figure("baseline_tpot_p50", "load")
    assert tpot.read(point) == 0.02 and tpot.value(point) == pytest.approx(20.0)
    assert tpot.value({"baseline": None}) is None
    assert figure("speculative_tokens_per_second").read(_report()["results"][0]) == 180.0
    assert figure("speculative_tokens_per_second").attribute(_result()) == 180.0
    # on the typed objects: attributes, a percentile by its int, nan as not measured
    typed = _typed_report()
    typed_point = typed.loads[0].points[0]
    assert tpot.attribute(typed_point) == 0.02 and tpot.number(typed_point) == pytest.approx(20.0)
    assert figure("tpot_speedup", "load").bounds(typed_point) == (1.2, 1.6)
    result = typed.results[0].result
    assert figure("break_even_length", "phases").bounds(result.phases) == (1.9, 2.3)
    assert figure("speedup").number(replace(result, speedup=math.nan)) is None
    assert figure("speedup").bounds(replace(result, speedup_ci=(1.0, math.nan))) is None
    assert figure("fixed_speedup", "schedule").number(typed.schedule_checks[0].rows[0]) == 1.45
