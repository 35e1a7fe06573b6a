import math

import pytest

from pytest_specdecode.measure.stats import mean, ratio_interval, t975


def test_t975_known_values_and_interpolation() -> None:
    assert t975(4) == pytest.approx(2.776)
    assert t975(1000) == pytest.approx(1.96)
    assert t975(30) > t975(35) > t975(40)


def test_ratio_interval_is_geometric_mean_with_t_interval() -> None:
    speedup, (low, high) = ratio_interval([2.0, 2.0, 2.0])
    assert speedup == pytest.approx(2.0)
    assert low == pytest.approx(2.0) and high == pytest.approx(2.0)
    speedup, (low, high) = ratio_interval([1.0, 4.0])
    assert speedup == pytest.approx(2.0)
    half = 12.706 * math.sqrt(((0 - math.log(2)) ** 2 * 2) / 1 / 2)
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
