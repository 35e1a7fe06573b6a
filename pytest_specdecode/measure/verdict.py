"""Is speculation worth it for this workload? :class:`Verdict`, the one type of the answer:
its words (a report's ``verdict`` field, a table's cell) and the rule of the speedup's
interval alone. Every layer that reads, writes, compares or shows a verdict asks this module;
:mod:`~.judge` gives a result its verdict and the reasons."""

from __future__ import annotations

import math
from enum import StrEnum


class Verdict(StrEnum):
    """Whether speculation is worth it for a result; the value is the words a report writes
    (and a table shows), so a verdict is also equal to its words."""

    WORTH = "worth it"
    NOT_WORTH = "not worth it"
    INCONCLUSIVE = "inconclusive"

    @classmethod
    def read(cls, text: str | None) -> Verdict | None:
        """The verdict a report's ``verdict`` field names; None for ``""`` or null (a result
        without one: a sweep's point, a report from before verdicts)."""
        return cls(text) if text else None


def written(verdict: Verdict | None) -> str:
    """A verdict as a report's ``verdict`` field writes it: its words, ``""`` for none."""
    return "" if verdict is None else str(verdict)


def by_interval(ci: tuple[float, float]) -> Verdict:
    """The verdict of the speedup's 95% interval alone: not worth it when it lies below 1,
    worth it when it lies above 1, inconclusive otherwise (an unknown end, NaN or infinite,
    decides nothing)."""
    low, high = ci
    if math.isfinite(high) and high < 1.0:
        return Verdict.NOT_WORTH
    if math.isfinite(low) and low > 1.0:
        return Verdict.WORTH
    return Verdict.INCONCLUSIVE
