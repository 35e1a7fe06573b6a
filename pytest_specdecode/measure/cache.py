"""The prefix cache on both sides: each engine's hit rate from vLLM's counters, the gap between
the speculative side's and the baseline's on the same requests with its interval, and the rule
that calls speculation's cost to the cache clear (then the speedup mixes two effects: what
speculation gains per token and what the lost cache hits cost in prefill)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..engines.protocol import Counters
from .stats import difference_interval

#: The least drop of the speculative side's hit rate (in hit-rate units, 0.05 = 5 points) that
#: the gap's whole 95% interval must lie below for the drop to count as clear: a drop of a
#: block or two of a long prompt is no warning.
CACHE_GAP_MARGIN = 0.05


def hit_rates(per_round: Sequence[Counters]) -> list[float | None]:
    """Each round's prefix-cache hit rate (None for a round that looked up no token)."""
    return [c.prefix_cache_hit_rate for c in per_round]


def cache_gap(
    baseline: Sequence[Counters], speculative: Sequence[Counters]
) -> tuple[float | None, tuple[float, float] | None]:
    """The speculative hit rate minus the baseline's, as the mean of the per-round paired
    differences (round i of each side ran the same requests), and its 95% t-interval: (None,
    None) with fewer than two rounds that have a hit rate on both sides."""
    differences = [
        s - b
        for b, s in zip(hit_rates(baseline), hit_rates(speculative), strict=False)
        if b is not None and s is not None
    ]
    if len(differences) < 2:
        return None, None
    gap, ci = difference_interval(differences)
    return gap, ci


def clearly_below(gap_ci: Sequence[float] | None, margin: float = CACHE_GAP_MARGIN) -> bool:
    """Whether the speculative side's hit rate is clearly below the baseline's: the gap's
    whole 95% interval lies below ``-margin``."""
    if gap_ci is None or len(gap_ci) != 2:
        return False
    high = gap_ci[1]
    return isinstance(high, int | float) and math.isfinite(high) and high < -margin


def _rate(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def rates_text(baseline: float | None, speculative: float | None) -> str:
    """``0.92 baseline, 0.41 speculative`` (``-`` for a side without one)."""
    return f"{_rate(baseline)} baseline, {_rate(speculative)} speculative"


def gap_text(gap: float | None, gap_ci: Sequence[float] | None) -> str:
    """``-0.51 [-0.55 to -0.47]``: the gap with its 95% interval."""
    if gap is None or gap_ci is None or len(gap_ci) != 2:
        return "-"
    return f"{gap:+.2f} [{gap_ci[0]:+.2f} to {gap_ci[1]:+.2f}]"


def cache_warning(
    baseline: float | None,
    speculative: float | None,
    gap: float | None,
    gap_ci: Sequence[float] | None,
) -> str | None:
    """The warning when the speculative side's hit rate is clearly below the baseline's
    (:func:`clearly_below`), else None."""
    if not clearly_below(gap_ci):
        return None
    return (
        f"the speculative engine's prefix-cache hit rate is clearly below the baseline's on "
        f"the same requests ({rates_text(baseline, speculative)}; difference "
        f"{gap_text(gap, gap_ci)}, 95% interval): the speedup mixes speculation's gain with "
        "the prefill the lost cache hits cost"
    )


def cache_note(baseline: float | None, speculative: float | None) -> str:
    """The result's short note when the drop is clear: ``hit rate 0.41 against 0.92``
    (speculative against baseline)."""
    return f"hit rate {_rate(speculative)} against {_rate(baseline)}"
