"""Output equivalence under sampling: speculative sampling is lossless in distribution only.

Both engines draw ``samples`` continuations of ``tokens`` tokens, spread evenly over the
prompts. Position 1 comes from the prefill, which speculation does not touch; at every later
position a chi-square test of homogeneity compares the two engines' token frequencies for
each prompt. The rule: at each position the per-prompt statistics and their degrees of
freedom are summed (prompts are sampled independently, so the sum is chi-square with the
summed degrees of freedom under equal distributions), which gives one p-value per position;
the smallest, Bonferroni-corrected over the positions, must stay at or above ``alpha``
(0.01). The per-prompt tests stay in the result to show which prompt deviates most.

Measured by ``benchmarks/equivalence_power.py`` (this function on simulated engines: at each
prompt and position a dominant token, three runner-ups and a Zipf tail of 200 tokens; seed 1,
2,000 repetitions per cell). False alarms stay near alpha: 0.6-1.3% for 1 to 8 prompts and
1,600 to 6,400 samples. Power against a 5-point shift of one token's probability (0.50 to
0.55) at one position is low at the default 1,600 samples of 4 tokens: 0.09 with one prompt;
with 8 prompts 0.04 when every prompt shifts and 0.01 (no better than a false alarm) when one
prompt does. Every token expected at least 5 times gets its own bin, so a long tail adds degrees
of freedom that dilute a one-token shift. Power 0.8 needs about 10,400 samples per engine with
one prompt, 12,800 with 8 prompts that shift together, and about 350,000 when one prompt of 8
shifts (the other prompts' degrees of freedom dilute it). More ``samples`` is the lever (power
grows with the samples per prompt); fewer prompts concentrate them; fewer ``tokens`` mean fewer
positions to correct for; a larger ``alpha`` trades false alarms for power.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..engines.protocol import Sampling
from .model import Derived, Form, Key, Record, json
from .stats import chi2_sf, homogeneity_test

DEFAULT_SAMPLES = 1600
DEFAULT_TOKENS = 4
DEFAULT_ALPHA = 0.01


class Sampler(Protocol):
    def sample(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any]
    ) -> list[list[list[int]]]: ...


_NUMBER_OR_NULL = {"type": ["number", "null"]}
#: most frequent tokens and their shares: [token, share] pairs
_TOP = {
    "description": "most frequent tokens and their shares: [token, share] pairs",
    "type": "array",
    "items": {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "number"}],
        "items": False,
        "minItems": 2,
    },
}


@dataclass(frozen=True)
class PositionTest(Record):
    """One prompt's homogeneity test at one position (``df`` 0: not testable, ignored)."""

    JSON = Form("position_test", inline=True)

    prompt_index: int = field(metadata=json(schema={"minimum": 0}))
    #: 1-based position in the continuation
    position: int = field(metadata=json(schema={"minimum": 1}))
    statistic: float = field(metadata=json(schema=_NUMBER_OR_NULL))
    df: int = field(metadata=json(schema={"minimum": 0}))
    p_value: float = field(metadata=json(schema=_NUMBER_OR_NULL))
    #: most frequent tokens and their shares
    top_baseline: list[tuple[int, float]] = field(metadata=json(schema=_TOP, replace=True))
    top_speculative: list[tuple[int, float]] = field(metadata=json(schema=_TOP, replace=True))


@dataclass(frozen=True)
class PositionSummary(Record):
    """The per-prompt tests at one position combined: statistics and degrees of freedom summed."""

    position: int
    statistic: float
    df: int
    p_value: float  # chi2_sf(statistic, df); 1.0 when no prompt was testable
    prompts: int  # prompts whose test had df > 0


@dataclass(frozen=True)
class DistributionCheck(Record):
    """The result of :func:`compare_distributions`."""

    JSON = Form(
        "distribution_check",
        "Distribution checks (sample_equivalence): per prompt and position, the homogeneity "
        "test of both engines' sampled tokens; p_value, passed, rule and positions are "
        "recomputed from the tests when read",
        derived=tuple(
            Derived(name, Any, after, Key(replace=True))
            for name, after in (
                ("p_value", "alpha"),
                ("passed", "p_value"),
                ("rule", "passed"),
                ("positions", "rule"),
            )
        ),  # fmt: skip
        required=("tests",),
    )

    nodeid: str
    temperature: float
    samples_per_engine: int = field(metadata=json(schema={"minimum": 0}))
    tokens: int = field(metadata=json(schema={"minimum": 0}))
    alpha: float
    tests: list[PositionTest] = field(default_factory=list)

    @property
    def positions(self) -> list[PositionSummary]:
        """One combined test per position, in position order."""
        by_position: dict[int, list[PositionTest]] = {}
        for t in self.tests:
            by_position.setdefault(t.position, []).append(t)
        summaries = []
        for position in sorted(by_position):
            tested = [t for t in by_position[position] if t.df > 0]
            stat = sum(t.statistic for t in tested)
            df = sum(t.df for t in tested)
            p = chi2_sf(stat, df) if df > 0 else 1.0
            summaries.append(PositionSummary(position, stat, df, p, len(tested)))
        return summaries

    @property
    def p_value(self) -> float:
        """Smallest per-position p-value, Bonferroni-corrected over the tested positions."""
        tested = [s for s in self.positions if s.df > 0]
        if not tested:
            return 1.0
        return min(1.0, min(s.p_value for s in tested) * len(tested))

    @property
    def worst_position(self) -> PositionSummary | None:
        """The position with the smallest combined p-value (``None`` when nothing was tested)."""
        tested = [s for s in self.positions if s.df > 0]
        return min(tested, key=lambda s: s.p_value) if tested else None

    @property
    def worst(self) -> PositionTest | None:
        """The prompt that deviates most at the worst position."""
        at = self.worst_position
        if at is None:
            return None
        tested = [t for t in self.tests if t.position == at.position and t.df > 0]
        return min(tested, key=lambda t: t.p_value)

    @property
    def rule(self) -> str:
        """How :attr:`p_value` was formed, for messages."""
        tested = [s for s in self.positions if s.df > 0]
        prompts = len({t.prompt_index for t in self.tests})
        return (
            f"chi-square summed over {prompts} prompt{'s' * (prompts != 1)} per position, "
            f"Bonferroni over {len(tested)} position{'s' * (len(tested) != 1)}"
        )

    @property
    def passed(self) -> bool:
        return self.p_value >= self.alpha


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
    the token distributions at positions 2..``tokens`` agree (see the module docstring)."""
    if temperature <= 0:
        raise ValueError("a distribution test needs temperature > 0; use exact matching at 0")
    per_prompt = max(1, math.ceil(samples / len(prompts)))
    params = Sampling.of(tokens, temperature, sampling, n=per_prompt)
    base = baseline.sample(prompts, params)
    spec = speculative.sample(prompts, params)
    tests = []
    for i, (a_runs, b_runs) in enumerate(zip(base, spec, strict=True)):
        for position in range(2, tokens + 1):
            a = Counter(r[position - 1] for r in a_runs if len(r) >= position)
            b = Counter(r[position - 1] for r in b_runs if len(r) >= position)
            stat, df, p = homogeneity_test(a, b)
            tests.append(PositionTest(i, position, stat, df, p, _top(a, 3), _top(b, 3)))
    return DistributionCheck(
        nodeid, float(temperature), per_prompt * len(prompts), tokens, alpha, tests
    )
