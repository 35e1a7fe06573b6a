"""The "worth it?" checklist: one line per question, yes/no/unknown, from a report (the typed
model: report dicts read with ``Report.from_dict``)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from pytest_specdecode.reporting.checklist import Checklist, checklists, spread

from ..helpers import fake_result
from ..phase_reports import typed

TARGET = "/models/tiny/target"
DRAFT = "/models/tiny/draft"
W, N = "worth it", "not worth it"


def row(
    test: str = "test_a",
    category: str = "structured",
    label: str = "",
    speedup: float = 2.0,
    ci: tuple[float | None, float | None] = (1.8, 2.2),
    verdict: str | None = None,
    *,
    concurrency: int | None = None,
    prompts: int = 8,
    method: str = "draft_model",
    draft: str | None = DRAFT,
    kv: tuple[int | None, int | None] = (None, None),
    extra: float | None = None,
    max_tokens: int = 64,
    **more: Any,
) -> dict[str, Any]:
    """A report entry with the fields the checklist reads."""
    low, high = ci
    if verdict is None:
        verdict = W if (low or 0) > 1 else N if (high or 2) < 1 else "inconclusive"
    return {
        "nodeid": f"suite/test_{category}.py::{test}", "category": category, "label": label,
        "target": TARGET, "method": method, "draft": draft, "num_speculative_tokens": 4,
        "speedup": speedup, "speedup_ci": [low, high], "verdict": verdict,
        "concurrency": concurrency, "num_prompts": prompts, "acceptance_rate": 0.7,
        "max_tokens": max_tokens, "extra_memory_gib": extra,
        "baseline": {"tokens_per_second": 100.0, "kv_cache_tokens": kv[0]},
        "speculative": {"tokens_per_second": 200.0, "kv_cache_tokens": kv[1]},
        **more,
    }  # fmt: skip


def one(results: list[dict[str, Any]], **report: Any) -> Checklist:
    (found,) = checklists(typed({"results": results, **report}))
    return found


def answer(checklist: Checklist, question: str) -> tuple[str, str]:
    (line,) = [x for x in checklist.lines if x.question == question]
    return line.answer, line.figure


# --- spare memory ----------------------------------------------------------------------------


def test_memory_yes_when_the_kv_cache_left_holds_the_batch() -> None:
    c = one([row(concurrency=32, kv=(349_520, 262_144), extra=0.21, max_tokens=48)])
    verdict, figure = answer(c, "spare memory")
    assert verdict == "yes"
    assert figure == (
        "the draft costs 0.21 GiB; KV cache 349,520 -> 262,144 tokens (-25%): 8,192 per "
        "sequence at batch 32 (a request needs 48 + its prompt)"
    )


def test_memory_names_a_head_as_a_head() -> None:
    c = one([row(method="eagle3", concurrency=32, kv=(349_520, 262_144), extra=0.02)])
    assert answer(c, "spare memory")[1].startswith("the head costs 0.02 GiB; KV cache")


def test_memory_no_when_the_batch_does_not_fit_the_kv_cache_left() -> None:
    c = one([row(concurrency=None, prompts=256, kv=(40_000, 12_800), extra=1.5, max_tokens=64),
             row(concurrency=1, kv=(40_000, 12_800), extra=1.5)])  # fmt: skip
    verdict, figure = answer(c, "spare memory")
    assert verdict == "no"
    assert "50 per sequence at batch 256 (a request needs 64 + its prompt)" in figure
    assert "too little KV cache left at batch 256" in c.summary


def test_memory_unknown_without_kv_figures() -> None:
    verdict, figure = answer(one([row(extra=0.4)]), "spare memory")
    assert (verdict, figure) == (
        "unknown", "the draft costs 0.40 GiB; KV cache capacity not reported",
    )  # fmt: skip
    verdict, figure = answer(one([row()]), "spare memory")
    assert (verdict, figure) == (
        "unknown",
        "extra memory not measured; KV cache capacity not reported",
    )


def test_memory_of_a_proposer_without_a_model() -> None:
    verdict, figure = answer(one([row(method="ngram", draft=None)]), "spare memory")
    assert verdict == "yes" and figure.startswith("ngram has no draft model")
    verdict, figure = answer(one([row(method="ngram", draft=None, extra=0.01)]), "spare memory")
    assert (verdict, figure) == ("yes", "the proposer costs 0.01 GiB: none to speak of")


# --- batch size ------------------------------------------------------------------------------


def test_batch_yes_when_the_gain_lasts_to_the_largest_batch() -> None:
    c = one([
        row("test_c", "concurrency", "batch 1", 2.52, (2.34, 2.72), concurrency=1),
        row("test_c", "concurrency", "batch 32", 1.45, (1.17, 1.80), prompts=32),
    ])  # fmt: skip
    verdict, figure = answer(c, "batch size")
    assert verdict == "yes"
    assert figure == (
        "still 1.45x [1.17-1.80] at batch 32, the largest measured in test_c "
        "(2.52x [2.34-2.72] at batch 1)"
    )
    assert "still 1.45x at batch 32" in c.summary


def test_batch_no_where_the_gain_ends() -> None:
    c = one([
        row("test_c", "concurrency", "batch 1", 2.1, (1.9, 2.3), concurrency=1),
        row("test_c", "concurrency", "batch 8", 1.3, (1.1, 1.5), concurrency=8),
        row("test_c", "concurrency", "batch 32", 0.8, (0.7, 0.9), concurrency=32),
    ])  # fmt: skip
    verdict, figure = answer(c, "batch size")
    assert verdict == "no"
    assert figure == "gone by batch 32 (0.80x [0.70-0.90]) in test_c; 1.30x [1.10-1.50] at batch 8"
    assert c.summary.endswith("; gone by batch 32")


def test_batch_from_a_sweep_uses_its_crossover() -> None:
    grid = ((1, 1, 1.5), (4, 1, 2.0), (1, 16, 1.1), (4, 16, 1.2), (1, 64, 0.8), (4, 64, 0.7))
    points = [
        {"num_speculative_tokens": k, "concurrency": c, "speedup": s,
         "speedup_ci": [s - 0.1, s + 0.05]} for k, c, s in grid
    ]  # fmt: skip
    sweep = {"nodeid": "suite/test_concurrency.py::test_s", "points": points, "crossover": 64}
    results = [row("test_s", "concurrency", f"k={p['num_speculative_tokens']} c={p['concurrency']}",
                   p["speedup"], tuple(p["speedup_ci"]), concurrency=p["concurrency"])
               for p in points]  # fmt: skip
    verdict, figure = answer(one(results, sweeps=[sweep]), "batch size")
    assert verdict == "no"
    assert figure.endswith(
        "in test_s; gone by batch 64 (0.80x [0.70-0.85]) in test_s; 1.20x [1.10-1.25] at batch 16"
    )


def test_batch_no_when_slower_from_the_smallest_batch() -> None:
    c = one([row("test_c", concurrency=1, speedup=0.9, ci=(0.8, 0.95)),
             row("test_c", concurrency=8, speedup=0.7, ci=(0.6, 0.8))])  # fmt: skip
    assert answer(c, "batch size") == (
        "no", "slower already at batch 1 (0.90x [0.80-0.95]) in test_c",
    )  # fmt: skip


def test_batch_unknown_with_one_batch_per_test_or_an_undecided_largest_batch() -> None:
    c = one([row("test_a", concurrency=1), row("test_b", concurrency=8)])
    verdict, figure = answer(c, "batch size")
    assert verdict == "unknown"
    assert figure.startswith("measured only at batch 1, 8 in each test;")
    c = one([row("test_c", concurrency=1), row("test_c", concurrency=16, ci=(0.9, 1.2))])
    verdict, figure = answer(c, "batch size")
    assert verdict == "unknown" and figure.endswith("the interval at batch 16 contains 1.0")


# --- workload --------------------------------------------------------------------------------


def test_workload_one_line_per_category() -> None:
    c = one([
        row("test_json", "structured", "unguided", 1.85, (1.61, 2.13)),
        row("test_schema", "structured", "json_schema", 0.96, (0.78, 1.18)),
        row("test_story", "creative", "", 0.61, (0.58, 0.63)),
        row("test_sum", "summarization", "", 1.03, (0.96, 1.11)),
    ])  # fmt: skip
    assert answer(c, "workload: structured") == (
        "yes", "unguided: 1.85x [1.61-2.13] at batch 8, acceptance 0.70; json_schema: 0.96x "
        "[0.78-1.18] at batch 8, acceptance 0.70",
    )  # fmt: skip
    assert answer(c, "workload: creative")[0] == "no"
    assert answer(c, "workload: summarization")[0] == "unknown"
    assert c.summary == (
        "worth it for structured at batch 8: 1.85x; unclear for summarization: 1.03x "
        "[0.96-1.11]; not for creative: 0.61x"
    )


def test_workload_names_the_per_prompt_spread_when_measured() -> None:
    c = one([row(request_acceptance=[4.2, 3.9, None, 4.5, 2.1, 4.4, 4.0, 3.8, 4.1])])
    assert answer(c, "workload: structured")[1].endswith(
        "per-prompt accept len p10/p50/p90 3.3/4.0/4.4"
    )


def test_a_verdict_missing_from_a_file_comes_from_the_interval() -> None:
    c = one([row(category="a", verdict="", ci=(1.2, 1.4)), row(category="b", verdict="",
             ci=(0.5, 0.9)), row(category="c", verdict="", ci=(None, None))])  # fmt: skip
    assert [answer(c, f"workload: {x}")[0] for x in "abc"] == ["yes", "no", "unknown"]


# --- context ---------------------------------------------------------------------------------


def test_context_compares_long_with_short_prompts() -> None:
    c = one([
        row("test_long", "long_context", "short prompt", 1.82, (1.64, 2.03), concurrency=1),
        row("test_long", "long_context", "long prompt", 1.56, (1.54, 1.59), concurrency=1),
    ])  # fmt: skip
    assert answer(c, "context") == (
        "yes", "1.56x [1.54-1.59] behind long prompts (test_long [long prompt]) against 1.82x "
        "[1.64-2.03] on short ones: 0.86 of the short-prompt speedup",
    )  # fmt: skip
    assert "holds behind long prompts: 1.56x" in c.summary


def test_context_no_when_long_prompts_lose_the_gain() -> None:
    c = one([row("test_x", "chat", "short", 1.5, (1.3, 1.7)),
             row("test_x", "chat", "long context", 0.9, (0.8, 0.95))])  # fmt: skip
    verdict, figure = answer(c, "context")
    assert verdict == "no" and "0.60 of the short-prompt speedup" in figure
    assert "not behind long prompts: 0.90x" in c.summary


def test_context_unknown_when_not_measured_or_undecided() -> None:
    assert answer(one([row()]), "context")[0] == "unknown"
    c = one([row("test_l", "long_context", "", 1.05, (0.9, 1.2))])
    verdict, figure = answer(c, "context")
    assert verdict == "unknown" and figure.startswith("1.05x [0.90-1.20] behind long prompts")


# --- choice, groups, forms -------------------------------------------------------------------


def _ranking() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    results = [
        row("test_choose", "chat", "good", 2.1, (1.95, 2.26)),
        row("test_choose", "chat", "worse", 1.3, (1.2, 1.4), draft="/models/tiny/worse"),
        row("test_choose", "chat", "ngram", 1.25, (1.1, 1.45), method="ngram", draft=None),
    ]
    candidates = [{"name": r["label"], "speedup": r["speedup"], "speedup_ci": r["speedup_ci"],
                   "verdict": r["verdict"], "tied": r["label"] == "ngram"}
                  for r in results]  # fmt: skip
    ranking = {"nodeid": "suite/test_chat.py::test_choose", "candidates": candidates,
               "best": "good", "tied": ["ngram"]}  # fmt: skip
    return results, ranking


def test_one_checklist_per_target_and_proposer_with_the_choice() -> None:
    results, ranking = _ranking()
    found = checklists(typed({"results": results, "rankings": [ranking]}))
    assert [c.title for c in found] == [
        "draft_model (draft) on target", "draft_model (worse) on target", "ngram on target",
    ]  # fmt: skip
    names = ("good", "worse", "ngram")
    choices = [answer(c, f"choice: {name}") for c, name in zip(found, names, strict=True)]
    assert choices[0] == ("yes", "good ranks 1 of 3 in test_choose: 2.10x [1.95-2.26]; the "
                                 "best worth it")  # fmt: skip
    assert choices[1] == ("no", "worse ranks 2 of 3 in test_choose: 1.30x [1.20-1.40]; best: "
                                "good 2.10x [1.95-2.26]")  # fmt: skip
    assert choices[2][0] == "unknown" and choices[2][1].endswith("(within the 95% interval)")


def test_every_question_is_answered_yes_no_or_unknown_and_plain_json() -> None:
    results, ranking = _ranking()
    found = checklists(typed({"results": results, "rankings": [ranking], "sweeps": []}))
    data = json.loads(json.dumps([c.to_dict() for c in found], allow_nan=False))
    for c in data:
        assert set(c) == {"target", "method", "draft", "proposer", "summary", "lines"}
        questions = [line["question"] for line in c["lines"]]
        assert questions[:2] == ["spare memory", "batch size"] and "context" in questions
        assert {line["answer"] for line in c["lines"]} <= {"yes", "no", "unknown"}
    text = found[0].text()
    assert text[0] == f"draft_model (draft) on target: {found[0].summary}"
    assert text[1].startswith("  UNKNOWN spare memory ")


def test_an_empty_report_or_one_of_unknown_figures_gives_no_crash() -> None:
    assert checklists(typed({})) == []
    assert checklists(typed({"results": [], "sweeps": []})) == []
    (c,) = checklists(typed({"results": [{"nodeid": "t::a", "speedup_ci": [None, None]}]}))
    assert {line.answer for line in c.lines} == {"unknown"}
    assert c.summary == "unclear for -: 1.00x"


@pytest.mark.parametrize(
    ("values", "expected"),
    [([], None), ([None], None), ([2.0], (2.0, 2.0, 2.0)),
     ([1.0, 2.0, 3.0, 4.0, 5.0], (1.4, 3.0, 4.6))],
)  # fmt: skip
def test_spread_interpolates_like_numpy(values: list[Any], expected: Any) -> None:
    got = spread(values)
    assert got == (None if expected is None else pytest.approx(expected))


def test_spread_matches_the_results_own() -> None:
    values = (4.2, 3.9, None, 4.5, 2.1, 4.4, 4.0, 3.8)
    result = dataclasses.replace(fake_result(), request_acceptance=values)
    assert result.acceptance_spread is not None
    assert spread(values) == pytest.approx(result.acceptance_spread)


# --- traffic (specdecode.load) ---------------------------------------------------------------


def _traffic(*loads: dict[str, Any], results: list[dict[str, Any]] | None = None) -> Checklist:
    return one(results if results is not None else [row()], loads=list(loads))


def test_traffic_unknown_says_how_to_measure_it() -> None:
    verdict, figure = answer(one([row()]), "traffic")
    assert verdict == "unknown"
    assert "specdecode.load(prompts, max_tokens=..., rates=[...], requests=...)" in figure
    assert [line.question for line in one([row()]).lines][:3] == [
        "spare memory", "batch size", "traffic"
    ]  # fmt: skip


def test_traffic_yes_up_to_the_rate_where_it_stops_paying() -> None:
    from ..load_reports import CROSSING, load_dict, load_result

    c = _traffic(load_dict(CROSSING))
    verdict, figure = answer(c, "traffic")
    (_, at_2, at_once) = load_result(CROSSING).points
    assert verdict == "yes"
    assert figure == (
        "speculation pays up to 2 req/s (p50 TPOT 30.0 ms -> 20.0 ms, gain 1.50x "
        f"[{at_2.tpot_speedup_ci[0]:.2f}-{at_2.tpot_speedup_ci[1]:.2f}]); not at all at once "
        "(p50 TPOT 40.0 ms -> 42.0 ms, gain 0.95x "
        f"[{at_once.tpot_speedup_ci[0]:.2f}-{at_once.tpot_speedup_ci[1]:.2f}]) in test_traffic"
    )
    assert c.summary.endswith("; pays up to 2 req/s under traffic")


def test_traffic_yes_at_every_rate_says_it_is_the_highest_measured() -> None:
    from ..load_reports import PAYING, load_dict

    c = _traffic(load_dict(PAYING))
    verdict, figure = answer(c, "traffic")
    assert verdict == "yes"
    assert figure.startswith(
        "speculation pays up to 100 req/s, the highest rate measured (p50 TPOT 40.0 ms -> "
        "30.0 ms, gain 1.33x ["
    )
    assert figure.endswith("]) in test_traffic")
    assert "still 1.33x under traffic at 100 req/s" in c.summary


def test_traffic_yes_with_every_request_at_once() -> None:
    import math

    from ..load_reports import load_dict

    c = _traffic(load_dict(((1.0, 0.024, 0.012), (math.inf, 0.040, 0.030))))
    verdict, figure = answer(c, "traffic")
    assert verdict == "yes"
    assert figure.startswith(
        "speculation pays at every rate measured, all at once included (p50 TPOT 40.0 ms -> "
        "30.0 ms, gain 1.33x ["
    )
    assert c.summary.endswith("; still 1.33x under traffic, all at once")


def test_traffic_no_when_slower_at_every_rate() -> None:
    from ..load_reports import SLOWER, load_dict

    c = _traffic(load_dict(SLOWER, label="long"))
    verdict, figure = answer(c, "traffic")
    assert verdict == "no"
    assert figure.startswith(
        "speculation does not pay at any measured rate (at 1 req/s: p50 TPOT 20.0 ms -> "
        "25.0 ms, gain 0.80x ["
    )
    assert figure.endswith("in test_traffic [long]")
    assert "not under traffic: 0.80x at 1 req/s" in c.summary


def test_traffic_unknown_when_every_interval_contains_one() -> None:
    from ..load_reports import load_dict

    verdict, figure = answer(_traffic(load_dict(((1.0, 0.020, 0.0201),))), "traffic")
    assert verdict == "unknown"
    assert figure.endswith("in test_traffic: the interval contains 1.0 at every rate")


def test_a_load_joins_its_proposers_checklist_or_has_its_own() -> None:
    from ..load_reports import PAYING, SLOWER, load_dict

    ngram = load_dict(SLOWER, method="ngram", draft=None)
    found = checklists(typed({"results": [row()], "loads": [load_dict(PAYING), ngram]}))
    assert [(c.method, c.draft) for c in found] == [("draft_model", DRAFT), ("ngram", None)]
    assert answer(found[0], "traffic")[0] == "yes"
    assert [(x.question, x.answer) for x in found[1].lines] == [("traffic", "no")]
    assert found[1].summary == "not under traffic: 0.80x at 1 req/s"
    other = load_dict(PAYING, target="/models/other")
    assert len(checklists(typed({"results": [row()], "loads": [other]}))) == 2


# --- a sweep's k schedule (Sweep.schedule) and its check ------------------------------------
def _swept(sweep: dict[str, Any]) -> list[dict[str, Any]]:
    """The sweep's runs as the report's results hold them."""
    return [
        row(sweep["nodeid"].rsplit("::", 1)[-1], "k_schedule",
            f"k={p['num_speculative_tokens']} c={p['concurrency']}", p["speedup"],
            tuple(p["speedup_ci"]), concurrency=p["concurrency"])
        for p in sweep["points"]
    ]  # fmt: skip


SCHEDULE = (
    "k=4 at batch 1, k=2 up to 8, off above 8 (measured up to batch 32; larger batches stay off, "
    "as vLLM carries the last range forward) in test_k_schedule"
)


def test_batch_size_leads_with_the_schedule_and_whether_its_check_held() -> None:
    from ..schedule_reports import FELL_SHORT, check_dict, sweep_dict

    sweep = sweep_dict()
    checked = one(_swept(sweep), sweeps=[sweep], schedule_checks=[check_dict()])
    verdict, figure = answer(checked, "batch size")
    assert verdict == "no"  # the gain ends at batch 32: the schedule turns speculation off there
    assert figure == (
        f"{SCHEDULE}; check_schedule held at c=1, c=8, c=32 (within 5% of the best fixed k); "
        "gone by batch 32 (0.89x [0.85-0.93]) in test_k_schedule; 1.82x [1.77-1.87] at batch 8"
    )
    assert checked.summary.endswith("; gone by batch 32")
    short = one(_swept(sweep), sweeps=[sweep], schedule_checks=[check_dict(FELL_SHORT)])
    assert answer(short, "batch size")[1] == (
        f"{SCHEDULE}; check_schedule did not hold: c=8: schedule (k=2) 1.40x (95% CI "
        "1.35x-1.45x) vs fixed k=4 1.82x (95% CI 1.72x-1.92x) (schedule/fixed 95% CI "
        "0.73-0.81): does not hold; gone by batch 32 "
        "(0.89x [0.85-0.93]) in test_k_schedule; 1.82x [1.77-1.87] at batch 8"
    )
    unchecked = answer(one(_swept(sweep), sweeps=[sweep]), "batch size")
    assert unchecked == ("no", f"{SCHEDULE}; gone by batch 32 (0.89x [0.85-0.93]) in "
                               "test_k_schedule; 1.82x [1.77-1.87] at batch 8")  # fmt: skip


def test_a_schedule_answers_where_one_concurrency_left_the_batch_size_unknown() -> None:
    from ..schedule_reports import GRID, sweep_dict

    at_one = {key: value for key, value in GRID.items() if key[1] == 1}
    sweep = sweep_dict(grid=at_one)
    c = one(_swept(sweep), sweeps=[sweep])
    assert answer(c, "batch size") == (
        "yes", "k=4 at every batch size (measured up to batch 1; larger batches keep k=4, as "
        "vLLM carries the last range forward) in test_k_schedule",
    )  # fmt: skip
    assert c.summary.endswith("; still 2.29x at batch 1 with k=4")
    slower = sweep_dict(grid={key: value for key, value in GRID.items() if key[1] == 32})
    off = one(_swept(slower), sweeps=[slower])
    assert answer(off, "batch size") == (
        "no", "off at every batch size (measured up to batch 32; larger batches stay off, as "
        "vLLM carries the last range forward) in test_k_schedule",
    )  # fmt: skip
    assert off.summary.endswith("off at every batch size up to 32")


def test_a_schedule_whose_chosen_k_does_not_clearly_pay_leaves_it_unknown() -> None:
    from ..schedule_reports import sweep_dict

    sweep = sweep_dict(grid={(1, 4): (1.05, (0.97, 1.13)), (2, 4): (1.02, (0.95, 1.09))})
    verdict, figure = answer(one(_swept(sweep), sweeps=[sweep]), "batch size")
    assert verdict == "unknown"
    assert figure.startswith("k=1 at every batch size (measured up to batch 4;")
    assert figure.endswith("in test_k_schedule: no chosen k's interval lies above 1.0")
