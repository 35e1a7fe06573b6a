"""The prefix cache on both sides: vLLM's counters diffed per round on each engine, the hit
rates, the gap's interval and the rule that flags a speculative side that loses cache hits
(served fake servers: ``tests/plugin/test_served.py``; real engines: the e2e suites)."""

from __future__ import annotations

import pytest

from pytest_specdecode import Bench
from pytest_specdecode.baselines.report import Report
from pytest_specdecode.engines.protocol import Counters
from pytest_specdecode.errors import CounterResetError
from pytest_specdecode.measure.cache import cache_gap, clearly_below
from pytest_specdecode.measure.load import LoadPoint
from pytest_specdecode.measure.result import Result
from pytest_specdecode.measure.stats import difference_interval
from pytest_specdecode.reporting.checklist import PREFIX_CACHE, checklists

from ..fakes import FakeSource
from ..helpers import fake_result

DRAFT = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}


def cached(queries: int, hits: int) -> Counters:
    return Counters(prefix_cache_queries=queries, prefix_cache_hits=hits)


def test_the_cache_counters_are_diffed_with_the_restart_guard() -> None:
    before, after = cached(100, 80), cached(300, 230)
    delta = after.since(before)
    assert (delta.prefix_cache_queries, delta.prefix_cache_hits) == (200, 150)
    assert delta.prefix_cache_hit_rate == 0.75 and Counters().prefix_cache_hit_rate is None
    assert (before + after).prefix_cache_queries == 400
    with pytest.raises(CounterResetError, match="vllm:prefix_cache_hits went down from 80 to 5"):
        cached(300, 5).since(before, "the baseline engine of x")
    assert Counters.of(after.to_dict()) == after


def test_the_gap_is_an_interval_over_paired_rounds() -> None:
    base = [cached(100, 90)] * 3
    spec = [cached(100, 30), cached(100, 40), cached(100, 20)]
    gap, ci = cache_gap(base, spec)
    assert gap == pytest.approx(-0.6)
    assert ci is not None and ci[0] < -0.6 < ci[1] and clearly_below(ci)
    assert cache_gap(base[:1], spec[:1]) == (None, None)  # one round: no interval
    assert cache_gap([Counters()] * 3, spec) == (None, None)  # nothing looked up
    assert difference_interval([0.1, 0.1]) == (pytest.approx(0.1), pytest.approx((0.1, 0.1)))


@pytest.mark.parametrize(
    ("ci", "clear"),
    [((-0.5, -0.3), True), ((-0.5, -0.04), False), ((-0.5, 0.1), False), (None, False)],
)
def test_a_drop_is_clear_only_past_the_margin(ci: tuple[float, float] | None, clear: bool) -> None:
    assert clearly_below(ci) is clear


def bench(source: FakeSource) -> tuple[Bench, list[str]]:
    said: list[str] = []
    made = Bench("org/target", DRAFT, source=source, progress=said.append, trials=4)
    return made, said


@pytest.mark.parametrize("max_engines", [2, 1])
def test_a_run_reports_both_sides_hit_rates_and_warns_on_a_loss(max_engines: int) -> None:
    source = FakeSource()
    source.max_engines = max_engines
    source.cache = {"baseline": (100, 90), "speculative": (100, 30)}
    made, said = bench(source)
    with made:
        result = made.run(["p1", "p2"], max_tokens=4)
    assert result.baseline.prefix_cache_hit_rate == pytest.approx(0.9)
    assert result.speculative.prefix_cache_hit_rate == pytest.approx(0.3)
    assert result.baseline.prefix_cache_queries == 4 * 2 * 100  # the measured rounds only
    assert result.prefix_cache_gap == pytest.approx(-0.6)
    assert result.samples["baseline_prefix_cache_hit_rate"] == pytest.approx([0.9] * 4)
    assert result.notes["prefix_cache"] == "hit rate 0.30 against 0.90"
    assert any("WARNING: the speculative engine's prefix-cache hit rate" in s for s in said)
    assert Result.from_dict(result.to_dict()) == result


def test_a_run_that_keeps_the_cache_is_not_flagged() -> None:
    source = FakeSource()
    source.cache = {"baseline": (100, 90), "speculative": (100, 89)}
    made, said = bench(source)
    with made:
        result = made.run(["p1", "p2"], max_tokens=4)
    assert "prefix_cache" not in result.notes
    assert not any("prefix-cache" in s for s in said)


def test_without_cache_counters_nothing_is_claimed() -> None:
    made, _ = bench(FakeSource())
    with made:
        result = made.run(["p1", "p2"], max_tokens=4)
    assert result.baseline.prefix_cache_hit_rate is None and result.prefix_cache_gap is None
    (checklist,) = checklists(Report.from_dict(_report(result), "r"))
    assert PREFIX_CACHE not in [line.question for line in checklist.lines]


def test_load_points_carry_both_sides_hit_rates() -> None:
    source = FakeSource()
    source.cache = {"baseline": (100, 90), "speculative": (100, 30)}
    made, said = bench(source)
    with made:
        load = made.load(["p1", "p2"], max_tokens=8, rates=[4.0], requests=4)
    (point,) = load.points
    assert point.baseline_prefix_cache_hit_rate == pytest.approx(0.9)
    assert point.speculative_prefix_cache_hit_rate == pytest.approx(0.3)
    assert point.prefix_cache_gap == pytest.approx(-0.6)
    assert any("WARNING: 4 req/s: the speculative engine's" in s for s in said)
    assert LoadPoint.from_dict(point.to_dict()) == point


def test_the_checklist_answers_yes_where_the_cache_is_kept() -> None:
    source = FakeSource()
    source.cache = {"baseline": (100, 90), "speculative": (100, 90)}
    made, _ = bench(source)
    with made:
        result = made.run(["p1", "p2"], max_tokens=4)
    (checklist,) = checklists(Report.from_dict(_report(result), "r"))
    (line,) = [line for line in checklist.lines if line.question == PREFIX_CACHE]
    assert line.answer == "yes" and "0.90 baseline, 0.90 speculative" in line.figure


def test_a_result_without_the_figures_writes_none_and_reads_back() -> None:
    """A result (or load point) without the prefix cache's figures writes none of their keys,
    so a report from before them reads back as it was."""
    data = fake_result().to_dict()
    assert "prefix_cache_gap" not in data and "prefix_cache_hit_rate" not in data["baseline"]
    result = Result.from_dict(data)
    assert result.prefix_cache_gap_ci is None and result.baseline.prefix_cache_hit_rate is None
    assert result.to_dict() == data


def test_the_schema_covers_the_figures_written() -> None:
    import jsonschema

    from pytest_specdecode.baselines.files import results_schema

    source = FakeSource()
    source.cache = {"baseline": (100, 90), "speculative": (100, 30)}
    made, _ = bench(source)
    with made:
        result = made.run(["p1", "p2"], max_tokens=4)
        load = made.load(["p1", "p2"], max_tokens=8, rates=[4.0], requests=4)
    schema = results_schema()
    point = load.points[0].to_dict()
    assert {"prefix_cache_gap_ci", "baseline_prefix_cache_hit_rate"} <= set(point)
    assert set(point) <= set(schema["$defs"]["load_point"]["properties"])
    report = _report(result) | {"loads": [load.to_dict()]}
    jsonschema.Draft202012Validator(schema).validate(report)


def _report(result: Result) -> dict[str, object]:
    from pytest_specdecode.measure.result import Outcome, entry

    return {"format_version": 1, "results": [entry(result, Outcome())], "environment": {}}


def test_the_page_and_the_exports_show_both_sides() -> None:
    from pytest_specdecode.reporting.export import csv_text
    from pytest_specdecode.reporting.html import render_html

    source = FakeSource()
    source.cache = {"baseline": (100, 90), "speculative": (100, 30)}
    made, _ = bench(source)
    with made:
        result = made.run(["p1", "p2"], max_tokens=4)
    report = Report.from_dict(_report(result), "r")
    page = render_html(report)
    assert "base cache hit" in page and "spec cache hit" in page
    assert "prefix cache kept" in page
    text = csv_text(report)
    assert "speculative-prefix-cache-hit-rate" in text and "prefix-cache-gap" in text
