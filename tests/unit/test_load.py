"""The load figures (measure/load.py) and their gates, from hand-made rounds."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from pytest_specdecode import (
    ConfigError,
    Counters,
    GateError,
    LoadResult,
    LoadRound,
    TimedRequest,
    assert_goodput,
    assert_latency_gain,
)
from pytest_specdecode.measure.assertions import check_load_gates
from pytest_specdecode.measure.load import (
    LoadSummary,
    arrival_times,
    build_point,
    check_load_args,
    percentiles,
    round_gain,
)

SLO = {"ttft_ms": 500.0, "tpot_ms": 30.0}


def request(arrival: float, ttft: float, tpot: float, tokens: int = 33, late: float = 0.0):
    return TimedRequest(
        arrival, arrival + late, ttft, ttft + tpot * (tokens - 1), (tpot,) * (tokens - 1), tokens
    )


def round_of(tpots: list[float], ttft: float = 0.1, elapsed: float = 10.0) -> LoadRound:
    return LoadRound(elapsed, tuple(request(i * 0.5, ttft, t) for i, t in enumerate(tpots)))


def counters() -> Counters:
    return Counters(10, 40, 30, (10, 8, 7, 5))


def load_result(points) -> LoadResult:
    return LoadResult(
        "t.py::test_load", "", "target", "draft_model", 4, 33, 1.0, 0, dict(SLO), tuple(points)
    )


# -- schedules ---------------------------------------------------------------------------
def test_a_schedule_is_seeded_per_round_and_offers_the_rate_asked_for() -> None:
    a = arrival_times(4.0, requests=50, seed=3)
    assert a == arrival_times(4.0, requests=50, seed=3)
    assert a != arrival_times(4.0, requests=50, seed=4)
    assert a != arrival_times(4.0, requests=50, seed=3, round_index=1)
    assert len(a) == 50 and 0 < a[0] and all(x < y for x, y in zip(a, a[1:], strict=False))
    # as vllm bench serve offers it: the first request one gap in, N requests span N / rate
    for seed in range(20):
        b = arrival_times(2.0, requests=16, seed=seed)
        assert b[-1] == pytest.approx(16 / 2.0)


def test_the_issue_s_schedule_no_longer_offers_more_than_asked() -> None:
    """Before: 16 requests at 1 req/s spanned 9.8 s for seed 0 (1.53 req/s offered)."""
    for rate in (1.0, 2.0):
        times = arrival_times(rate, requests=16, seed=0)
        assert 16 / times[-1] == pytest.approx(rate)
        assert times[-1] - times[0] == pytest.approx(16 / rate - times[0])


def test_poisson_gaps_have_the_rate_s_mean_and_burstiness_their_spread() -> None:
    def gaps(burstiness: float) -> list[float]:
        a = arrival_times(2.0, requests=20001, burstiness=burstiness, seed=1)
        return [y - x for x, y in zip([0.0, *a], a, strict=False)]

    poisson, bursty, regular = gaps(1.0), gaps(0.25), gaps(4.0)
    for g in (poisson, bursty, regular):
        assert statistics.mean(g) == pytest.approx(0.5, rel=0.001)  # scaled to N / rate
    cv = [statistics.stdev(g) / statistics.mean(g) for g in (poisson, bursty, regular)]
    assert cv[0] == pytest.approx(1.0, abs=0.05)  # exponential: sd = mean
    assert cv[1] == pytest.approx(2.0, abs=0.15)  # gamma shape 1/4: cv = 2
    assert cv[2] == pytest.approx(0.5, abs=0.05)  # gamma shape 4: cv = 1/2


def test_all_at_once_and_a_duration() -> None:
    assert arrival_times(math.inf, requests=3) == [0.0, 0.0, 0.0]
    a = arrival_times(10.0, duration=5.0)
    assert len(a) == 50 and a[-1] == pytest.approx(5.0)


def test_a_one_token_request_meets_a_tpot_bound_as_vllm_bench_counts_it() -> None:
    from pytest_specdecode.engines.protocol import TimedRequest
    from pytest_specdecode.measure.load import meets

    one = TimedRequest(0.0, 0.01, 0.2, 0.2, (), 1)
    none = TimedRequest(0.0, 0.01, None, 5.0, (), 0)
    assert one.tpot is None and meets(one, {"tpot_ms": 1.0})
    assert not meets(none, {"tpot_ms": 1.0}) and not meets(none, {"e2e_ms": 1e9})
    assert one.ttft_sent == pytest.approx(0.19)  # from the send: lateness 10 ms left out


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rates": []}, "expected a list of request rates"),
        ({"rates": 2.0}, "expected a list of request rates"),
        ({"rates": [0]}, "above 0"),
        ({"rates": [1, "2"]}, "above 0"),
        ({"rates": [1, 1]}, "listed twice"),
        ({"requests": None}, "exactly one of them"),
        ({"duration": 5.0}, "exactly one of them"),
        ({"requests": 1}, "from 2 to"),
        ({"requests": None, "duration": 5.0, "rates": [math.inf]}, "give requests= instead"),
        ({"burstiness": 0}, "burstiness"),
        ({"slo": {"ttft": 5}}, "unknown key 'ttft'"),
        ({"slo": {"ttft_ms": -1}}, "milliseconds above 0"),
        ({"rounds": 1}, "rounds=...\\): expected an integer from 2 to 100"),
        # types and bounds checked up front (issue 43, items 8 and 14)
        ({"requests": 4.0}, "requests=...\\): expected an integer from 2 to 100000 .*got 4.0"),
        ({"requests": 10**6}, "requests=...\\): expected an integer from 2 to 100000"),
        ({"rates": [1e308]}, "at most 1e\\+06 .*got 1e\\+308"),
        ({"rates": [1e7], "burstiness": 10}, "at most 1e\\+06"),
        ({"rates": [float("nan")]}, "above 0"),
        ({"rates": [0.001]}, "4 requests at 0.001 req/s span 4000 s: more than 3600 s"),
        ({"requests": None, "duration": 4000.0}, "duration=...\\): expected seconds above 0 and "
                                                 "at most 3600"),
        ({"requests": None, "duration": 3000.0, "rates": [100.0]}, "more than 100000 requests"),
        ({"burstiness": 1000}, "burstiness=...\\): expected a number from 0.01 to 100"),
        ({"burstiness": 1e-9}, "from 0.01 to 100"),
        ({"burstiness": math.inf}, "from 0.01 to 100"),
        ({"rounds": 3.0}, "rounds=...\\): expected an integer from 2 to 100 .*got 3.0"),
        ({"rounds": 10**9}, "rounds=...\\): expected an integer from 2 to 100 .*got 1000000000"),
        ({"rounds": True}, "rounds=...\\): expected an integer"),
        ({"seed": 1.5}, "seed=...\\): expected an integer, got 1.5"),
        ({"slo": {"ttft_ms": math.inf}}, "ttft_ms must be finite milliseconds above 0 .*got inf"),
        ({"slo": {"tpot_ms": math.nan}}, "tpot_ms must be finite milliseconds above 0 .*got nan"),
    ],
)  # fmt: skip
def test_bad_schedules_are_named(kwargs: dict, message: str) -> None:
    args = {"rates": [1.0], "requests": 4, "duration": None, "burstiness": 1.0, "slo": None,
            "rounds": 3, "seed": 0}  # fmt: skip
    args.update(kwargs)
    with pytest.raises(ConfigError, match=message):
        check_load_args(**args)


def test_rates_come_back_ascending() -> None:
    rates, slo = check_load_args([8, math.inf, 0.5], 4, None, 1.0, {"tpot_ms": 50})
    assert rates == [0.5, 8.0, math.inf] and slo == {"tpot_ms": 50.0}


# -- figures -------------------------------------------------------------------------------
def test_percentiles_interpolate_as_numpy() -> None:
    assert percentiles([]) is None
    assert percentiles(list(range(101))) == {50: 50.0, 90: 90.0, 99: 99.0}
    assert percentiles([1.0, 2.0]) == {50: 1.5, 90: 1.9, 99: pytest.approx(1.99)}


def test_a_summary_counts_goodput_under_the_slo_and_the_loop_s_lateness() -> None:
    reqs = (
        request(0.0, 0.1, 0.02),  # meets both
        request(0.5, 0.6, 0.02, late=0.01),  # TTFT 600 ms > 500
        request(1.0, 0.1, 0.05, late=0.002),  # TPOT 50 ms > 30
        request(1.5, 0.1, 0.01),  # meets both
    )
    summary = LoadSummary.of([LoadRound(4.0, reqs)], SLO)
    assert summary.requests == 4
    assert summary.goodput == pytest.approx(2 / 4.0)
    assert summary.output_tokens_per_second == pytest.approx(4 * 33 / 4.0)
    assert summary.tpot is not None and summary.tpot[50] == pytest.approx(0.02)
    assert summary.ttft is not None and summary.ttft[99] > 0.5
    assert summary.lateness_p99 == pytest.approx(0.01, rel=0.1)
    assert LoadSummary.of([LoadRound(4.0, reqs)], {}).goodput is None
    two = LoadSummary.of([LoadRound(4.0, reqs), LoadRound(4.0, reqs)], SLO)
    assert two.requests == 4 and two.goodput == pytest.approx(2 / 4.0) and two.seconds == 4.0


def test_a_round_s_gain_is_a_ratio_of_medians() -> None:
    base = LoadRound(1.0, tuple(request(0, 0.1, 0.020 + 0.001 * i) for i in range(12)))
    spec = LoadRound(1.0, tuple(request(0, 0.1, (0.020 + 0.001 * i) / 2) for i in range(12)))
    assert round_gain(base, spec) == pytest.approx(2.0)
    assert math.isnan(round_gain(base, LoadRound(1.0, ())))


def test_the_gain_is_the_rounds_geometric_mean_with_a_t_interval_over_them() -> None:
    def rounds(tpots: list[float]) -> list[LoadRound]:
        return [round_of([t] * 4) for t in tpots]

    low = build_point(0.5, rounds([0.02] * 3), rounds([0.01, 0.0125, 0.011]), counters(), SLO)
    assert low.round_gains == pytest.approx((2.0, 1.6, 0.02 / 0.011))
    logs = [math.log(g) for g in low.round_gains]
    assert low.tpot_speedup == pytest.approx(math.exp(statistics.fmean(logs)))
    half = 4.302653 * statistics.stdev(logs) / math.sqrt(3)  # t(2, 0.975)
    assert low.tpot_speedup_ci == pytest.approx(
        (low.tpot_speedup * math.exp(-half), low.tpot_speedup * math.exp(half)), rel=1e-5
    )
    assert low.pays
    close = build_point(8, rounds([0.02] * 2), rounds([0.02, 0.016]), counters(), SLO)
    assert close.tpot_speedup_ci[0] < 1.0 < close.tpot_speedup_ci[1] and not close.pays
    one = build_point(1, rounds([0.02]), rounds([0.01]), counters(), SLO)
    assert one.tpot_speedup == pytest.approx(2.0)
    assert all(math.isnan(v) for v in one.tpot_speedup_ci) and not one.pays  # one round


def point(rate: float, gain: float, ci: tuple[float, float], **kw):
    base = [round_of([0.02] * 4)] * 2
    spec = [round_of([0.02 / gain] * 4)] * 2
    p = build_point(rate, base, spec, counters(), SLO, **kw)
    from dataclasses import replace

    return replace(p, tpot_speedup_ci=ci)


def test_the_crossover_is_the_first_rate_whose_interval_reaches_one() -> None:
    r = load_result([point(0.5, 2.0, (1.8, 2.2)), point(4, 1.3, (1.1, 1.5)),
                     point(16, 1.05, (0.97, 1.12)), point(math.inf, 0.9, (0.8, 0.95))])  # fmt: skip
    assert r.crossover_rate == 16 and r.pays_up_to == 4
    assert r.traffic_line() == "speculation pays up to 4 req/s, not at 16 req/s"
    assert load_result([point(0.5, 2.0, (1.8, 2.2))]).crossover_rate is None
    assert "the highest rate measured" in load_result([point(0.5, 2.0, (1.8, 2.2))]).traffic_line()
    never = load_result([point(math.inf, 0.9, (0.8, 0.95))])
    assert never.pays_up_to is None
    assert never.traffic_line().startswith("speculation does not lower p50 TPOT at any rate")


def test_a_load_result_round_trips_through_json_with_an_infinite_rate() -> None:
    r = load_result([point(0.5, 2.0, (1.8, 2.2)), point(math.inf, 0.9, (0.8, 0.95))])
    data = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert data["points"][1]["rate"] == "inf" and data["crossover_rate"] == "inf"
    assert data["points"][0]["baseline"]["tpot"]["50"] == pytest.approx(0.02)
    assert LoadResult.from_dict(data) == r


# -- gates ---------------------------------------------------------------------------------
def test_latency_gain_gate() -> None:
    r = load_result([point(0.5, 2.0, (1.8, 2.2)), point(8, 1.1, (0.9, 1.3))])
    assert_latency_gain(r, min=1.5)  # the lowest rate by default
    assert_latency_gain(r, at_rate=0.5, min=1.9)
    with pytest.raises(
        GateError, match=r"at 8 req/s .*p50 TPOT gain 1\.10x is below the minimum 1\.20x"
    ):
        assert_latency_gain(r, at_rate=8, min=1.2)
    with pytest.raises(ConfigError, match="no load point at rate 2; measured: 0.5, 8"):
        assert_latency_gain(r, at_rate=2, min=1.2)
    with pytest.raises(ConfigError, match="expected the LoadResult"):
        assert_latency_gain("nope", min=1.2)  # type: ignore[arg-type]


def test_goodput_gate() -> None:
    slow = [LoadRound(10.0, tuple(request(i * 0.5, 0.1, 0.04) for i in range(4)))] * 2
    fast = [LoadRound(10.0, tuple(request(i * 0.5, 0.1, 0.01) for i in range(4)))] * 2
    good = load_result([build_point(1.0, slow, fast, counters(), SLO)])
    assert good.points[0].goodput_ratio == math.inf
    assert_goodput(good, min_ratio=1.0)
    bad = load_result([build_point(1.0, fast, slow, counters(), SLO)])
    with pytest.raises(GateError, match=r"goodput ratio 0\.00 is below the minimum 1\.00"):
        assert_goodput(bad, at_rate=1.0)
    unbound = build_point(1.0, slow, fast, counters(), {})
    no_slo = LoadResult("t", "", "x", "ngram", 4, 33, 1.0, 0, {}, (unbound,))
    with pytest.raises(ConfigError, match="needs an SLO"):
        assert_goodput(no_slo)


def test_marker_gates_check_at_the_marker_s_rate() -> None:
    r = load_result([point(0.5, 2.0, (1.8, 2.2)), point(8, 1.1, (0.9, 1.3))])
    assert check_load_gates(r, {"min_latency_gain": 1.5}) == []
    failures = check_load_gates(r, {"min_latency_gain": 1.5, "at_rate": 8.0, "min_speedup": 9})
    assert len(failures) == 1 and "at 8 req/s" in failures[0]
