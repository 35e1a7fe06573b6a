"""Tolerated drops for the regression rule (``--specdecode-compare-fail``): parsed once,
shared by the settings that validate them and the comparison that applies them.

A tolerance must be above 0 (the rules are designed to catch twice the tolerance, and a drop
of 0 can never be told apart from noise). A relative tolerance must be below 100% (a drop of
100% takes any figure to zero, so nothing could regress, and the speedup's rule works on
``log(1 - tolerance)``); an absolute speedup tolerance must be below every stored speedup
(:func:`~pytest_specdecode.baselines.compare.check_speedup_amount`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import ConfigError
from .figure_table import comparable

#: Default tolerated drops.
DEFAULT_TOLERANCES = "speedup:5%,acceptance_rate:5%"

#: Figures that can be compared (the figure table's comparable rows): name → compared on a log
#: scale?
FIGURES: dict[str, bool] = {f.name: f.log_scale for f in comparable()}


@dataclass(frozen=True)
class Tolerance:
    figure: str
    amount: float
    relative: bool

    def floor(self, old: float) -> float:
        """The lowest value that is still within the tolerance of ``old``."""
        return old * (1 - self.amount) if self.relative else old - self.amount

    def ceiling(self, old: float) -> float:
        return old * (1 + self.amount) if self.relative else old + self.amount

    def __str__(self) -> str:
        return (
            f"{self.figure}:{self.amount * 100:.10g}%"
            if self.relative
            else (f"{self.figure}:{self.amount:g}")
        )


def parse_tolerances(text: str, source: str = "--specdecode-compare-fail") -> list[Tolerance]:
    """Parse ``figure:amount[%],...``; errors name ``source`` and the bad part."""
    result = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        figure, sep, amount = part.partition(":")
        figure = figure.strip()
        if not sep:
            raise ConfigError(f"{source}: {part!r} should look like speedup:10% or match_rate:0.1")
        if figure not in FIGURES:
            raise ConfigError(f"{source}: unknown figure {figure!r}; known: " + ", ".join(FIGURES))
        relative = amount.strip().endswith("%")
        try:
            value = float(amount.strip().rstrip("%"))
        except ValueError:
            raise ConfigError(f"{source}: {part!r}: {amount!r} is not a number") from None
        if not value > 0 or not math.isfinite(value):
            raise ConfigError(
                f"{source}: {part!r}: a tolerance must be above 0 (the rules are designed to "
                f"catch a drop of twice the tolerance, and a drop of 0 cannot be caught: the "
                f"comparison would never decide). Give the smallest drop that matters, e.g. "
                f"{figure}:1%, or leave {figure} out of the list to not compare it"
            )
        if relative and value >= 100:
            raise ConfigError(
                f"{source}: {part!r}: a relative tolerance must be below 100% (a drop of 100% "
                f"takes {figure} to zero: nothing could ever regress). Give a smaller one, e.g. "
                f"{figure}:10%, or leave {figure} out of the list to not compare it"
            )
        result.append(Tolerance(figure, value / 100 if relative else value, relative))
    if not result:
        raise ConfigError(f"{source}: no tolerance given, e.g. speedup:10%,acceptance_rate:5%")
    return result
