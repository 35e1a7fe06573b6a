import itertools
import math
import random

import pytest

from pytest_specdecode.measure.detectable import _SPREAD_Z, SPREAD_CONFIDENCE
from pytest_specdecode.measure.sequential import SESSION_CONFIDENCE, SESSION_Z
from pytest_specdecode.measure.stats import (
    betainc,
    chi2_sf,
    homogeneity_test,
    mean,
    normal_quantile,
    proportion_less,
    ratio_interval,
    t975,
    t_cdf,
    t_quantile,
    variance_bound,
    welch_less,
)

PROBABILITIES = (1e-6, 1e-4, 0.001, 0.01, 0.025, 0.05, 0.2, 0.45, 0.5, 0.6, 0.9, 0.975, 0.999,
                 1 - 1e-6)  # fmt: skip
DFS = (1, 1.5, 2, 3, 4.7, 7, 12, 30, 60, 119, 120, 121, 250, 1000, 9999, 1e4, 1e6, 1e9)


def close(a: float, b: float, rel: float) -> bool:
    """Relative agreement, or absolute near zero."""
    return abs(a - b) <= rel * max(1.0, abs(b))


def test_t975_known_values_and_monotone() -> None:
    assert t975(1) == pytest.approx(12.7062047, abs=1e-6)
    assert t975(4) == pytest.approx(2.7764451, abs=1e-6)
    assert t975(120) == pytest.approx(1.9799304, abs=1e-6)
    # no jump after 120: 121 degrees of freedom are a hair below 120, far above 1.96
    assert t975(121) == pytest.approx(1.9797638, abs=1e-6)
    assert t975(1000) == pytest.approx(1.9623391, abs=1e-6)
    values = [t975(df) for df in range(1, 400)]
    assert all(a > b for a, b in itertools.pairwise(values))
    assert values[-1] > normal_quantile(0.975)


def test_t975_rejects_df_below_one() -> None:
    with pytest.raises(ValueError):
        t975(0)


@pytest.mark.parametrize("df", DFS)
def test_t_quantile_inverts_t_cdf(df: float) -> None:
    for p in PROBABILITIES:
        t = t_quantile(p, df)
        if df < 1e4:  # beyond, t_cdf's log-gamma differences lose digits near the centre
            assert t_cdf(t, df) == pytest.approx(p, rel=1e-8, abs=1e-12)
        assert t_quantile(1 - p, df) == pytest.approx(-t, rel=1e-9, abs=1e-9)
    assert t_quantile(0.5, df) == 0.0


def test_t_quantile_closed_forms() -> None:
    # df = 1 is Cauchy: tan(pi (p - 1/2)); df = 2: (2p - 1) / sqrt(2 p (1 - p))
    for p in PROBABILITIES:
        assert close(t_quantile(p, 1), math.tan(math.pi * (p - 0.5)), 1e-9)
        assert close(t_quantile(p, 2), (2 * p - 1) / math.sqrt(2 * p * (1 - p)), 1e-9)


@pytest.mark.parametrize(("p", "df"), [(0.0, 3), (1.0, 3), (-0.1, 3), (0.5, 0), (0.5, -1)])
def test_t_quantile_rejects_bad_input(p: float, df: float) -> None:
    with pytest.raises(ValueError):
        t_quantile(p, df)


def test_normal_quantile_known_values() -> None:
    assert normal_quantile(0.975) == pytest.approx(1.959963984540054, rel=1e-14)
    assert normal_quantile(0.5) == 0.0
    assert normal_quantile(1e-6) == pytest.approx(-4.753424308822899, rel=1e-13)
    for p in PROBABILITIES:
        z = normal_quantile(p)
        assert 0.5 * math.erfc(-z / math.sqrt(2)) == pytest.approx(p, rel=1e-12)
    with pytest.raises(ValueError):
        normal_quantile(1.0)


def test_ratio_interval_is_geometric_mean_with_t_interval() -> None:
    speedup, (low, high) = ratio_interval([2.0, 2.0, 2.0])
    assert speedup == pytest.approx(2.0)
    assert low == pytest.approx(2.0) and high == pytest.approx(2.0)
    speedup, (low, high) = ratio_interval([1.0, 4.0])
    assert speedup == pytest.approx(2.0)
    half = 12.7062047 * math.sqrt(((0 - math.log(2)) ** 2 * 2) / 1 / 2)
    assert low == pytest.approx(math.exp(math.log(2) - half))
    assert high == pytest.approx(math.exp(math.log(2) + half))


def test_ratio_interval_symmetric_in_log_space() -> None:
    fast, _ = ratio_interval([2.0, 0.5])
    assert fast == pytest.approx(1.0)


@pytest.mark.parametrize("bad", [[1.0], [1.0, 0.0], [1.0, float("nan")]])
def test_ratio_interval_rejects_bad_input(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        ratio_interval(bad)


def test_mean_skips_none() -> None:
    assert mean([None, 1.0, 3.0]) == 2.0
    assert mean([None]) is None


# --- every routine against scipy (a development dependency only) ---


def test_t_cdf_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 1.5, 2, 5, 30, 200, 1e4):
        for t in (-1e4, -50, -5, -2, -0.5, -1e-3, 0.0, 0.3, 2, 8, 1e3, math.inf, -math.inf):
            expected = float(stats.t.cdf(t, df))
            got = t_cdf(t, df)
            tail = min(expected, 1 - expected)
            assert abs(got - expected) <= max(1e-13, 1e-9 * tail), (df, t, got, expected)


def test_t_quantile_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in DFS:
        for p in PROBABILITIES + (0.4999, 0.50001):
            expected = float(stats.t.ppf(p, df))
            assert close(t_quantile(p, df), expected, 1e-8), (p, df, expected)


def test_variance_bound_matches_scipy_within_the_approximation() -> None:
    """Wilson-Hilferty's chi-square quantile at the bounds the rules use: the sessions' (from
    2 degrees of freedom) within 2% of the exact bound, the rounds' (from 19) within 0.1%."""
    stats = pytest.importorskip("scipy.stats")
    uses = ((SESSION_CONFIDENCE, SESSION_Z, 2, 0.02), (SPREAD_CONFIDENCE, _SPREAD_Z, 19, 0.001))
    for confidence, z, least_df, rel in uses:
        assert z == pytest.approx(normal_quantile(confidence), abs=1e-4)  # the pair agrees
        for df in (d for d in (2, 3, 4, 9, 19, 40, 89) if d >= least_df):
            exact = df / float(stats.chi2.ppf(1 - confidence, df))
            assert variance_bound(df, z) == pytest.approx(exact, rel=rel), (confidence, df)
    assert variance_bound(0, SESSION_Z) == 1.0


def test_t975_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in [*range(1, 300), 500, 1000, 10**4, 10**6]:
        assert t975(df) == pytest.approx(float(stats.t.ppf(0.975, df)), rel=1e-10), df


def test_normal_quantile_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for p in (1e-300, 1e-20, 1e-9, *PROBABILITIES, 0.02425, 0.97575, 1 - 1e-12):
        assert close(normal_quantile(p), float(stats.norm.ppf(p)), 1e-13), p


def test_betainc_matches_scipy() -> None:
    special = pytest.importorskip("scipy.special")
    for a, b, x in itertools.product(
        (0.5, 1, 2.5, 10, 60, 500), (0.5, 1, 3, 40), (0.0, 1e-6, 0.01, 0.2, 0.5, 0.8, 0.99, 1.0)
    ):
        expected = float(special.betainc(a, b, x))
        got = betainc(a, b, x)
        assert abs(got - expected) <= max(1e-13, 1e-9 * expected), (a, b, x, got, expected)


def test_chi2_sf_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 7, 20, 100):
        for x in (0.0, 0.01, 0.5, 1, 3, 10, 30, 100, 300):
            expected = float(stats.chi2.sf(x, df))
            got = chi2_sf(x, df)
            assert abs(got - expected) <= max(1e-13, 1e-9 * expected), (df, x, got, expected)


def test_welch_less_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(3)
    for n1, n2 in ((2, 2), (3, 5), (5, 5), (10, 4), (20, 20)):
        for _ in range(20):
            new = [rng.gauss(0, 1) for _ in range(n1)]
            shift, sd = rng.uniform(-1, 1), rng.uniform(0.2, 3)
            old = [rng.gauss(shift, sd) for _ in range(n2)]
            expected = stats.ttest_ind(new, old, equal_var=False, alternative="less").pvalue
            assert welch_less(new, old) == pytest.approx(float(expected), abs=1e-10)


def test_proportion_less_matches_scipy() -> None:
    # the pooled two-proportion z-test is the uncorrected 2x2 chi-square test, signed
    stats = pytest.importorskip("scipy.stats")
    cases = [(40, 100, 55, 100), (55, 100, 40, 100), (3, 20, 9, 25), (480, 1000, 520, 1000),
             (10, 50, 10, 50), (1, 7, 6, 9)]  # fmt: skip
    for new_hits, new_n, old_hits, old_n in cases:
        table = [[new_hits, new_n - new_hits], [old_hits, old_n - old_hits]]
        res = stats.chi2_contingency(table, correction=False)
        two_sided = float(res.pvalue)
        lower = new_hits / new_n < old_hits / old_n
        expected = two_sided / 2 if lower else 1 - two_sided / 2
        got = proportion_less(new_hits, new_n, old_hits, old_n)
        assert got == pytest.approx(expected, abs=1e-12), (new_hits, new_n, old_hits, old_n)


def test_homogeneity_test_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(5)
    for _ in range(30):
        n_bins = rng.randint(2, 6)
        a = {i: rng.randint(6, 200) for i in range(n_bins)}
        b = {i: rng.randint(6, 200) for i in range(n_bins)}
        stat, df, p = homogeneity_test(a, b, min_expected=0.0)
        res = stats.chi2_contingency([list(a.values()), list(b.values())], correction=False)
        assert stat == pytest.approx(float(res.statistic), rel=1e-10)
        assert df == res.dof
        assert p == pytest.approx(float(res.pvalue), rel=1e-9, abs=1e-14)
    # rare categories (expected count below 5 in either sample) pool into one bin
    a, b = {0: 50, 1: 60, 2: 1, 3: 2}, {0: 70, 1: 40, 2: 3, 3: 0}
    stat, df, p = homogeneity_test(a, b)
    res = stats.chi2_contingency([[50, 60, 3], [70, 40, 3]], correction=False)
    assert (stat, df) == (pytest.approx(float(res.statistic), rel=1e-10), 2)
    assert p == pytest.approx(float(res.pvalue), rel=1e-9)
