import math
import random

import pytest

from pytest_specdecode.engines.protocol import Counters
from pytest_specdecode.measure.figures import with_theory
from pytest_specdecode.measure.theory import (
    acceptance_rate_from_alpha,
    alpha_from_counts,
    alpha_from_steps,
    expected_tokens_per_step,
    first_position_acceptance,
    hopeless,
    predicted_speedup,
    speedup_from_tokens_per_step,
)

from ..helpers import fake_result


def test_known_values() -> None:
    # the reference table: k=3, alpha 0.8 -> E = 2.95; c=0.1, alpha=0.7, k=4 -> S = 1.98
    assert expected_tokens_per_step(0.8, 3) == pytest.approx(2.952, abs=1e-3)
    assert predicted_speedup(0.7, 4, 0.10) == pytest.approx(1.98, abs=0.01)
    assert predicted_speedup(1.0, 4, 0.0) == 5.0
    assert acceptance_rate_from_alpha(0.72, 3) == pytest.approx(0.53, abs=0.01)
    assert speedup_from_tokens_per_step(2.8, 4, 0.1) == pytest.approx(2.0)


def simulate(
    alpha: float, k: int, short: float, drafts: int, seed: int
) -> tuple[list[int], list[int], list[int]]:
    """Per-step accepted and drafted counts, and vLLM's per-position counters: a share
    ``short`` of drafts is 1..k-1 tokens long (uniform), the rest k; acceptance i.i.d."""
    rng = random.Random(seed)
    accepted, drafted, per_position = [], [], [0] * k
    for _ in range(drafts):
        length = rng.randint(1, k - 1) if rng.random() < short else k
        run = 0
        while run < length and rng.random() < alpha:
            run += 1
        for i in range(run):
            per_position[i] += 1
        accepted.append(run)
        drafted.append(length)
    return accepted, drafted, per_position


def test_alpha_estimate_recovers_simulated_acceptance() -> None:
    for seed, (alpha, k) in enumerate(((0.3, 4), (0.7, 3), (0.9, 5))):
        accepted, drafted, per_pos = simulate(alpha, k, 0.0, 20000, seed)
        assert alpha_from_counts(len(drafted), per_pos) == pytest.approx(alpha, abs=0.01)
        # every draft k long: the draft-token count changes nothing
        assert alpha_from_counts(len(drafted), per_pos, sum(drafted)) == alpha_from_counts(
            len(drafted), per_pos
        )
        assert alpha_from_steps(accepted, drafted) == alpha_from_counts(len(drafted), per_pos)


def test_alpha_edge_cases() -> None:
    assert alpha_from_counts(0, [0, 0]) is None
    assert alpha_from_counts(10, [10, 10, 10]) == 1.0
    assert alpha_from_counts(10, [0, 0, 0]) == 0.0
    assert alpha_from_counts(10, [0, 0, 0], 20) == 0.0
    assert alpha_from_counts(10, [5, 3, 2], 10) == 1.0  # every draft token accepted
    assert alpha_from_counts(10, [5, 3, 2], 0) is None
    assert alpha_from_steps([], []) is None
    assert alpha_from_steps([0, 0], [0, 0]) is None  # no draft tokens: nothing to learn
    assert alpha_from_steps([3], [3]) == 1.0
    with pytest.raises(ValueError):
        alpha_from_steps([3], [2])
    with pytest.raises(ValueError):
        alpha_from_steps([1, 1], [2])


def test_minimal_short_draft_case() -> None:
    # one 2-token draft fully accepted, one 4-token draft with 2 accepted: 4 accepted in 5
    # trials. The per-position counters alone read the first draft as a rejection.
    assert alpha_from_steps([2, 2], [2, 4]) == pytest.approx(0.8)
    assert alpha_from_counts(2, [2, 2, 0, 0]) == pytest.approx(2 / 3)
    # steps without draft tokens (all invalidated by the grammar) contribute nothing
    assert alpha_from_steps([2, 0, 2], [2, 0, 4]) == pytest.approx(0.8)


@pytest.mark.parametrize(("short", "old_below"), [(0.1, 0.79), (0.3, 0.75), (0.5, 0.71)])
def test_short_drafts_do_not_bias_alpha(short: float, old_below: float) -> None:
    accepted, drafted, per_pos = simulate(0.8, 4, short, 40000, seed=13)
    n, tokens = len(drafted), sum(drafted)
    assert tokens < 4 * n
    assert alpha_from_counts(n, per_pos) < old_below  # what the counters gave before
    assert alpha_from_counts(n, per_pos, tokens) == pytest.approx(0.8, abs=0.01)
    assert alpha_from_steps(accepted, drafted) == pytest.approx(0.8, abs=0.01)


def test_short_drafts_low_acceptance_long_drafts() -> None:
    # alpha 0.3, k = 8: the last positions see a handful of acceptances; the draft-length
    # constraints keep a lucky one from inflating the implied number of long drafts
    for seed in range(4):
        _, drafted, per_pos = simulate(0.3, 8, 0.3, 4000, seed=100 + seed)
        estimate = alpha_from_counts(len(drafted), per_pos, sum(drafted))
        assert estimate == pytest.approx(0.3, abs=0.03)


def test_short_draft_estimate_is_the_constrained_maximum_likelihood() -> None:
    """Cross-check against scipy's SLSQP on the same likelihood: over alpha and the shares
    S_m of drafts at least m tokens long (1 >= S_1 >= ... >= S_k >= 0, sum = tokens/drafts),
    sum_m c_m log(alpha**m (S_m - alpha S_{m+1})), c_m = drafts with exactly m accepted."""
    optimize = pytest.importorskip("scipy.optimize")
    np = pytest.importorskip("numpy")
    cases = [(0.8, 4, 0.5, 60, 1), (0.5, 3, 0.3, 40, 2), (0.3, 6, 0.3, 300, 3),
             (0.9, 5, 0.1, 80, 4), (0.6, 2, 0.5, 50, 5)]  # fmt: skip
    for alpha, k, short, n, seed in cases:
        _, drafted, per_pos = simulate(alpha, k, short, n, seed)
        tokens = sum(drafted)
        runs = [n, *per_pos, 0]
        exact = [runs[m] - runs[m + 1] for m in range(k + 1)]

        def negative_log_likelihood(z: "np.ndarray", exact: list[int] = exact) -> float:
            a, s = z[0], [1.0, *z[1:], 0.0]
            total = 0.0
            for m, c in enumerate(exact):
                p = a**m * (s[m] - a * s[m + 1])
                total += c * math.log(max(p, 1e-300))
            return -total

        constraints = [{"type": "eq", "fun": lambda z, t=tokens / n: float(np.sum(z[1:]) - t)}]
        constraints += [
            {"type": "ineq", "fun": lambda z, i=i: float(z[i] - z[i + 1])} for i in range(1, k)
        ]
        best = None
        for start in (0.3, 0.6, 0.9):
            z0 = np.array([start] + [tokens / n / k] * k)
            fit = optimize.minimize(
                negative_log_likelihood, z0, method="SLSQP", constraints=constraints,
                bounds=[(1e-6, 1 - 1e-9)] + [(0.0, 1.0)] * k,
                options={"maxiter": 1000, "ftol": 1e-14},
            )  # fmt: skip
            if best is None or fit.fun < best.fun:
                best = fit
        assert best is not None
        assert alpha_from_counts(n, per_pos, tokens) == pytest.approx(best.x[0], abs=1e-4)


def test_with_theory_counts_short_drafts_and_efficiency_from_tokens_per_step() -> None:
    # 1000 drafts, k = 4, 3400 draft tokens (short drafts), acceptance falling with position
    counters = Counters(1000, 3400, 1900, (800, 550, 350, 200))
    result = fake_result(counters=counters)
    theory = with_theory(result, 0.1)
    assert theory.alpha == alpha_from_counts(1000, [800, 550, 350, 200], 3400)
    assert theory.alpha != alpha_from_counts(1000, [800, 550, 350, 200])
    assert theory.predicted_speedup == pytest.approx(predicted_speedup(theory.alpha, 4, 0.1))
    # efficiency: measured speedup over what the measured 2.9 tokens per step allow
    assert result.mean_acceptance_length == pytest.approx(2.9)
    assert theory.efficiency == pytest.approx(result.speedup / (2.9 / 1.4))
    assert with_theory(result, None).efficiency is None


def test_first_position_decides_hopeless() -> None:
    # conditional acceptance [0.5, 0.05, 0.05, 0.05] along positions, 160000 drafts
    counts = [80000, 4000, 200, 10]
    per_position = [n / 160000 for n in counts]
    first = first_position_acceptance(per_position)
    assert first == 0.5
    # alpha-hat is below c, yet k = 1 wins: (1 + 0.5) / (1 + 0.4) = 1.07
    assert alpha_from_counts(160000, counts) == pytest.approx(0.345, abs=1e-3)
    assert not hopeless(first, 0.4)
    assert speedup_from_tokens_per_step(1 + first, 1, 0.4) > 1.0
    assert hopeless(0.35, 0.4) and hopeless(0.4, 0.4)
    assert first_position_acceptance([]) is None


def test_hopeless_means_no_k_wins_when_acceptance_does_not_rise() -> None:
    # p1 <= c and conditional acceptance non-increasing: E_k / (c k + 1) <= 1 for every k
    for p1, c in ((0.3, 0.3), (0.2, 0.35), (0.05, 0.5)):
        for decay in (1.0, 0.8, 0.3):
            survive, tokens = 1.0, 1.0
            for k in range(1, 12):
                survive *= p1 * decay ** (k - 1)
                tokens += survive
                assert tokens / (c * k + 1) <= 1.0 + 1e-12


def test_alpha_comes_from_the_reported_draft_lengths_when_there_are_some() -> None:
    """One 2-token draft fully accepted and one 4-token draft with 2 accepted: 0.8 from the
    per-step arrays a request reports (the counters alone would say 0.667)."""
    from pytest_specdecode.engines.protocol import RequestFigures, Round
    from pytest_specdecode.measure.figures import alpha_from_rounds

    request = RequestFigures((1,), "a", None, None, per_step_accepted=(2, 2),
                             per_step_drafted=(2, 4))  # fmt: skip
    assert alpha_from_rounds([Round(1.0, (request,))]) == pytest.approx(0.8)
    assert alpha_from_rounds([Round(1.0, (RequestFigures((1,), "a", None, None),))]) is None
