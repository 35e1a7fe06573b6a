"""The sequential rules: the regression test against a stored baseline, repeated intervals,
between-session variance and counterbalanced rounds (no engine needed)."""

from __future__ import annotations

import math
import random

import pytest

from pytest_specdecode.measure.bench import Bench
from pytest_specdecode.measure.sequential import (
    MIN_ROUNDS,
    SESSION_Z,
    Reference,
    Session,
    decide,
    look_level,
    repeated_interval,
    robust_location,
    robust_scale,
    session_variance,
)
from pytest_specdecode.measure.stats import ratio_interval, variance_bound
from tests.fakes import FakeSource

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}


def ratios(rng: random.Random, speedup: float, n: int, sd: float = 0.05) -> list[float]:
    return [speedup * math.exp(rng.gauss(0, sd)) for _ in range(n)]


def reference(rng: random.Random, speedup: float = 2.0, n: int = 30) -> Reference:
    return Reference.of(ratios(rng, speedup, n))


def test_a_calm_unchanged_run_is_decided_at_the_first_look() -> None:
    rng = random.Random(1)
    decision = decide(reference(rng), ratios(rng, 2.0, 20, sd=0.01), 0.05)
    assert (decision.status, decision.rounds) == ("unchanged", MIN_ROUNDS)


def test_a_large_drop_is_caught_at_once_and_a_rise_is_an_improvement() -> None:
    rng = random.Random(2)
    ref = reference(rng)
    drop = decide(ref, ratios(rng, 1.6, 20), 0.05)
    assert drop.status == "regressed" and drop.rounds <= MIN_ROUNDS + 1
    assert drop.change == pytest.approx(-0.2, abs=0.05) and drop.p_value < 1e-6
    assert decide(ref, ratios(rng, 2.6, 20), 0.05).status == "improved"


def test_a_drop_within_the_tolerance_is_never_called() -> None:
    """The tolerance is the practical floor: a clear 3% drop at tolerance 5% passes."""
    rng = random.Random(3)
    ref = Reference.of([2.0 * math.exp(rng.gauss(0, 0.001)) for _ in range(30)])
    assert decide(ref, [1.94] * 20, 0.05).status == "unchanged"
    assert decide(ref, [1.70] * 20, 0.05).status == "regressed"


def test_online_and_replayed_decisions_agree() -> None:
    """Stopping when the rule decides and replaying it over more rounds give one answer."""
    rng = random.Random(4)
    ref = reference(rng, n=30)
    for speedup in (2.0, 1.9, 1.8):
        rounds = ratios(rng, speedup, 20, sd=0.07)
        looks = (decide(ref, rounds[:n], 0.05, final=False) for n in range(MIN_ROUNDS, 21))
        online = next((d for d in looks if d.decided), None)
        replayed = decide(ref, rounds, 0.05)
        if online is not None:
            assert (online.status, online.rounds) == (replayed.status, replayed.rounds)


def test_an_ambiguous_run_is_undecided_until_final() -> None:
    rng = random.Random(5)
    ref = reference(rng)
    rounds = [2.0 * 0.93 * math.exp(x) for x in (0.08, -0.08, 0.06)]
    assert decide(ref, rounds, 0.05, final=False).status == "undecided"
    assert decide(ref, rounds, 0.05).status in ("unchanged", "regressed")


def test_robust_estimate_is_the_plain_mean_on_clean_data() -> None:
    """Symmetric rounds: the Huber estimate is their mean (to 1e-12); rounds none of which
    lies beyond the clip: mean and sample variance exactly; normal rounds: within 0.7 of the
    mean's standard error in each of 50 seeded runs of 30 rounds (0.16 on average)."""
    symmetric = [0.7 + x for x in (-0.2, -0.05, -0.01, 0.0, 0.01, 0.05, 0.2)]
    assert robust_location(symmetric)[0] == pytest.approx(0.7, abs=1e-12)
    close = [0.70, 0.71, 0.69, 0.705, 0.695]
    mean = sum(close) / 5
    assert robust_location(close, 0.1) == pytest.approx(
        (mean, sum((x - mean) ** 2 for x in close) / 4), abs=1e-15
    )
    for seed in range(50):
        rng = random.Random(seed)
        logs = [rng.gauss(0, 0.05) for _ in range(30)]
        assert robust_location(logs)[0] == pytest.approx(sum(logs) / 30, abs=0.7 * 0.05 / 30**0.5)
    assert robust_scale([rng.gauss(0, 0.05) for _ in range(2000)]) == pytest.approx(0.05, rel=0.05)


def test_one_stalled_round_moves_the_estimate_a_bounded_amount() -> None:
    logs = [0.69, 0.70, 0.71, 0.70, 0.69, 0.71, 0.70]
    stalled = [*logs[:-1], 0.70 - math.log(3)]  # the speculative engine took 3x once
    plain = sum(stalled) / len(stalled)
    assert 0.70 - plain > 0.15  # the plain mean reads it as a 15% drop
    assert robust_location(stalled)[0] == pytest.approx(0.70, abs=0.01)


def test_a_stalled_round_does_not_flip_an_unchanged_run() -> None:
    """One round in which one engine took 3x its time, on either side, and in the stored
    rounds or the new ones: the plain mean would move by ln(3)/n (a 20% drop at round 5) and
    its variance would keep the rule undecided for all 20 rounds; the rule still decides "no
    change" online, in each of 20 seeded runs."""
    rng = random.Random(11)
    base = ratios(rng, 2.0, 30)
    stalled_base = [*base[:-1], base[-1] * 3]
    for seed in range(20):
        rng = random.Random(seed)
        runs = []
        for factor in (1 / 3, 3.0):
            new = ratios(rng, 2.0, 20)
            new[2] *= factor
            runs.append((base, new))
        runs.append((stalled_base, ratios(rng, 2.0, 20)))
        for stored, new in runs:
            online = decide(Reference.of(stored), new, 0.05, final=False)
            assert (online.status, online.rounds <= 12) == ("unchanged", True)


def test_a_real_drop_is_caught_through_a_stall() -> None:
    """A 10% drop whose second round looks 3x faster (the baseline engine stalled) is still
    called a regression, in each of 20 seeded runs."""
    rng = random.Random(11)
    ref = Reference.of(ratios(rng, 2.0, 30))
    for seed in range(20):
        rng = random.Random(seed)
        new = ratios(rng, 1.8, 20)
        new[1] *= 3
        assert decide(ref, new, 0.05).status == "regressed"


def test_a_saving_session_summary_is_robust_to_a_stall() -> None:
    rng = random.Random(12)
    clean = ratios(rng, 2.0, 30)
    stalled = Session.of([*clean[:-1], clean[-1] / 3])
    assert stalled.mean == pytest.approx(Session.of(clean).mean, abs=0.01)
    assert stalled.var < 2 * Session.of(clean).var


def test_between_session_variance_from_saved_sessions() -> None:
    calm = [Session(math.log(2.0) + s, 0.0025, 30) for s in (0.0, 0.001, -0.001)]
    assert session_variance(calm) == 0.0
    spread = [Session(math.log(2.0) + s, 0.0025, 30) for s in (0.04, -0.04, 0.0, 0.03)]
    # the spread of the means at its 75% upper bound (3 degrees of freedom: x2.41), less the
    # rounds' share
    assert variance_bound(3, SESSION_Z) == pytest.approx(3 / 1.2125, rel=0.02)  # chi² 25%
    assert session_variance(spread) == pytest.approx(
        0.003875 / 3 * variance_bound(3, SESSION_Z) - 0.0025 / 30, rel=1e-6
    )
    assert session_variance(spread[:2]) is None  # fewer than three sessions
    assert Session.from_dict(spread[0].to_dict()) == spread[0]


def test_measured_session_variance_makes_a_marginal_drop_undecidable() -> None:
    """With sessions that wander, one run's 12% drop may be the machine, not the change."""
    rng = random.Random(6)
    base = ratios(rng, 2.0, 30, sd=0.03)
    new = ratios(rng, 1.76, 20, sd=0.03)
    assert decide(Reference.of(base), new, 0.05).status == "regressed"
    wandering = [Session(math.log(2.0) + s, 0.0009, 30) for s in (0.1, -0.1, 0.05, -0.05)]
    assert decide(Reference.of(base, wandering), new, 0.05).status == "unchanged"


def test_repeated_interval_is_wider_than_a_single_look() -> None:
    rounds = [2.0, 2.1, 1.9, 2.05, 1.95]
    _, (low1, high1) = ratio_interval(rounds)
    _, (low, high) = repeated_interval(rounds, 20)
    assert low < low1 and high > high1
    levels = [look_level(n) for n in range(3, 80)]
    assert levels == sorted(levels, reverse=True) and look_level(3) == pytest.approx(0.045)


def test_adaptive_gate_at_the_true_value_errs_at_most_the_stated_rate() -> None:
    """Looking after every round from 3 to 20: the repeated interval lies wholly on one side
    of the true speedup in at most ~2.5% of runs each way (the naive one: ~11% each)."""
    rng = random.Random(7)
    above = below = 0
    runs = 2000
    for _ in range(runs):
        rounds: list[float] = []
        for _n in range(20):
            rounds.append(math.exp(rng.gauss(0, 0.05)))
            if len(rounds) >= MIN_ROUNDS:
                _, (low, high) = repeated_interval(rounds, 20)
                if low > 1.0 or high < 1.0:
                    above += low > 1.0
                    below += high < 1.0
                    break
    assert above / runs <= 0.035 and below / runs <= 0.035


def test_counterbalanced_rounds_cancel_a_linear_drift() -> None:
    """A B, B A, ...: with every round 2% slower than the one before it and no noise, the
    speedup is exact after an even number of rounds (A B A B would be off by one slot)."""
    source = FakeSource()
    source.noise, source.drift, source.speedup = 0.0, 0.02, 2.0
    with Bench("org/target", SPEC, source=source, trials=6, progress=None) as bench:
        result = bench.run(["p"], max_tokens=4)
    assert result.speedup == pytest.approx(2.0, rel=1e-9)
    assert result.ratios[0] == pytest.approx(2.0 * math.exp(-0.02))  # A then B: B is later
    assert result.ratios[1] == pytest.approx(2.0 * math.exp(0.02))  # B then A


def test_session_history_starts_again_in_another_environment() -> None:
    from pytest_specdecode.baselines.files import with_sessions

    old = {"nodeid": "t.py::a", "target": "m", "speculative_config": {}, "ratios": [2.0, 2.1]}
    new = {**old, "ratios": [1.9, 2.0]}
    stored = {"environment": {"vllm": "0.32"}, "results": [old]}
    same = with_sessions([new], stored, {"vllm": "0.32"})[0]["sessions"]
    assert [s["rounds"] for s in same] == [2, 2]
    assert len(with_sessions([new], stored, {"vllm": "0.33"})[0]["sessions"]) == 1
    other_draft = {**new, "speculative_config": {"model": "d2"}}
    assert len(with_sessions([other_draft], stored, {"vllm": "0.32"})[0]["sessions"]) == 1
