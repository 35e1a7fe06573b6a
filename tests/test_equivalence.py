"""The distributional equivalence test on synthetic samplers (no engine needed)."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

import pytest

from pytest_specdecode import assert_outputs_equivalent
from pytest_specdecode.errors import ConfigError, GateError
from pytest_specdecode.measure.equivalence import compare_distributions
from pytest_specdecode.measure.stats import chi2_sf, homogeneity_test

from .helpers import fake_result


class Sampler:
    """Token 1 is the prefill token; later tokens are 7 with probability ``p``, else 8 or 9."""

    def __init__(self, p: float, seed: int) -> None:
        self.p = p
        self.rng = random.Random(seed)

    def sample(self, prompts: Sequence[Any], sampling: dict[str, Any]) -> list[list[list[int]]]:
        def one() -> list[int]:
            rest = [
                7 if self.rng.random() < self.p else self.rng.choice((8, 9))
                for _ in range(sampling["max_tokens"] - 1)
            ]
            return [5, *rest]

        return [[one() for _ in range(sampling["n"])] for _ in prompts]


def test_chi2_survival_function() -> None:
    assert chi2_sf(3.841, 1) == pytest.approx(0.05, abs=1e-3)
    assert chi2_sf(11.07, 5) == pytest.approx(0.05, abs=1e-3)
    assert chi2_sf(0.0, 3) == 1.0


def test_homogeneity_pools_rare_tokens() -> None:
    stat, df, p = homogeneity_test({1: 500, 2: 500, 3: 1}, {1: 500, 2: 500, 4: 2})
    assert df == 2 and p > 0.5  # tokens 3 and 4 pooled into one "other" bin


def test_same_distribution_passes_and_position_one_is_skipped() -> None:
    check = compare_distributions(
        Sampler(0.5, 3), Sampler(0.5, 4), ["a", "b"], temperature=0.8, nodeid="t::a"
    )
    assert check.samples_per_engine == 1600 and check.tokens == 4
    assert {t.position for t in check.tests} == {2, 3, 4}
    assert check.passed
    assert_outputs_equivalent(check)


def test_a_five_point_shift_is_detected() -> None:
    detected = sum(
        not compare_distributions(
            Sampler(0.50, seed), Sampler(0.58, seed + 100), ["a"], temperature=0.8, tokens=2
        ).passed
        for seed in range(40)
    )
    assert detected / 40 >= 0.8


def test_false_alarms_stay_below_alpha() -> None:
    alarms = sum(
        not compare_distributions(
            Sampler(0.5, s), Sampler(0.5, s + 500), ["a", "b"], temperature=1.0
        ).passed  # fmt: skip
        for s in range(100)
    )
    assert alarms <= 3  # alpha 0.01 with a Bonferroni correction: expected below 1


def test_failure_message_gives_p_value_counts_and_tokens() -> None:
    check = compare_distributions(
        Sampler(0.5, 1), Sampler(0.8, 2), ["a"], temperature=0.8, nodeid="t::a"
    )
    with pytest.raises(GateError) as info:
        assert_outputs_equivalent(check)
    message = str(info.value)
    assert "samples another distribution at temperature 0.8: p = " in message
    assert "1600 samples of 4 tokens per engine" in message
    assert re.search(r"baseline top \[7: 0\.[45]\d", message)
    assert re.search(r"speculative top \[7: 0\.[78]\d", message)


def test_greedy_only_helpers_refuse_sampling() -> None:
    with pytest.raises(ValueError, match="temperature > 0"):
        compare_distributions(Sampler(0.5, 1), Sampler(0.5, 2), ["a"], temperature=0.0)
    with pytest.raises(ConfigError, match="sample_equivalence"):
        assert_outputs_equivalent(fake_result(temperature=0.8))
