"""The distributional equivalence test on synthetic samplers (no engine needed)."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from typing import Any

import pytest

from pytest_specdecode import assert_outputs_equivalent
from pytest_specdecode.errors import ConfigError, GateError
from pytest_specdecode.measure.equivalence import compare_distributions
from pytest_specdecode.measure.stats import chi2_sf, homogeneity_test

from ..helpers import fake_result


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


class Fixed:
    """Deterministic samples: ``counts[prompt][position - 1]`` maps token -> count (position 1
    is the untested prefill token); every count list must add up to ``n``."""

    def __init__(self, counts: list[list[dict[int, int]]]) -> None:
        self.counts = counts

    def sample(self, prompts: Sequence[Any], sampling: dict[str, Any]) -> list[list[list[int]]]:
        out = []
        for rows in self.counts[: len(prompts)]:
            columns = [[t for t, c in sorted(row.items()) for _ in range(c)] for row in rows]
            assert all(len(col) == sampling["n"] for col in columns)
            out.append([list(s) for s in zip(*columns, strict=True)])
        return out


def _counts(prompts: int, position_2: dict[int, int]) -> list[list[dict[int, int]]]:
    """``prompts`` prompts of 200 samples of 4 tokens: ``position_2`` at position 2, an even
    split of tokens 7 and 8 elsewhere."""
    even = {7: 100, 8: 100}
    return [[{5: 200}, dict(position_2), even, even] for _ in range(prompts)]


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


def test_a_shift_in_every_prompt_is_caught_by_summing_over_prompts() -> None:
    # 100/100 against 120/80 in each of 8 prompts: p = 0.045 per prompt, which the old rule
    # (smallest per-prompt p times 24 tests) reads as 1; summed, chi2 32 on 8 df at position 2
    base = Fixed(_counts(8, {7: 100, 8: 100}))
    spec = Fixed(_counts(8, {7: 120, 8: 80}))
    check = compare_distributions(base, spec, list("abcdefgh"), temperature=1.0)
    old_rule = min(t.p_value for t in check.tests) * len(check.tests)
    assert old_rule > 1.0 > check.alpha
    assert not check.passed and check.p_value < 1e-3
    assert check.worst_position is not None and check.worst_position.position == 2
    assert check.worst is not None and check.worst.position == 2
    assert (
        check.rule == "chi-square summed over 8 prompts per position, Bonferroni over 3 positions"
    )


def test_noise_level_differences_in_every_prompt_pass() -> None:
    # 104/96 against 100/100 alternating in direction: chi2 0.16 per prompt, 1.3 on 8 df
    base = Fixed(_counts(8, {7: 100, 8: 100}))
    spec = Fixed([_counts(1, {7: 104, 8: 96} if i % 2 else {7: 96, 8: 104})[0] for i in range(8)])
    check = compare_distributions(base, spec, list("abcdefgh"), temperature=1.0)
    assert check.passed and check.p_value == 1.0  # 3 * 0.996, capped
    assert check.positions[0].statistic == pytest.approx(8 * 0.16, rel=1e-3)


def test_degrees_of_freedom_and_statistics_add_up_per_position() -> None:
    three = {7: 100, 8: 60, 9: 40}
    counts = [
        [{5: 200}, three, {7: 100, 8: 100}],  # df 2 at position 2
        [{5: 200}, {7: 100, 8: 100}, {7: 100, 8: 100}],  # df 1
        [{5: 200}, {7: 200}, {7: 100, 8: 100}],  # one token only: df 0, left out
    ]
    spec_counts = [
        [{5: 200}, {7: 90, 8: 70, 9: 40}, {7: 100, 8: 100}],
        [{5: 200}, {7: 110, 8: 90}, {7: 90, 8: 110}],
        [{5: 200}, {7: 200}, {7: 100, 8: 100}],
    ]
    check = compare_distributions(
        Fixed(counts), Fixed(spec_counts), ["a", "b", "c"], temperature=1.0, tokens=3, samples=600
    )
    at2, at3 = check.positions
    per_prompt = [t for t in check.tests if t.position == 2]
    assert [t.df for t in per_prompt] == [2, 1, 0]
    assert (at2.position, at2.df, at2.prompts) == (2, 3, 2)
    assert at2.statistic == pytest.approx(per_prompt[0].statistic + per_prompt[1].statistic)
    assert at2.p_value == pytest.approx(chi2_sf(at2.statistic, 3))
    assert (at3.df, at3.prompts) == (3, 3)
    assert check.p_value == pytest.approx(min(2 * min(at2.p_value, at3.p_value), 1.0))
    stats = pytest.importorskip("scipy.stats")
    assert at2.p_value == pytest.approx(stats.chi2.sf(at2.statistic, 3), rel=1e-6)
    # the worst prompt at the worst position, and a report that survives JSON
    worst = check.worst_position
    assert worst is not None and check.worst is not None
    assert check.worst.position == worst.position
    data = json.loads(json.dumps(check.to_dict()))
    assert [p["df"] for p in data["positions"]] == [3, 3] and len(data["tests"]) == 6


def test_nothing_testable_passes_with_p_one() -> None:
    same = [[{5: 10}, {7: 10}]]
    check = compare_distributions(Fixed(same), Fixed(same), ["a"], temperature=1.0, tokens=2,
                                  samples=10)  # fmt: skip
    assert check.p_value == 1.0 and check.passed
    assert check.worst is None and check.worst_position is None
    assert check.positions[0].df == 0


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


def test_false_alarms_stay_below_alpha_over_eight_prompts() -> None:
    alarms = sum(
        not compare_distributions(
            Sampler(0.5, s), Sampler(0.5, s + 500), list("abcdefgh"), temperature=1.0
        ).passed  # fmt: skip
        for s in range(200)
    )
    assert alarms <= 6  # expected at most 2 at alpha 0.01; 7 or more has probability 0.5%


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
