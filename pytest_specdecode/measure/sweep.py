"""Sweeps over k and concurrency: the best k per concurrency and the crossover."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .result import Result


@dataclass
class Sweep:
    """Results of ``specdecode.sweep``, one per (k, concurrency) point."""

    nodeid: str
    points: list[tuple[int, int, Result]] = field(default_factory=list)

    def add(self, k: int, concurrency: int, result: Result) -> None:
        self.points.append((k, concurrency, result))

    @property
    def concurrencies(self) -> list[int]:
        return sorted({c for _, c, _ in self.points})

    def best_k(self) -> dict[int, tuple[int, Result]]:
        """For each concurrency, the k with the highest speedup, and its result."""
        best: dict[int, tuple[int, Result]] = {}
        for k, c, result in self.points:
            if c not in best or result.speedup > best[c][1].speedup:
                best[c] = (k, result)
        return best

    def crossover(self) -> int | None:
        """The lowest concurrency at which even the best k is slower (interval below 1.0)."""
        for c, (_, result) in sorted(self.best_k().items()):
            if result.speedup_ci[1] < 1.0:
                return c
        return None

    def summary(self) -> str:
        best = ", ".join(
            f"c={c}: k={k} ({r.speedup:.2f}x)" for c, (k, r) in sorted(self.best_k().items())
        )
        crossover = self.crossover()
        tail = (
            f"speedup's interval drops below 1.0 at concurrency {crossover}"
            if crossover is not None
            else f"no crossover: speculation still pays at concurrency {max(self.concurrencies)}"
        )
        return f"{self.nodeid}: best k per concurrency: {best}; {tail}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "points": [
                {
                    "num_speculative_tokens": k,
                    "concurrency": c,
                    "speedup": r.speedup,
                    "speedup_ci": list(r.speedup_ci),
                    "acceptance_rate": r.acceptance_rate,
                }
                for k, c, r in self.points
            ],  # fmt: skip
            "best_k": {str(c): k for c, (k, _) in self.best_k().items()},
            "crossover": self.crossover(),
        }
