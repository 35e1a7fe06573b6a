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


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (Numerical Recipes)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-12:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` (possibly fractional) degrees of freedom."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t < 0 else 1.0 - tail


def welch_less(new: Sequence[float], old: Sequence[float]) -> float:
    """One-sided Welch t-test p-value for "mean of ``new`` is below mean of ``old``".

    With no spread in either sample, the answer is 0 when the means differ that way, else 1.
    """
    n1, n2 = len(new), len(old)
    if n1 < 2 or n2 < 2:
        raise ValueError("each sample needs at least two values")
    m1, m2 = sum(new) / n1, sum(old) / n2
    v1 = sum((x - m1) ** 2 for x in new) / (n1 - 1)
    v2 = sum((x - m2) ** 2 for x in old) / (n2 - 1)
    se2 = v1 / n1 + v2 / n2
    if se2 <= 1e-24:
        return 0.0 if m1 < m2 - 1e-12 else 1.0
    t = (m1 - m2) / math.sqrt(se2)
    df = se2**2 / ((v1 / n1) ** 2 / (n1 - 1) + (v2 / n2) ** 2 / (n2 - 1)) if v1 or v2 else 1e9
    return t_cdf(t, max(df, 1.0))


def proportion_less(new_hits: int, new_n: int, old_hits: int, old_n: int) -> float:
    """One-sided two-proportion z-test p-value for "new proportion is below old"."""
    if new_n == 0 or old_n == 0:
        return 1.0
    p1, p2 = new_hits / new_n, old_hits / old_n
    pooled = (new_hits + old_hits) / (new_n + old_n)
    se = math.sqrt(pooled * (1 - pooled) * (1 / new_n + 1 / old_n))
    if se == 0:
        return 0.0 if p1 < p2 else 1.0
    z = (p1 - p2) / se
    return 0.5 * math.erfc(-z / math.sqrt(2))


def _gammainc_lower_series(a: float, x: float) -> float:
    total = term = 1.0 / a
    n = a
    for _ in range(1000):
        n += 1
        term *= x / n
        total += term
        if abs(term) < abs(total) * 1e-14:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _gammainc_upper_cf(a: float, x: float) -> float:
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def chi2_sf(x: float, df: int) -> float:
    """P(X > x) for a chi-square variable with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if x <= 0:
        return 1.0
    a, half = df / 2.0, x / 2.0
    if half < a + 1.0:
        return 1.0 - _gammainc_lower_series(a, half)
    return _gammainc_upper_cf(a, half)


def homogeneity_test(
    a: dict[int, int], b: dict[int, int], min_expected: float = 5.0
) -> tuple[float, int, float]:
    """Chi-square test that two samples of categories come from one distribution.

    Categories whose expected count is below ``min_expected`` in either sample are pooled into
    one "other" bin. Returns (statistic, degrees of freedom, p-value); p is 1.0 when fewer
    than two bins remain.
    """
    n_a, n_b = sum(a.values()), sum(b.values())
    total = n_a + n_b
    if n_a == 0 or n_b == 0:
        return 0.0, 0, 1.0
    bins: list[tuple[int, int]] = []
    other_a = other_b = 0
    for key in set(a) | set(b):
        ca, cb = a.get(key, 0), b.get(key, 0)
        column = ca + cb
        if min(column * n_a / total, column * n_b / total) < min_expected:
            other_a, other_b = other_a + ca, other_b + cb
        else:
            bins.append((ca, cb))
    if other_a + other_b:
        bins.append((other_a, other_b))
    if len(bins) < 2:
        return 0.0, 0, 1.0
    stat = 0.0
    for ca, cb in bins:
        column = ca + cb
        ea, eb = column * n_a / total, column * n_b / total
        stat += (ca - ea) ** 2 / ea + (cb - eb) ** 2 / eb
    df = len(bins) - 1
    return stat, df, chi2_sf(stat, df)
