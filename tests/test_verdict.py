from dataclasses import replace

import pytest

from pytest_specdecode import assert_extra_memory
from pytest_specdecode.errors import GateError
from pytest_specdecode.measure.verdict import INCONCLUSIVE, NOT_WORTH, WORTH, judge

from .helpers import fake_result


def test_clear_speedup_is_worth_it() -> None:
    verdict, reasons = judge(fake_result())
    assert verdict == WORTH and reasons[0].startswith("faster: speedup 2.00x")


def test_slowdown_with_low_alpha_names_the_cost_ratio() -> None:
    result = replace(fake_result(spec_times=(2.0, 2.2, 1.8)), alpha=0.2, cost_ratio=0.3)
    verdict, reasons = judge(result)
    assert verdict == NOT_WORTH
    assert any("acceptance too low for this cost ratio" in r for r in reasons)


def test_straddling_one_is_inconclusive() -> None:
    result = fake_result(spec_times=(0.8, 1.3, 1.0))
    verdict, reasons = judge(result)
    assert verdict == INCONCLUSIVE and "contains 1.0" in reasons[0]


def test_memory_gate() -> None:
    plain = fake_result()
    result = replace(
        plain,
        baseline=replace(plain.baseline, memory_gib=1.0),
        speculative=replace(plain.speculative, memory_gib=3.5),
        extra_memory_gib=2.5,
    )
    verdict, reasons = judge(result, max_extra_memory_gib=1.0)
    assert verdict == NOT_WORTH and "above the 1 GiB allowed" in reasons[-1]
    assert_extra_memory(result, max=3.0)
    with pytest.raises(GateError, match="costs 2.50 GiB more memory than the baseline"):
        assert_extra_memory(result, max=1.0)
