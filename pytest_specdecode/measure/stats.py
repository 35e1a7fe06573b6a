"""Small statistics without numpy/scipy: t and normal quantiles, paired log-ratio intervals
and the Welch interval of two of them's ratio, Welch, two-proportion and chi-square tests, a
variance's upper confidence bound (checked against scipy in the tests)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (exact, cached)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    return _t975(df)


@functools.lru_cache(maxsize=512)
def _t975(df: float) -> float:
    return -t_quantile(0.025, df)


def ratio_interval(ratios: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """Geometric mean of paired ratios and its 95% t-interval (computed on log ratios).

    Log ratios make a 2x speedup and a 2x slowdown symmetric, and pairing each baseline round
    with its neighbouring speculative round cancels slow drift of the machine.
    """
    if len(ratios) < 2:
        raise ValueError("at least two paired rounds are needed for an interval")
    if any(r <= 0 or not math.isfinite(r) for r in ratios):
        raise ValueError(f"ratios must be positive and finite, got {list(ratios)}")
    mean, (low, high) = difference_interval([math.log(r) for r in ratios])
    return math.exp(mean), (math.exp(low), math.exp(high))


def difference_interval(differences: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """Mean of paired differences and its 95% t-interval (one difference per paired round:
    rounds, not tokens, are the independent units). Rounds that all differ by the same amount
    give an interval of no width."""
    if len(differences) < 2:
        raise ValueError("at least two paired rounds are needed for an interval")
    if any(not math.isfinite(d) for d in differences):
        raise ValueError(f"differences must be finite, got {list(differences)}")
    n = len(differences)
    mean = sum(differences) / n
    var = sum((d - mean) ** 2 for d in differences) / (n - 1)
    half = t975(n - 1) * math.sqrt(var / n)
    return mean, (mean - half, mean + half)


def ratio_of_intervals(
    first: Sequence[float], second: Sequence[float]
) -> tuple[float, tuple[float, float]]:
    """The ratio of two geometric means of paired ratios (``first`` over ``second``, each
    from its own rounds) and its 95% Welch interval, on log ratios: the interval of "how much
    faster is one speculative engine than another", each measured against the baseline."""
    n1, n2 = len(first), len(second)
    if n1 < 2 or n2 < 2:
        raise ValueError("each side needs at least two paired rounds for an interval")
    if any(r <= 0 or not math.isfinite(r) for r in (*first, *second)):
        raise ValueError("ratios must be positive and finite")
    a, b = [math.log(r) for r in first], [math.log(r) for r in second]
    m1, m2 = sum(a) / n1, sum(b) / n2
    w1 = sum((x - m1) ** 2 for x in a) / (n1 - 1) / n1
    w2 = sum((x - m2) ** 2 for x in b) / (n2 - 1) / n2
    se2 = w1 + w2
    df = se2**2 / (w1**2 / (n1 - 1) + w2**2 / (n2 - 1)) if se2 > 0 else float(n1 + n2 - 2)
    half = -t_quantile(0.025, max(df, 1.0)) * math.sqrt(se2)
    d = m1 - m2
    return math.exp(d), (math.exp(d - half), math.exp(d + half))


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of sorted values, interpolated linearly (numpy's default)."""
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


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
    # converges in O(sqrt(max(a, b))) terms: generous for df up to ~1e8
    for m in range(1, 30000):
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


def _t_log_pdf(t: float, df: float) -> float:
    return (
        math.lgamma((df + 1.0) / 2.0)
        - math.lgamma(df / 2.0)
        - 0.5 * math.log(df * math.pi)
        - (df + 1.0) / 2.0 * math.log1p(t * t / df)
    )


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` (possibly fractional) degrees of freedom.

    Inverts :func:`t_cdf` by safeguarded Newton steps on ``log P(T <= -e**u)`` in ``u``
    (nearly linear in both tails), inside a bracket kept by bisection; from ``df = 1e4`` on, a
    Cornish-Fisher expansion. Error below 1e-9 (relative, or absolute near 0) for ``df >= 1``.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if not df > 0.0:
        raise ValueError(f"df must be > 0, got {df}")
    if p == 0.5:
        return 0.0
    if p > 0.5:
        return -t_quantile(1.0 - p, df)
    if df >= 1e4:
        return _t_quantile_expansion(p, df)
    log_p = math.log(p)

    def g(u: float) -> float:  # decreasing in u: log P(T <= -e**u) - log p
        t = -math.exp(u)
        tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
        return math.log(tail) - log_p if tail > 0.0 else -math.inf

    # |t_p| is at least the normal quantile's and, for df >= 1, at most Cauchy's cot(pi p)
    lo = math.log(-normal_quantile(p))
    hi = math.log(1.0 / math.tan(math.pi * p)) if df >= 1.0 else lo + 1.0
    while g(hi) > 0.0:
        lo, hi = hi, hi + 2.0 * (hi - lo) + 1.0
    u = 0.5 * (lo + hi)
    for _ in range(200):
        value = g(u)
        if value == 0.0:
            break
        if value > 0.0:
            lo = u
        else:
            hi = u
        t = -math.exp(u)
        # d/du log F(-e**u) = -pdf(t) e**u / F(t)
        step = u
        if math.isfinite(value):
            slope = -math.exp(_t_log_pdf(t, df) + u - (value + log_p))
            step = u - value / slope if slope < 0.0 else u
        new = step if lo < step < hi else 0.5 * (lo + hi)
        if abs(new - u) <= 1e-14 * max(1.0, abs(u)) or hi - lo <= 1e-14 * max(1.0, abs(u)):
            u = new
            break
        u = new
    return -math.exp(u)


def _t_quantile_expansion(p: float, df: float) -> float:
    """Cornish-Fisher expansion in 1/df (Abramowitz & Stegun 26.7.5), four terms: error below
    1e-12 for df >= 1e4, where t_cdf's log-gamma differences lose digits."""
    x = normal_quantile(p)
    x2 = x * x
    g1 = (x2 + 1.0) * x / 4.0
    g2 = ((5.0 * x2 + 16.0) * x2 + 3.0) * x / 96.0
    g3 = (((3.0 * x2 + 19.0) * x2 + 17.0) * x2 - 15.0) * x / 384.0
    g4 = ((((79.0 * x2 + 776.0) * x2 + 1482.0) * x2 - 1920.0) * x2 - 945.0) * x / 92160.0
    return x + (g1 + (g2 + (g3 + g4 / df) / df) / df) / df


# Acklam's rational approximation of the normal quantile (relative error 1.2e-9), refined
# below by one Halley step on erfc to double precision.
_NQ_A = (-39.69683028665376, 220.9460984245205, -275.9285104469687, 138.3577518672690,
         -30.66479806614716, 2.506628277459239)  # fmt: skip
_NQ_B = (-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972,
         -13.28068155288572)  # fmt: skip
_NQ_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838, -2.549732539343734,
         4.374664141464968, 2.938163982698783)  # fmt: skip
_NQ_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996, 3.754408661907416)


def normal_quantile(p: float) -> float:
    """The ``p`` quantile of the standard normal distribution."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p > 0.5:
        return -normal_quantile(1.0 - p)
    if p < 0.02425:
        q = math.sqrt(-2.0 * math.log(p))
        c, d = _NQ_C, _NQ_D
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0
        )
    else:
        q = p - 0.5
        r = q * q
        a, b = _NQ_A, _NQ_B
        x = (
            (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5])
            * q
            / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0)
        )
    e = 0.5 * math.erfc(-x / math.sqrt(2.0)) - p
    u = e * math.sqrt(2.0 * math.pi) * math.exp(x * x / 2.0)
    return x - u / (1.0 + x * u / 2.0)


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


def variance_bound(df: int, z: float) -> float:
    """How much a sample variance with ``df`` degrees of freedom is scaled up to its upper
    confidence bound of normal quantile ``z`` (chi-square, Wilson-Hilferty): at 75% (z 0.6745)
    2.06 at 4, 1.30 at 19; 1 below one degree of freedom."""
    if df < 1:
        return 1.0
    quantile = df * (1 - 2 / (9 * df) - z * math.sqrt(2 / (9 * df))) ** 3
    return df / quantile


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
