"""A sweep with its k schedule and a check of that schedule for the reporting tests, built
the way :meth:`Bench.sweep` and :meth:`Bench.check_schedule` build them (``Sweep.schedule``,
``check_plan``, ``check_row``), with figures chosen so that the tests can state them."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pytest_specdecode.measure.kschedule import ScheduleCheck, check_plan, check_row
from pytest_specdecode.measure.result import Result
from pytest_specdecode.measure.stats import t975
from pytest_specdecode.measure.sweep import Sweep

from .helpers import fake_result

NODEID = "suite/test_k_schedule.py::test_k_schedule"
DRAFT = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}

#: (k, concurrency) -> (speedup, 95% interval): k=4 is the fastest at batch 1, k=2 is within
#: 5% of k=4 at batch 8, every k is slower than the target alone at batch 32.
GRID = {
    (1, 1): (1.60, (1.52, 1.68)), (2, 1): (1.91, (1.87, 1.96)), (4, 1): (2.29, (2.21, 2.38)),
    (1, 8): (1.47, (1.42, 1.51)), (2, 8): (1.80, (1.76, 1.83)), (4, 8): (1.82, (1.77, 1.87)),
    (1, 32): (0.89, (0.85, 0.93)), (2, 32): (0.84, (0.82, 0.86)), (4, 32): (0.69, (0.68, 0.71)),
}  # fmt: skip

#: What the scheduled engine and the fixed k measured when checked, by run label.
HELD = {
    "schedule c=1": (2.30, (2.22, 2.38)),
    "schedule c=8": (1.75, (1.69, 1.81)),
    "fixed k=4 c=1": (2.33, (2.17, 2.50)),
    "fixed k=4 c=8": (1.82, (1.72, 1.92)),
}
#: The same, but at batch 8 the schedule's k=2 is well below the fixed k=4.
FELL_SHORT = {**HELD, "schedule c=8": (1.40, (1.35, 1.45))}


def result(speedup: float, ci: tuple[float, float]) -> Result:
    """A result with the speedup, its interval and four rounds' ratios that give about that
    interval (their geometric mean is the speedup; check_row compares rounds)."""
    # four log ratios at m +- d: the t-interval's half-width is t975(3) * d / sqrt(3)
    d = (math.log(ci[1]) - math.log(ci[0])) / 2 / (t975(3) / math.sqrt(3))
    ratios = [speedup * math.exp(sign * d) for sign in (-1, 1, -1, 1)]
    return replace(fake_result(), speedup=speedup, speedup_ci=ci, ratios=ratios)


def sweep(
    grid: Mapping[tuple[int, int], tuple[float, tuple[float, float]]] = GRID,
    nodeid: str = NODEID,
) -> Sweep:
    """A sweep over the grid's k and concurrencies, in the draft model's config."""
    swept = Sweep(nodeid, base_config=dict(DRAFT))
    for (k, c), (speedup, ci) in sorted(grid.items()):
        swept.add(k, c, result(speedup, ci))
    return swept


def check(
    figures: Mapping[str, tuple[float, tuple[float, float]]] = HELD,
    concurrencies: tuple[int, ...] = (1, 8, 32),
    tolerance: float = 0.05,
) -> ScheduleCheck:
    """The check of :func:`sweep`'s schedule with the runs' figures given by label."""
    schedule = sweep().schedule()
    results = {name: result(*values) for name, values in figures.items()}
    rows = tuple(
        check_row(planned, results, tolerance, with_draft=True)
        for planned in check_plan(schedule, concurrencies)
    )
    return ScheduleCheck(NODEID, schedule, tolerance, rows)


def as_read(data: Mapping[str, Any]) -> dict[str, Any]:
    """A dict as a report holds it (through JSON)."""
    read: dict[str, Any] = json.loads(json.dumps(data))
    return read


def sweep_dict(**kwargs: Any) -> dict[str, Any]:
    return as_read(sweep(**kwargs).to_dict())


def check_dict(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return as_read(check(*args, **kwargs).to_dict())


def sweep_read(**kwargs: Any) -> Sweep:
    """:func:`sweep_dict` read back as a report's reader does (``Sweep.from_dict``)."""
    return Sweep.from_dict(sweep_dict(**kwargs))


def check_read(*args: Any, **kwargs: Any) -> ScheduleCheck:
    """:func:`check_dict` read back as a report's reader does (``ScheduleCheck.from_dict``)."""
    return ScheduleCheck.from_dict(check_dict(*args, **kwargs))


#: A one-test suite that sweeps on the simulated engines, makes the schedule and checks it.
SCHEDULE_SUITE = """
import pytest
from pytest_specdecode import assert_schedule_holds

SPEC = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}

@pytest.mark.specdecode("k_schedule", target="org/target", speculative_config=SPEC)
def test_schedule(specdecode):
    sweep = specdecode.sweep(["p"], max_tokens=8, num_speculative_tokens=[1, 4],
                             concurrency=[1, 16])
    check = specdecode.check_schedule(sweep.schedule(), ["p"], max_tokens=8)
    assert_schedule_holds(check)
"""
