import random

import pytest

from pytest_specdecode.measure.theory import (
    acceptance_rate_from_alpha,
    alpha_from_counts,
    expected_tokens_per_step,
    predicted_speedup,
)


def test_known_values() -> None:
    # the reference table: k=3, alpha 0.8 -> E = 2.95; c=0.1, alpha=0.7, k=4 -> S = 1.98
    assert expected_tokens_per_step(0.8, 3) == pytest.approx(2.952, abs=1e-3)
    assert predicted_speedup(0.7, 4, 0.10) == pytest.approx(1.98, abs=0.01)
    assert predicted_speedup(1.0, 4, 0.0) == 5.0
    assert acceptance_rate_from_alpha(0.72, 3) == pytest.approx(0.53, abs=0.01)


def test_alpha_estimate_recovers_simulated_acceptance() -> None:
    rng = random.Random(0)
    for alpha, k in ((0.3, 4), (0.7, 3), (0.9, 5)):
        drafts = 20000
        per_pos = [0] * k
        for _ in range(drafts):
            for i in range(k):
                if rng.random() >= alpha:
                    break
                per_pos[i] += 1
        assert alpha_from_counts(drafts, per_pos) == pytest.approx(alpha, abs=0.01)


def test_alpha_edge_cases() -> None:
    assert alpha_from_counts(0, [0, 0]) is None
    assert alpha_from_counts(10, [10, 10, 10]) == 1.0
    assert alpha_from_counts(10, [0, 0, 0]) == 0.0
