"""``Bench.load`` and ``specdecode.load`` on the simulated backend (real engines, in tests/e2e:
``test_e2e.py``, ``test_e2e_served.py``)."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pytest

from pytest_specdecode import Bench, ConfigError

from ..fakes import Collected, FakeEngine, FakeSource, use_fake

DRAFT = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}
SLO = {"ttft_ms": 2000, "tpot_ms": 20}


def test_load_measures_every_rate_on_both_engines_in_counterbalanced_order() -> None:
    source, said, seen = FakeSource(), [], Collected()
    bench = Bench("org/target", DRAFT, source=source, progress=said.append, sink=seen)
    r = bench.load(["p1", "p2"], max_tokens=32, rates=[4.0, 0.5, math.inf], requests=24, slo=SLO)
    assert seen.products == [r] and bench.loads == [r]
    assert r.rates == [0.5, 4.0, math.inf]
    assert [p.first for p in r.points] == ["baseline", "speculative", "baseline"]
    assert all(p.baseline.requests == p.speculative.requests == 24 for p in r.points)
    low, busy = r.points[0], r.points[-1]
    # the fake's batching model: a clear gain alone, none when all arrive at once
    assert low.tpot_speedup > 1.5 and low.pays
    assert busy.tpot_speedup < 1.1 and not busy.pays
    assert r.crossover_rate == math.inf and r.pays_up_to == 4.0
    # each round its own schedule: the rounds' gains differ where arrivals overlap
    assert len(set(r.points[1].round_gains)) == 3
    assert r.points[1].offered_rate == pytest.approx(4.0)
    assert low.acceptance_rate == pytest.approx(0.8, abs=0.1)  # whole tokens per step
    assert low.baseline.goodput is not None and low.speculative.goodput is not None
    assert any("load 3/3: all at once, 24 requests" in s for s in said), said
    assert said[-1].endswith("speculation pays up to 4 req/s, not at all at once")
    assert bench.time.load_seconds > 0
    json.dumps(r.to_dict(), allow_nan=False)


def test_the_schedule_is_the_same_on_both_engines_and_seeded() -> None:
    a = Bench("org/target", DRAFT, source=FakeSource(), progress=None)
    first = a.load(["p"], max_tokens=8, rates=[2.0], requests=6, seed=1)
    again = a.load(["p"], max_tokens=8, rates=[2.0], requests=6, seed=1)
    assert first.points[0].baseline == again.points[0].baseline
    other = a.load(["p"], max_tokens=8, rates=[2.0], requests=6, seed=2)
    assert other.points[0].baseline != first.points[0].baseline
    assert [r.label for r in a.loads] == ["", "#2", "#3"]
    with pytest.raises(ConfigError, match="already stored a load under the key"):
        a.load(["p"], max_tokens=8, rates=[2.0], requests=6, label="#2")


@pytest.mark.parametrize("max_engines", [2, 1])
def test_each_round_starts_the_sources_quiet_seconds_after_the_round_before_ended(
    monkeypatch: pytest.MonkeyPatch, max_engines: int
) -> None:
    spans: list[tuple[str, float, float]] = []

    def timed(name: str) -> Any:
        real = getattr(FakeEngine, name)

        def call(self: FakeEngine, *args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return real(self, *args, **kwargs)
            finally:
                spans.append((name, began, time.perf_counter()))

        return call

    for name in ("generate_round", "load_round"):
        monkeypatch.setattr(FakeEngine, name, timed(name))
    source = FakeSource()
    source.max_engines, source.quiet_seconds = max_engines, 0.05
    Bench("org/target", DRAFT, source=source, progress=None).load(
        ["p"], max_tokens=4, rates=[2.0, math.inf], requests=2, rounds=2
    )
    assert [name for name, _, _ in spans].count("load_round") == 2 * 2 * 2
    gaps = [
        began - spans[i - 1][2]
        for i, (name, began, _) in enumerate(spans)
        if name == "load_round" and i > 0
    ]
    assert len(gaps) == 8 and min(gaps) >= 0.05, gaps


def test_a_pool_of_one_runs_every_rate_on_one_engine_then_the_other() -> None:
    source = FakeSource()
    source.max_engines = 1
    r = Bench("org/target", DRAFT, source=source, progress=None).load(
        ["p"], max_tokens=16, rates=[0.5, 4.0], requests=6
    )
    assert [p.first for p in r.points] == ["baseline", "baseline"]
    assert r.points[0].tpot_speedup > 1.5


def test_a_duration_bounds_each_rate() -> None:
    r = Bench("org/target", DRAFT, source=FakeSource(), progress=None).load(
        ["p"], max_tokens=8, rates=[4.0], duration=5.0
    )
    assert 8 < r.points[0].baseline.requests < 40


def test_bad_load_arguments_are_refused_before_any_engine_starts() -> None:
    source = FakeSource()
    bench = Bench("org/target", DRAFT, source=source, progress=None)
    with pytest.raises(ConfigError, match="exactly one of them"):
        bench.load(["p"], max_tokens=8, rates=[1.0])
    with pytest.raises(ConfigError, match="run\\(max_tokens=...\\)"):
        bench.load(["p"], max_tokens=0, rates=[1.0], requests=4)
    with pytest.raises(ConfigError, match="unknown key 'goodput'"):
        bench.load(["p"], max_tokens=8, rates=[1.0], requests=4, slo={"goodput": 1})
    assert source.starts == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"requests": 4.0}, "load\\(requests=...\\): expected an integer from 2 to 100000"),
        ({"rates": [1e308]}, "load\\(rates=...\\): every rate must be .* at most 1e\\+06"),
        ({"rates": [1e308], "burstiness": 10}, "at most 1e\\+06"),
        ({"burstiness": 1e-320}, "load\\(burstiness=...\\): expected a number from 0.01"),
        ({"rounds": 101}, "load\\(rounds=...\\): expected an integer from 2 to 100"),
        ({"seed": "0"}, "load\\(seed=...\\): expected an integer"),
        ({"slo": {"ttft_ms": math.inf}}, "load\\(slo=...\\): ttft_ms must be finite"),
        ({"temperature": math.nan}, "temperature=...\\): expected a finite number >= 0"),
    ],
)
def test_load_arguments_out_of_range_are_refused_before_any_engine_starts(
    kwargs: dict[str, Any], message: str
) -> None:
    # each one passed validation, then crashed mid-run or wrote an unwritable report
    source = FakeSource()
    bench = Bench("org/target", DRAFT, source=source, progress=None)
    args: dict[str, Any] = {"max_tokens": 8, "rates": [1.0], "requests": 4, **kwargs}
    with pytest.raises(ConfigError, match=message):
        bench.load(["p"], **args)
    assert source.starts == 0 and not bench.loads


SUITE = """
import pytest
from pytest_specdecode import assert_latency_gain

SPEC = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}
RATES = [0.5, 8.0, float("inf")]


@pytest.mark.specdecode("traffic", target="org/target", speculative_config=SPEC,
                        min_latency_gain=1.5, min_goodput_ratio=1.0)
def test_low_rate(specdecode):
    specdecode.load(["p"], max_tokens=32, rates=RATES, requests=12,
                    slo={"ttft_ms": 2000, "tpot_ms": 20})


@pytest.mark.specdecode("traffic", target="org/target", speculative_config=SPEC,
                        min_latency_gain=1.2, at_rate=float("inf"))
def test_saturated(specdecode):
    specdecode.load(["p"], max_tokens=32, rates=RATES, requests=12)


@pytest.mark.specdecode("traffic", target="org/target", speculative_config=SPEC,
                        min_latency_gain=1.2, at_rate=3)
def test_unmeasured_rate(specdecode):
    specdecode.load(["p"], max_tokens=32, rates=RATES, requests=12)


@pytest.mark.specdecode("traffic", target="org/target", speculative_config=SPEC)
def test_assertion(specdecode):
    r = specdecode.load(["p"], max_tokens=32, rates=RATES, requests=12)
    assert_latency_gain(r, at_rate=8.0, min=1.2)
"""


def test_marker_load_gates_and_the_report(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_fake(pytester, monkeypatch)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdecode-report", "report.json")
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    assert "test_saturated - " in out or "FAILED test_suite.py::test_saturated" in out
    assert "at all at once (12 requests per engine): p50 TPOT gain" in out
    assert "is below the minimum 1.20x" in out
    assert "no load point at rate 3; measured: 0.5, 8, inf" in out
    report = json.loads((pytester.path / "report.json").read_text())
    assert [x["nodeid"] for x in report["loads"]] == [
        f"test_suite.py::test_{n}"
        for n in ("low_rate", "saturated", "unmeasured_rate", "assertion")
    ]
    assert report["loads"][0]["points"][2]["rate"] == "inf"
    assert report["loads"][0]["slo"] == {"ttft_ms": 2000.0, "tpot_ms": 20.0}
    assert report["session"]["time"]["load_seconds"] > 0


@pytest.mark.parametrize(
    ("keyword", "message"),
    [
        ("at_rate=0", "at_rate must be greater than 0"),
        ("min_latency_gain='fast'", "min_latency_gain must be a number"),
        ("min_goodput_ratio=-1", "min_goodput_ratio must be at least 0"),
    ],
)
def test_bad_load_marker_keywords_are_named(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, keyword: str, message: str
) -> None:
    source = use_fake(pytester, monkeypatch)
    pytester.makepyfile(
        test_suite=f"""
import pytest

@pytest.mark.specdecode("traffic", target="org/target",
                        speculative_config={{"method": "ngram", "num_speculative_tokens": 2}},
                        {keyword})
def test_it(specdecode):
    specdecode.load(["p"], max_tokens=4, rates=[1.0], requests=2)
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert message in result.stdout.str()
    assert source.starts == 0


SHARED_PREFIX_SUITE = """
import pytest
from pytest_specdecode import prompts

TEXTS = ["p1 one", "p2 two", "p3 three", "p4 four"]


@pytest.mark.specdecode("traffic", target="org/target", speculative_config={spec!r})
def test_shared_prefix_traffic(specdecode):
    shared = prompts.shared_prefix(TEXTS, prefix_length=60, share=0.5, seed=1)
    specdecode.load(shared, max_tokens=8, rates=[4.0, float("inf")], requests=8)
"""


def test_a_shared_prefix_load_reports_both_sides_hit_rates(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each request looks up its words and finds the shared prefix's (a fake prefix cache that
    holds the prefix alone; the speculative side loses a tenth of the hits): each load point
    reports both sides' hit rates over its requests, and their gap."""
    from pytest_specdecode import prompts

    def cache(side: str, prompt: str) -> tuple[int, int]:
        head, _, _ = prompt.rpartition("\n\n")  # the drawn prefix holds "\n\n" too
        hits = len(head.split())
        return len(prompt.split()), hits - hits // 10 * (side == "speculative")

    source = use_fake(pytester, monkeypatch)
    source.cache = cache
    pytester.makepyfile(test_suite=SHARED_PREFIX_SUITE.format(spec=DRAFT))
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdecode-report", "report.json")
    result.assert_outcomes(passed=1)
    assert "4 req/s: the speculative engine's prefix-cache hit rate is clearly below" in (
        result.stdout.str()
    )
    texts = ["p1 one", "p2 two", "p3 three", "p4 four"]
    shared = prompts.shared_prefix(texts, prefix_length=60, share=0.5, seed=1)
    assert sum(s != t for s, t in zip(shared, texts, strict=True)) == 2
    looked = sum(len(p.split()) for p in shared)  # 8 requests cycle the 4 prompts twice
    expected = {"baseline": 2 * 60 / looked, "speculative": 2 * 54 / looked}
    gap = expected["speculative"] - expected["baseline"]
    (load,) = json.loads((pytester.path / "report.json").read_text())["loads"]
    assert [p["rate"] for p in load["points"]] == [4.0, "inf"]
    for point in load["points"]:
        for side, rate in expected.items():
            assert point[f"{side}_prefix_cache_hit_rate"] == pytest.approx(rate)
        assert point["prefix_cache_gap"] == pytest.approx(gap)
