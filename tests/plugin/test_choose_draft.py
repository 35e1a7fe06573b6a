"""``choose_draft``: candidates checked before any engine starts, measured against one
baseline engine and ranked (simulated backend; candidates differ by k, whose speedup the
fake's ``speedup_fn`` sets)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest

from pytest_specdecode import Bench, ConfigError, EngineBackend, GateError, Ranking
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.measure.choice import Candidate

from ..fakes import FakeSource, use_fake

NGRAM = {"method": "ngram", "num_speculative_tokens": 2}
SMALL = {"method": "draft_model", "model": "org/small", "num_speculative_tokens": 3}
LARGE = {"method": "draft_model", "model": "org/large", "num_speculative_tokens": 4}
CANDIDATES = {"ngram": NGRAM, "small": SMALL, "large": LARGE}

#: the hub drafts are not in the cache, so their compatibility is said to be unchecked
pytestmark = pytest.mark.filterwarnings(
    "ignore::pytest_specdecode.errors.UncheckedCompatibilityWarning"
)


class CountingSource(FakeSource):
    """A fake that records every engine configuration it is asked for."""

    def __init__(self, speedups: dict[int, float]) -> None:
        super().__init__()
        self.speedup_fn = lambda k, c: speedups[k]
        self.asked: list[EngineConfig] = []

    def acquire(
        self,
        config: EngineConfig,
        *,
        keep: Sequence[EngineConfig] = (),
        timeout: float | None = None,
    ) -> EngineBackend:
        self.asked.append(config)
        return super().acquire(config, keep=keep, timeout=timeout)


def _bench(source: FakeSource, **settings: Any) -> Bench:
    return Bench("org/target", NGRAM, source=source, progress=None, name="t", **settings)


def test_candidates_are_ranked_by_speedup_against_one_baseline_engine() -> None:
    source = CountingSource({2: 1.3, 3: 2.5, 4: 1.8})
    bench = _bench(source)
    ranking = bench.choose_draft(["p1", "p2"], CANDIDATES, max_tokens=4)
    assert isinstance(ranking, Ranking)
    assert ranking.names == ["small", "large", "ngram"]
    assert [c.speedup for c in ranking.candidates] == sorted(
        (c.speedup for c in ranking.candidates), reverse=True
    )
    assert ranking.best == "small" and ranking.tied == []
    assert ranking["large"].result.num_speculative_tokens == 4
    assert ranking["ngram"].result.cost_ratio == 0.0
    assert ranking["small"].result.cost_ratio == pytest.approx(0.1, rel=0.05)
    # each candidate's result is stored under its name; the baseline engine started once
    assert [r.label for r in bench.results] == ["ngram", "small", "large"]
    baselines = {
        c.key for c in source.asked if c.speculative_json is None and c.target == "org/target"
    }
    assert len(baselines) == 1
    speculative = {c.key for c in source.asked if c.speculative_json is not None}
    assert len(speculative) == 3
    # baseline + three speculative engines (the cost ratios come from inside them)
    assert source.starts == 4


def test_candidates_whose_interval_overlaps_the_fastest_are_tied() -> None:
    source = CountingSource({2: 2.0, 3: 2.01, 4: 1.2})
    source.noise = 0.05
    ranking = _bench(source).choose_draft(["p"], CANDIDATES, max_tokens=4)
    assert set(ranking.names[:2]) == {"ngram", "small"} and ranking.names[2] == "large"
    assert ranking.tied == [ranking.names[1]]
    assert not ranking.candidates[0].tied and not ranking["large"].tied
    assert "tied within the 95% interval" in ranking.reason
    assert re.search(rf"{ranking.names[1]} [\d.]+x \([\d.-]+x\) \(tied\)", ranking.summary())


def test_no_best_when_every_candidate_is_slower() -> None:
    ranking = _bench(CountingSource({2: 0.8, 3: 0.6, 4: 0.7})).choose_draft(
        ["p"], CANDIDATES, max_tokens=4
    )
    assert ranking.names == ["ngram", "large", "small"]
    assert {c.verdict for c in ranking.candidates} == {"not worth it"}
    assert ranking.best is None
    assert re.fullmatch(r"none is worth it: the fastest, ngram 0\.\d\dx \(.*\), is not worth it",
                        ranking.reason)  # fmt: skip
    assert ranking.summary().endswith(ranking.reason)
    assert ranking.to_dict()["best"] is None


def test_the_best_is_the_fastest_worth_it() -> None:
    """An inconclusive fastest candidate does not hide a slower one that is worth it."""
    results = {
        "wide": _result(1.4, (0.9, 2.0), "inconclusive"),
        "narrow": _result(1.2, (1.1, 1.3), "worth it"),
        "slow": _result(0.5, (0.4, 0.6), "not worth it"),
    }
    ranking = Ranking.of("t", results)
    assert ranking.names == ["wide", "narrow", "slow"]
    assert ranking.best == "narrow" and ranking.tied == ["narrow"]
    assert "wide 1.40x (0.90-2.00x) is faster but inconclusive" in ranking.reason


def _result(speedup: float, ci: tuple[float, float], verdict: str) -> Any:
    """A stand-in with the fields a ranking reads."""
    from types import SimpleNamespace

    return SimpleNamespace(speedup=speedup, speedup_ci=ci, verdict=verdict)


def test_to_dict_is_plain_json() -> None:
    ranking = _bench(CountingSource({2: 1.5, 3: 2.5, 4: 1.0})).choose_draft(
        ["p"], CANDIDATES, max_tokens=4
    )
    data = json.loads(json.dumps(ranking.to_dict(), allow_nan=False))
    assert data["nodeid"] == "t" and data["best"] == "small"
    first = data["candidates"][0]
    assert first["name"] == "small" and first["label"] == "small"
    for key in ("speedup_ci", "acceptance_rate", "mean_acceptance_length", "alpha",
                "cost_ratio", "extra_memory_gib", "verdict", "tied"):  # fmt: skip
        assert key in first
    assert first["cost_ratio"] == pytest.approx(0.1, rel=0.05) and first["alpha"] is not None
    assert isinstance(ranking.candidates[0], Candidate)


@pytest.mark.parametrize(
    ("candidates", "message"),
    [
        ({"good": NGRAM, "bad": {"method": "ngram"}},
         r"choose_draft\(candidates\['bad'\]\): num_speculative_tokens is missing"),
        ({"good": NGRAM, "bad": {"num_speculative_tokens": 2}},
         r"choose_draft\(candidates\['bad'\]\): no proposer"),
        ({"good": NGRAM, "bad": {"method": "draft_model", "num_speculative_tokens": 2}},
         r"choose_draft\(candidates\['bad'\]\): method \"draft_model\" needs \"model\""),
        ({"good": NGRAM, "bad": "ngram"},
         r"choose_draft\(candidates\['bad'\]\): expected a speculative_config dict"),
        ({"good": NGRAM, "": NGRAM}, r"a candidate's name must be a non-empty string"),
        ({}, r"choose_draft\(candidates=...\): expected a non-empty dict"),
        ([NGRAM], r"choose_draft\(candidates=...\): expected a non-empty dict"),
    ],
)  # fmt: skip
def test_a_bad_candidate_is_refused_before_any_engine_starts(candidates: Any, message: str) -> None:
    source = CountingSource({2: 2.0})
    with pytest.raises(ConfigError, match=message):
        _bench(source).choose_draft(["p"], candidates, max_tokens=4)
    assert source.asked == [] and source.starts == 0


def test_a_candidate_with_a_missing_local_draft_is_refused(tmp_path: Any) -> None:
    source = CountingSource({2: 2.0})
    missing = {"method": "draft_model", "model": str(tmp_path / "nope"),
               "num_speculative_tokens": 2}  # fmt: skip
    with pytest.raises(ConfigError, match=r"choose_draft\(candidates\['local'\]\): model"):
        _bench(source).choose_draft(["p"], {"ok": NGRAM, "local": missing}, max_tokens=4)
    assert source.asked == []


def test_names_and_labels_are_checked_before_any_engine_starts() -> None:
    source = CountingSource({2: 2.0, 3: 2.0})
    bench = _bench(source)
    with pytest.raises(ConfigError, match=r"choose_draft\(label=...\)"):
        bench.choose_draft(["p"], {"a": NGRAM}, max_tokens=4, label="x")
    with pytest.raises(ConfigError, match=r"choose_draft\(prompts=...\): the prompt list"):
        bench.choose_draft([], {"a": NGRAM}, max_tokens=4)
    assert source.asked == []
    bench.run(["p"], max_tokens=4, label="small")
    asked = len(source.asked)
    with pytest.raises(
        ConfigError,
        match=r"choose_draft\(\): its result 'small' would be stored under the key "
        r"'t\[small\]', which this test's earlier run\(label='small'\) holds; rename the "
        r"candidates",
    ):
        bench.choose_draft(["p"], {"ngram": NGRAM, "small": SMALL}, max_tokens=4)
    assert len(source.asked) == asked


def test_served_engines_cannot_switch_candidates() -> None:
    bench = Bench(baseline_url="http://a:1", speculative_url="http://b:2", progress=None)
    with pytest.raises(ConfigError, match="choose_draft: the engines are two running servers"):
        bench.choose_draft(["p"], {"a": NGRAM}, max_tokens=4)


SUITE = """
import pytest

CANDIDATES = {
    "ngram": {"method": "ngram", "num_speculative_tokens": 2},
    "small": {"method": "draft_model", "model": "org/small", "num_speculative_tokens": 3},
}

@pytest.mark.specdecode("chat", target="org/target", speculative_config=CANDIDATES["ngram"])
def test_choose(specdecode):
    ranking = specdecode.choose_draft(["p1", "p2"], CANDIDATES, max_tokens=4)
    assert ranking.best == "small"
"""


def test_the_fixture_reports_the_ranking(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = use_fake(pytester, monkeypatch, CountingSource({2: 1.4, 3: 2.2}))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess("--specdecode-report", "r.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*test_choose [[]ngram]*", "*test_choose [[]small]*",
        "choose_draft test_suite.py::test_choose: draft ranking: small 2.*x (*), "
        "ngram 1.*x (*); best: small",
        "rank*candidate*method (k)*speedup [[]95% CI]*extra GiB*verdict*choice",
        "1 * small * draft_model (3) * 2.*x [[]*] * 0.10 * - * worth it * best",
        "2 * ngram * ngram (2) * 1.*x [[]*] * 0.00 * - * worth it",
        "time: * wall: * engine starts *",
        "*- worth it? (per target and proposer) -*",
        "ngram on org/target: worth it for chat at batch 2: 1.*x",
        "  UNKNOWN batch size *",
        "  NO      choice: ngram * ngram ranks 2 of 2 in test_choose: 1.*x [[]*]; best: small 2.*",
        "draft_model (org/small) on org/target: worth it for chat at batch 2: 2.*x",
        "  UNKNOWN spare memory *extra memory not measured; KV cache capacity not reported",
        "  YES     choice: small * small ranks 1 of 2 in test_choose: 2.*; the best worth it",
    ])  # fmt: skip
    report = json.loads((pytester.path / "r.json").read_text())
    (ranking,) = report["rankings"]
    assert ranking["best"] == "small"
    assert [c["name"] for c in ranking["candidates"]] == ["small", "ngram"]
    keys = {(r["nodeid"], r["label"]) for r in report["results"]}
    assert keys == {("test_suite.py::test_choose", n) for n in ("ngram", "small")}
    assert isinstance(source, CountingSource)
    assert len({c.key for c in source.asked if c.speculative_json is None
                and c.target == "org/target"}) == 1  # fmt: skip


def _ranked(**speedups: tuple[float, tuple[float, float], str]) -> Ranking:
    return Ranking.of("t.py::test_gate", {n: _result(*v) for n, v in speedups.items()})


def test_assert_best_passes_for_the_best_or_within_the_tolerance() -> None:
    ranking = _ranked(good=(2.0, (1.9, 2.1), "worth it"), near=(1.92, (1.8, 2.0), "worth it"),
                      far=(1.5, (1.4, 1.6), "worth it"))  # fmt: skip
    ranking.assert_best("good")
    ranking.assert_best("near", within=0.05)  # 4% below the best
    ranking.assert_best("far", within=0.25)
    with pytest.raises(GateError) as info:
        ranking.assert_best("near", within=0.03)
    assert str(info.value) == (
        "t.py::test_gate: the chosen draft near 1.92x (1.80-2.00x) is no longer the best: "
        "good 2.00x (1.90-2.10x) is faster, and near's 1.92x is more than 3% below its 2.00x "
        "(at least 1.94x needed). Ranking: good 2.00x (1.90-2.10x), near 1.92x (1.80-2.00x), "
        "far 1.50x (1.40-1.60x)"
    )


def test_assert_best_fails_for_a_chosen_draft_not_worth_it() -> None:
    ranking = _ranked(a=(0.9, (0.8, 0.95), "not worth it"), b=(0.7, (0.6, 0.8), "not worth it"))
    with pytest.raises(GateError, match=r"the chosen draft a 0\.90x \(0\.80-0\.95x\) is the "
                                        r"fastest but not worth it"):  # fmt: skip
        ranking.assert_best("a")


def test_assert_best_refuses_an_unknown_name_or_tolerance() -> None:
    ranking = _ranked(a=(2.0, (1.9, 2.1), "worth it"))
    with pytest.raises(ConfigError, match=r"assert_best\('b'\): no candidate of that name in "
                                          r"t.py::test_gate; candidates: a"):  # fmt: skip
        ranking.assert_best("b")
    for bad in (-0.1, 1.0, "5%", True):
        with pytest.raises(ConfigError, match=r"assert_best\(within=...\)"):
            ranking.assert_best("a", within=bad)  # type: ignore[arg-type]


GATE_SUITE = """
import pytest

CANDIDATES = {
    "ngram": {"method": "ngram", "num_speculative_tokens": 2},
    "small": {"method": "draft_model", "model": "org/small", "num_speculative_tokens": 3},
}

@pytest.mark.specdecode("chat", target="org/target", speculative_config=CANDIDATES["ngram"])
def test_still_best(specdecode):
    specdecode.choose_draft(["p"], CANDIDATES, max_tokens=4).assert_best("ngram", within=0.05)
"""


def test_the_ci_gate_fails_the_test_and_names_the_candidate(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chosen n-gram has fallen behind the draft model: the test fails, and the report
    puts the failure under the chosen candidate's result."""
    use_fake(pytester, monkeypatch, CountingSource({2: 1.4, 3: 2.2}))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makepyfile(test_suite=GATE_SUITE)
    result = pytester.runpytest_inprocess("--specdecode-report", "r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*GateError: test_suite.py::test_still_best: the chosen draft ngram 1.*x (*) is no "
        "longer the best: small 2.*x (*) is faster, and ngram's 1.*x is more than 5% below *",
    ])  # fmt: skip
    report = json.loads((pytester.path / "r.json").read_text())
    failures = {r["label"]: r["gate_failures"] for r in report["results"]}
    assert failures["small"] == [] and "is no longer the best" in failures["ngram"][0]
