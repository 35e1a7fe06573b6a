"""Small statistics without numpy/scipy: paired log-ratio intervals."""

from __future__ import annotations

import math
from collections.abc import Sequence

# Two-sided 95% Student t quantiles (0.975) by degrees of freedom.
_T975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    21: 2.080,
    22: 2.074,
    23: 2.069,
    24: 2.064,
    25: 2.060,
    26: 2.056,
    27: 2.052,
    28: 2.048,
    29: 2.045,
    30: 2.042,
    40: 2.021,
    60: 2.000,
    120: 1.980,
}


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df in _T975:
        return _T975[df]
    if df > 120:
        return 1.960
    lower = max(k for k in _T975 if k < df)
    upper = min(k for k in _T975 if k > df)
    # interpolate in 1/df, which is close to linear for t quantiles
    w = (1 / df - 1 / upper) / (1 / lower - 1 / upper)
    return _T975[upper] + w * (_T975[lower] - _T975[upper])


def ratio_interval(ratios: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """Geometric mean of paired ratios and its 95% t-interval (computed on log ratios).

    Log ratios make a 2x speedup and a 2x slowdown symmetric, and pairing each baseline round
    with its neighbouring speculative round cancels slow drift of the machine.
    """
    if len(ratios) < 2:
        raise ValueError("at least two paired rounds are needed for an interval")
    if any(r <= 0 or not math.isfinite(r) for r in ratios):
        raise ValueError(f"ratios must be positive and finite, got {list(ratios)}")
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    mean = sum(logs) / n
    var = sum((x - mean) ** 2 for x in logs) / (n - 1)
    half = t975(n - 1) * math.sqrt(var / n)
    return math.exp(mean), (math.exp(mean - half), math.exp(mean + half))


def mean(values: Sequence[float | None]) -> float | None:
    """Mean of the values that are not ``None``; ``None`` when there are none."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None
