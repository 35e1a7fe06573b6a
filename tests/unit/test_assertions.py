import pytest

from pytest_specdecode import (
    assert_acceptance_length,
    assert_acceptance_rate,
    assert_outputs_equivalent,
    assert_speedup,
)
from pytest_specdecode.errors import ConfigError, GateError
from pytest_specdecode.measure.assertions import check_gates

from ..helpers import fake_result


def test_speedup_gate_passes_and_fails_with_figures() -> None:
    result = fake_result()
    assert_speedup(result, min=1.9)
    with pytest.raises(GateError) as info:
        assert_speedup(result, min=2.5)
    message = str(info.value)
    assert "speedup 2.00x is below the minimum 2.50x" in message
    assert "95% CI 2.00x-2.00x over 3 paired rounds" in message
    assert "tests/test_x.py::test_a" in message
    assert info.value.key == ("tests/test_x.py::test_a", "")  # the result it judged


def test_acceptance_gates() -> None:
    result = fake_result()
    assert_acceptance_rate(result, min=0.75)
    assert_acceptance_length(result, min=4.0)
    with pytest.raises(GateError, match=r"acceptance rate 0.750 is below the minimum 0.800"):
        assert_acceptance_rate(result, min=0.8)
    with pytest.raises(GateError, match=r"per position \[1.00, 0.80, 0.70, 0.50\]"):
        assert_acceptance_rate(result, min=0.8)
    with pytest.raises(GateError, match=r"mean acceptance length 4.00 is below the minimum 4.50"):
        assert_acceptance_length(result, min=4.5)


def test_equivalence_names_diverging_prompts() -> None:
    result = fake_result(base_outputs=[[1, 2, 3], [4, 5, 6]], spec_outputs=[[1, 2, 3], [4, 7, 6]])
    assert_outputs_equivalent(result, min_match_rate=0.5)
    with pytest.raises(GateError) as info:
        assert_outputs_equivalent(result)
    assert "match rate 0.50 is below the minimum 1.00" in str(info.value)
    assert "prompt 1: first differs at token 1 (baseline 5, speculative 7)" in str(info.value)


def test_exact_equivalence_refused_when_sampling() -> None:
    result = fake_result(temperature=0.8)
    with pytest.raises(ConfigError, match="temperature=0.8"):
        assert_outputs_equivalent(result)


def test_threshold_must_be_a_number() -> None:
    with pytest.raises(ConfigError, match="assert_speedup"):
        assert_speedup(fake_result(), min="fast")  # type: ignore[arg-type]
    # nan would pass every figure (every comparison with it is false), inf fail every one
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ConfigError, match=r"assert_speedup\(min=...\): expected a finite"):
            assert_speedup(fake_result(), min=bad)


def test_check_gates_collects_every_failure() -> None:
    failures = check_gates(
        fake_result(), {"min_speedup": 3.0, "min_acceptance_rate": 0.9, "min_match_rate": 1.0}
    )
    assert len(failures) == 2
