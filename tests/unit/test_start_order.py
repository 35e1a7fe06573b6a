"""The start-order benchmark's bias summary (benchmarks/start_order.py): pure arithmetic."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ..helpers import benchmark_script

bench = benchmark_script("start_order")


def session(
    first: str, role: float, order: float, position: float = 0.0, noise: float = 0.0
) -> Any:
    """A session whose rounds' log(baseline / speculative) is role + order x sign, plus
    +position in rounds where the baseline ran first and -position where it ran second."""
    sign = 1 if first == "baseline" else -1
    logs = [role + order * sign + (position if i % 2 == 0 else -position) for i in range(6)]
    return bench.Session(first, tuple(math.exp(x + noise) for x in logs))


def test_separates_start_order_from_role_and_position() -> None:
    sessions = [
        session(first, role=0.01, order=-0.02, position=0.005, noise=noise)
        for first, noise in [("baseline", 0.001), ("speculative", -0.002),
                             ("baseline", -0.001), ("speculative", 0.002)]
    ]  # fmt: skip
    summary = bench.bias_summary(sessions)
    assert summary.order.ratio == pytest.approx(math.exp(-0.02))
    assert summary.role.ratio == pytest.approx(math.exp(0.01))
    assert summary.position.ratio == pytest.approx(math.exp(0.005))
    assert summary.order.low < summary.order.ratio < summary.order.high < 1
    assert summary.order.excludes_none and summary.role.excludes_none
    assert summary.sessions == 4


def test_a_session_reads_its_first_started_engine_by_role() -> None:
    s = session("speculative", role=0.0, order=0.03)  # spec first: baseline/spec = exp(-0.03)
    assert s.role_log == pytest.approx(-0.03)
    assert s.order_log == pytest.approx(0.03)


def test_no_bias_gives_an_interval_around_one() -> None:
    sessions = [
        session(first, 0.0, 0.0, noise=noise)
        for first, noise in [("baseline", 0.01), ("speculative", 0.01),
                             ("baseline", -0.01), ("speculative", -0.01)]
    ]  # fmt: skip
    summary = bench.bias_summary(sessions)
    assert summary.order.low < 1 < summary.order.high
    assert not summary.role.excludes_none


def test_one_start_order_alone_cannot_separate_the_biases() -> None:
    with pytest.raises(ValueError, match="both start orders"):
        bench.bias_summary([session("baseline", 0, 0) for _ in range(4)])
    with pytest.raises(ValueError, match="first_role"):
        bench.Session("base", (1.0, 1.0))
