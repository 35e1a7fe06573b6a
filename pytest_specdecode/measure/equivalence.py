"""Output equivalence under sampling: speculative sampling is lossless in distribution only.

Both engines draw many samples of a short continuation of the same prompts; at every position
that speculation actually produced (position 1 comes from the prefill, which speculation does
not touch), a chi-square test of homogeneity compares the token frequencies. The smallest
p-value, Bonferroni-corrected for the number of tests, decides.

Sample size: to detect a shift of 5 points in a token's probability (p near 0.5, two-sided
5%, power 0.8) a two-proportion test needs about 1,570 samples per engine; the default of
1,600 per engine is spread over the prompts.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .stats import homogeneity_test

DEFAULT_SAMPLES = 1600
DEFAULT_TOKENS = 4
DEFAULT_ALPHA = 0.01


class Sampler(Protocol):
    def sample(self, prompts: Sequence[Any], sampling: dict[str, Any]) -> list[list[list[int]]]: ...


@dataclass
class PositionTest:
    prompt_index: int
    position: int  # 1-based position in the continuation
    statistic: float
    df: int
    p_value: float
    top_baseline: list[tuple[int, float]]  # most frequent tokens and their shares
    top_speculative: list[tuple[int, float]]


@dataclass
class DistributionCheck:
    """The result of :func:`compare_distributions`."""

    nodeid: str
    temperature: float
    samples_per_engine: int
    tokens: int
    alpha: float
    tests: list[PositionTest] = field(default_factory=list)

    @property
    def p_value(self) -> float:
        """Smallest p-value over all tests, Bonferroni-corrected (1.0 when nothing tested)."""
        tested = [t for t in self.tests if t.df > 0]
        if not tested:
            return 1.0
        return min(1.0, min(t.p_value for t in tested) * len(tested))

    @property
    def worst(self) -> PositionTest | None:
        tested = [t for t in self.tests if t.df > 0]
        return min(tested, key=lambda t: t.p_value) if tested else None

    @property
    def passed(self) -> bool:
        return self.p_value >= self.alpha

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "temperature": self.temperature,
            "samples_per_engine": self.samples_per_engine,
            "tokens": self.tokens,
            "alpha": self.alpha,
            "p_value": self.p_value,
            "passed": self.passed,
            "tests": [vars(t) for t in self.tests],
        }


def _top(counts: Counter[int], n: int) -> list[tuple[int, float]]:
    total = sum(counts.values()) or 1
    return [(token, count / total) for token, count in counts.most_common(n)]


def compare_distributions(
    baseline: Sampler,
    speculative: Sampler,
    prompts: Sequence[Any],
    *,
    temperature: float,
    samples: int = DEFAULT_SAMPLES,
    tokens: int = DEFAULT_TOKENS,
    alpha: float = DEFAULT_ALPHA,
    nodeid: str = "",
    **sampling: Any,
) -> DistributionCheck:
    """Sample ``samples`` continuations of ``tokens`` tokens from each engine and test that
    the token distributions at positions 2..``tokens`` agree."""
    if temperature <= 0:
        raise ValueError("a distribution test needs temperature > 0; use exact matching at 0")
    per_prompt = max(1, math.ceil(samples / len(prompts)))
    params = {
        "temperature": float(temperature),
        "max_tokens": tokens,
        "ignore_eos": True,
        "n": per_prompt,
        **sampling,
    }
    base = baseline.sample(prompts, params)
    spec = speculative.sample(prompts, params)
    check = DistributionCheck(nodeid, float(temperature), per_prompt * len(prompts), tokens, alpha)
    for i, (a_runs, b_runs) in enumerate(zip(base, spec, strict=True)):
        for position in range(2, tokens + 1):
            a = Counter(r[position - 1] for r in a_runs if len(r) >= position)
            b = Counter(r[position - 1] for r in b_runs if len(r) >= position)
            stat, df, p = homogeneity_test(a, b)
            check.tests.append(PositionTest(i, position, stat, df, p, _top(a, 3), _top(b, 3)))
    return check
