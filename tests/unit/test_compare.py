"""The regression rule on synthetic trial data (no engine needed)."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import pytest

import pytest_specdecode.baselines.compare as compare_module
from pytest_specdecode.baselines.compare import (
    DEFAULT_TOLERANCES,
    StoredResults,
    Tolerance,
    check_baseline_rounds,
    compare_one,
    compare_runs,
    comparison_entries,
    configuration_changes,
    environment_differences,
    nothing_compared,
    parse_tolerances,
    too_few_rounds,
)
from pytest_specdecode.baselines.report import ReportEntry
from pytest_specdecode.errors import ConfigError

from ..helpers import fake_result

DEFAULT_TRIALS = 5
BASELINE_TRIALS = 30  # a fixed saving run's rounds (DEFAULT_SAVED; sized by noise: 20-90)
NEW_TRIALS = 20  # the most rounds of a compared run (the rule decides when to stop)
NOISE = 0.05  # sd of a round's log speedup: about what 2 busy CPU cores give


def entry(**figures: Any) -> ReportEntry:
    """A report entry of a result with ``figures`` (the tokens per second of each side as
    ``baseline_tps`` and ``speculative_tps``), the rest a fake result's."""
    result = fake_result()
    baseline = replace(result.baseline, tokens_per_second=figures.pop("baseline_tps", 100.0))
    speculative = replace(
        result.speculative, tokens_per_second=figures.pop("speculative_tps", 100.0)
    )
    figures = {"nodeid": "t.py::test_a", "samples": {}, **figures}
    return ReportEntry(replace(result, baseline=baseline, speculative=speculative, **figures))


def changed(e: ReportEntry, **figures: Any) -> ReportEntry:
    """``e`` with some of its result's figures changed."""
    return replace(e, result=replace(e.result, **figures))


def synthetic(
    rng: random.Random, speedup: float, acceptance: float = 0.8, trials: int = DEFAULT_TRIALS
) -> ReportEntry:
    ratios = [speedup * math.exp(rng.gauss(0, NOISE)) for _ in range(trials)]
    rates = [min(1.0, max(0.0, acceptance + rng.gauss(0, 0.02))) for _ in range(trials)]
    return entry(
        speedup=math.exp(sum(math.log(r) for r in ratios) / trials),
        ratios=ratios,
        acceptance_rate=sum(rates) / trials,
        samples={"acceptance_rate": rates},
        match_rate=1.0,
        num_prompts=8,
        speculative_tps=100.0 * speedup,
    )


SPEEDUP_5 = Tolerance("speedup", 0.05, relative=True)


def test_parse_tolerances() -> None:
    assert parse_tolerances("speedup:10%, acceptance_rate:0.05") == [
        Tolerance("speedup", 0.10, True),
        Tolerance("acceptance_rate", 0.05, False),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("speed:10%", "unknown figure 'speed'"),
        ("speedup", "should look like"),
        ("speedup:ten%", "'ten%' is not a number"),
        ("speedup:-1%", "must be above 0"),
        ("speedup:0%", "'speedup:0%': a tolerance must be above 0"),
        ("acceptance_rate:0%", "'acceptance_rate:0%': a tolerance must be above 0"),
        ("match_rate:0", "'match_rate:0': a tolerance must be above 0"),
        ("speedup:0.0", "e.g. speedup:1%, or leave speedup out"),
        ("speedup:nan%", "must be above 0"),
        ("speedup:100%", "a relative tolerance must be below 100%"),
        ("match_rate:250%", "a relative tolerance must be below 100%"),
        ("", "no tolerance given"),
    ],
)
def test_bad_tolerances_name_the_source(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_tolerances(text, "ini specdecode_compare_fail")
    assert str(info.value).startswith("ini specdecode_compare_fail")


def test_a_tolerance_just_below_100_percent_reads_back_as_given() -> None:
    # a verdict re-reads its tolerance from str(): it must not round up to the refused 100%
    (tolerance,) = parse_tolerances("acceptance_rate:99.99999%")
    assert parse_tolerances(str(tolerance)) == [tolerance]


def stored(rng: random.Random, speedup: float = 2.0) -> ReportEntry:
    return synthetic(rng, speedup, trials=BASELINE_TRIALS)


def compared(rng: random.Random, speedup: float) -> ReportEntry:
    return synthetic(rng, speedup, trials=NEW_TRIALS)


def test_false_alarm_rate_on_identical_distributions() -> None:
    """At most 1% of no-change comparisons fail (the rule replayed over the new rounds)."""
    rng = random.Random(1)
    runs = 2000
    alarms = sum(
        compare_one(stored(rng), compared(rng, 2.0), SPEEDUP_5).status == "regressed"
        for _ in range(runs)
    )
    assert alarms / runs <= 0.01


def test_detects_a_ten_percent_drop() -> None:
    rng = random.Random(2)
    runs = 1000
    verdicts = [compare_one(stored(rng), compared(rng, 1.8), SPEEDUP_5) for _ in range(runs)]
    assert sum(v.status == "regressed" for v in verdicts) / runs >= 0.95
    assert all(v.rounds is not None and v.rounds <= NEW_TRIALS for v in verdicts)
    assert "decided after" in verdicts[0].describe()


def test_small_real_drop_within_tolerance_rarely_fails() -> None:
    rng = random.Random(3)
    verdicts = [
        compare_one(stored(rng), compared(rng, 1.96), Tolerance("speedup", 0.1, True))
        for _ in range(1000)
    ]
    assert sum(v.status == "regressed" for v in verdicts) / len(verdicts) <= 0.01


def test_a_rise_beyond_the_tolerance_is_an_improvement() -> None:
    rng = random.Random(6)
    verdict = compare_one(stored(rng), compared(rng, 2.6), SPEEDUP_5)
    assert verdict.status == "improved" and verdict.change is not None and verdict.change > 0.2


def test_too_few_stored_rounds_are_named() -> None:
    rng = random.Random(7)
    short = synthetic(rng, 2.0)
    assert too_few_rounds([stored(rng), short]) == [f"t.py::test_a ({DEFAULT_TRIALS} rounds)"]


def test_a_baseline_of_too_few_rounds_is_refused_when_the_speedup_is_judged() -> None:
    rng = random.Random(7)
    shorts = [
        ReportEntry(replace(synthetic(rng, 2.0).result, nodeid=f"t.py::test_{i}")) for i in range(7)
    ]
    with pytest.raises(ConfigError) as info:
        check_baseline_rounds(shorts, [SPEEDUP_5], "baseline file b.json", "b.json")
    message = str(info.value)
    assert message.startswith(
        "baseline file b.json: the regression rule needs at least 20 stored rounds per result"
    )
    assert f"these have fewer: t.py::test_0 ({DEFAULT_TRIALS} rounds), " in message
    assert "t.py::test_4 (5 rounds) and 2 more. Save the baseline again, with more" in message
    assert "pytest --specdecode-save b.json" in message
    # without a speedup tolerance the stored rounds are not pooled: nothing to refuse
    check_baseline_rounds(shorts, [Tolerance("acceptance_rate", 0.05, True)], "b", "b.json")
    check_baseline_rounds([stored(rng)], [SPEEDUP_5], "b", "b.json")


def test_acceptance_drop_and_improvement() -> None:
    rng = random.Random(4)
    tol = Tolerance("acceptance_rate", 0.05, relative=True)
    worse = compare_one(synthetic(rng, 2.0, 0.8), synthetic(rng, 2.0, 0.5), tol)
    assert worse.status == "regressed" and worse.p_value is not None and worse.p_value < 0.01
    assert "acceptance_rate regressed: stored 0.8" in worse.describe()
    better = compare_one(synthetic(rng, 2.0, 0.5), synthetic(rng, 2.0, 0.8), tol)
    assert better.status == "improved"


def test_deterministic_figures_compare_without_spread() -> None:
    old = entry(nodeid="a", acceptance_rate=1.0, samples={"acceptance_rate": [1.0, 1.0]})
    new = entry(nodeid="a", acceptance_rate=0.5, samples={"acceptance_rate": [0.5, 0.5]})
    assert compare_one(old, new, Tolerance("acceptance_rate", 0.1, False)).status == "regressed"
    assert compare_one(old, old, Tolerance("acceptance_rate", 0.1, False)).status == "unchanged"


def test_match_rate_uses_prompt_counts() -> None:
    old = entry(nodeid="a", match_rate=1.0, num_prompts=40)
    new = entry(nodeid="a", match_rate=0.5, num_prompts=40)
    assert compare_one(old, new, Tolerance("match_rate", 0.1, False)).status == "regressed"
    tiny_new = entry(nodeid="a", match_rate=0.5, num_prompts=2)
    tiny_old = entry(nodeid="a", match_rate=1.0, num_prompts=2)
    assert compare_one(tiny_old, tiny_new, Tolerance("match_rate", 0.1, False)).status == (
        "unchanged"
    )


def test_new_and_missing_tests() -> None:
    rng = random.Random(5)
    a = synthetic(rng, 2.0)
    b = changed(synthetic(rng, 2.0), nodeid="t.py::test_b")
    c = changed(synthetic(rng, 2.0), nodeid="t.py::test_c", label="batch 32")
    verdicts = compare_runs([a, b], [a, c], [Tolerance("acceptance_rate", 0.05, True)])
    assert [(v.key, v.status) for v in verdicts] == [
        ("t.py::test_a", "unchanged"),
        ("t.py::test_c[batch 32]", "new"),
        ("t.py::test_b", "missing"),
    ]


def test_comparison_entries_state_each_decision() -> None:
    rng = random.Random(6)
    a = synthetic(rng, 2.0, trials=BASELINE_TRIALS)
    worse = changed(synthetic(rng, 1.5, 0.5, trials=NEW_TRIALS), label="x")
    b = changed(synthetic(rng, 2.0), nodeid="t.py::test_b")
    few = changed(b, ratios=b.result.ratios[:1], samples={})  # one round: nothing to test
    verdicts = compare_runs(
        [changed(a, label="x"), b], [worse, few], parse_tolerances(DEFAULT_TOLERANCES)
    )
    entries = comparison_entries(verdicts)
    assert [(e["key"], e["figure"], e["decision"]) for e in entries] == [
        ("t.py::test_a[x]", "speedup", "regressed"),
        ("t.py::test_a[x]", "acceptance_rate", "regressed"),
        ("t.py::test_b", "speedup", "inconclusive"),
        ("t.py::test_b", "acceptance_rate", "unchanged"),
    ]
    speedup = entries[0]
    assert speedup["stored"] == pytest.approx(a.result.speedup)
    assert speedup["new"] == pytest.approx(worse.result.speedup)
    assert speedup["change"] == pytest.approx(worse.result.speedup / a.result.speedup - 1)
    assert speedup["tolerance"] == "5%" and 3 <= speedup["rounds"] <= NEW_TRIALS
    assert entries[1]["rounds"] is None and entries[1]["p_value"] < 0.01
    # a drop beyond the tolerance that no test can judge (no per-round samples)
    drop = compare_runs([b], [changed(b, acceptance_rate=0.5, samples={})],
                        [Tolerance("acceptance_rate", 0.05, relative=False)])  # fmt: skip
    assert drop[0].status == "unchanged" and drop[0].decision == "inconclusive"
    assert drop[0].to_dict()["tolerance"] == "0.05"
    none = compare_runs(  # not measured: nan on the result (null in its dict form)
        [b], [changed(b, acceptance_rate=math.nan)], [Tolerance("acceptance_rate", 0.05, True)]
    )
    assert none[0].to_dict()["new"] is None and none[0].decision == "inconclusive"
    new_missing = comparison_entries(compare_runs([a], [b], [Tolerance("speedup", 0.05, True)]))
    assert new_missing == [
        {"key": "t.py::test_b", "figure": None, "stored": None, "new": None, "change": None,
         "tolerance": None, "decision": "new", "p_value": None, "rounds": None,
         "detectable": None},
        {"key": "t.py::test_a", "figure": None, "stored": None, "new": None, "change": None,
         "tolerance": None, "decision": "missing", "p_value": None, "rounds": None,
         "detectable": None},
    ]  # fmt: skip


def test_environment_differences() -> None:
    old = {"vllm": "0.32.0", "device": {"kind": "gpu", "name": "H100"},
           "models": {"/m": {"sha256": "aa"}}}  # fmt: skip
    new = {"vllm": "0.33.0", "device": {"kind": "gpu", "name": "H200"},
           "models": {"/m": {"sha256": "bb"}}}  # fmt: skip
    diffs = environment_differences(old, new)
    assert diffs == ["vllm 0.32.0 -> 0.33.0", "device H100 -> H200", "model /m changed "
                     "(sha256 aa -> bb)"]  # fmt: skip
    assert environment_differences(old, old) == []


def test_module_docstring_states_the_default_tolerances() -> None:
    assert compare_module.__doc__ is not None
    assert f"``{DEFAULT_TOLERANCES}``" in compare_module.__doc__
    assert all(t.relative for t in parse_tolerances(DEFAULT_TOLERANCES))


# --- issue 43 items 3 and 4: a comparison that compares nothing, or another configuration ----


def test_a_comparison_that_compares_nothing_says_why() -> None:
    rng = random.Random(8)
    a = synthetic(rng, 2.0)
    b = changed(a, nodeid="t.py::test_b")

    def why(old: list[ReportEntry], new: list[ReportEntry]) -> str | None:
        matching = StoredResults(old).match(new)
        return nothing_compared(matching, "the baseline b.json", "this run", "Renamed?")

    assert why([], [a]) is not None and "the baseline b.json holds no results" in why([], [a])
    assert "this run holds no results" in (why([a], []) or "")
    assert "neither the baseline b.json nor this run holds a result" in (why([], []) or "")
    renamed = why([a], [b]) or ""
    assert renamed.startswith("no result of this run matches one in the baseline b.json")
    assert "e.g. stored 't.py::test_a', new 't.py::test_b'). Renamed?" in renamed
    assert why([a], [a, b]) is None and why([a, b], [a]) is None


def test_a_stored_entry_of_another_configuration_is_named() -> None:
    rng = random.Random(9)
    a = synthetic(rng, 2.0)

    def changes(new: ReportEntry, old: ReportEntry = a, **environments: Any) -> list[Any]:
        matching = StoredResults([old]).match([new])
        return configuration_changes(
            matching, environments.get("before", {}), environments.get("after", {})
        )

    assert changes(a) == []
    other = changed(a, num_speculative_tokens=2, max_tokens=64, temperature=0.8, num_prompts=4)
    (change,) = changes(other)
    assert change.key == "t.py::test_a" and change.incomparable == ()
    assert change.changes == (
        "k 4 -> 2", "max_tokens 3 -> 64", "temperature 0 -> 0.8", "prompts 8 -> 4",
    )  # fmt: skip
    (change,) = changes(changed(a, target="org/other", method="ngram", draft=None))
    assert change.incomparable == (
        "target org/target -> org/other", "method draft_model -> ngram",
    )  # fmt: skip
    assert change.changes == (*change.incomparable, "draft org/draft -> none")
    # a local model folder at another path: the same weights are the same target
    here, there = changed(a, target="/ci/a/target"), changed(a, target="/home/b/target")
    local = {"local": True, "sha256": "aa"}
    before = {"models": {"/ci/a/target": local}}
    assert changes(there, here, before=before, after={"models": {"/home/b/target": local}}) == []
    retrained = {"models": {"/home/b/target": {**local, "sha256": "bb"}}}
    (change,) = changes(there, here, before=before, after=retrained)
    assert change.incomparable == ()  # same folder name: the environment names the new weights
    assert change.changes == ("target /ci/a/target -> /home/b/target",)
