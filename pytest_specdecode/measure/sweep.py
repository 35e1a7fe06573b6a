"""Sweeps over k and concurrency: the best k per concurrency and the crossover."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from .kschedule import DEFAULT_TOLERANCE, KSchedule, check_tolerance, choose_k
from .phases import PhaseSummary
from .result import Result, finite, number, summarized


@dataclass
class Sweep:
    """Results of ``specdecode.sweep``, one per (k, concurrency) point, the speculative
    config the sweep varied k in (``base_config``) and the sweep's ``label`` (``""``: none).
    Data only: the reports say it in words
    (:func:`~pytest_specdecode.reporting.table.sweep_line`)."""

    nodeid: str
    points: list[tuple[int, int, Result]] = field(default_factory=list)
    base_config: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    @property
    def name(self) -> str:
        """``nodeid``, and ``[label]`` after it for a labelled sweep."""
        return f"{self.nodeid}[{self.label}]" if self.label else self.nodeid

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

    def schedule(self, tolerance: float = DEFAULT_TOLERANCE) -> KSchedule:
        """A k per batch-size range for vLLM's ``num_speculative_tokens_per_batch_size``.

        At each measured concurrency: the smallest k whose speedup is at least
        ``(1 - tolerance)`` times the best k's (a smaller k drafts fewer tokens and holds less
        draft KV cache for about the same speed); k = 0 (speculation off) where the best k's
        95% interval lies wholly below 1.0. Each measured concurrency ends a range that takes
        its choice (the first starts at batch 1), neighbours with equal k are merged, and
        larger batches than the sweep measured keep the last choice (vLLM carries the last
        range forward). The entries are checked with the installed vLLM's own rules.
        """
        tolerance = check_tolerance(tolerance, f"{self.name}: schedule")
        if not self.points:
            raise ConfigError(f"{self.name}: schedule(): the sweep measured nothing")
        grid: dict[int, dict[int, Result]] = {}
        for k, c, result in self.points:
            grid.setdefault(c, {})[k] = result
        choices = [choose_k(c, by_k, tolerance) for c, by_k in sorted(grid.items())]
        return KSchedule.of(self.name, choices, self.base_config, tolerance)

    def point_label(self, k: int, concurrency: int) -> str:
        """The label of the point's result (``k=2 c=8``, after the sweep's label)."""
        return f"{self.label} k={k} c={concurrency}" if self.label else f"k={k} c={concurrency}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (non-finite numbers as null): each point's figures, not its
        whole result (that is a report's result under :meth:`point_label`)."""
        data: dict[str, Any] = finite(
            {
                "nodeid": self.nodeid,
                **({"label": self.label} if self.label else {}),
                "points": [_point(k, c, r) for k, c, r in self.points],
                "best_k": {str(c): k for c, (k, _) in self.best_k().items()},
                "crossover": self.crossover(),
                "schedule": self.schedule().to_dict() if self.points else None,
            }
        )
        return data

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], results: Mapping[tuple[str, str], Result] | None = None
    ) -> Sweep:
        """The sweep a :meth:`to_dict` describes (derived keys are recomputed). A point's
        result is the one in ``results`` (by key: node id, :meth:`point_label`) whose figures
        are the point's; else one that holds only the point's figures
        (:func:`~.result.summarized`)."""
        sweep = cls(str(data["nodeid"]), label=str(data.get("label") or ""))
        config: dict[str, Any] = {}
        schedule = data.get("schedule")
        if schedule is not None:
            config = dict(schedule.get("base_config") or {})
        sweep.base_config = config
        for point in data["points"]:
            k, c = int(point["num_speculative_tokens"]), int(point["concurrency"])
            label = sweep.point_label(k, c)
            full = (results or {}).get((sweep.nodeid, label))
            if full is None or _point(k, c, full) != finite(dict(point)):
                low, high = point["speedup_ci"]
                phases = point.get("phases")
                full = summarized(
                    sweep.nodeid, label, num_speculative_tokens=k, concurrency=c,
                    method=str(config.get("method") or ""),
                    speculative_config={**config, "num_speculative_tokens": k},
                    speedup=number(point["speedup"]), speedup_ci=(number(low), number(high)),
                    acceptance_rate=number(point.get("acceptance_rate")),
                    phases=None if phases is None else PhaseSummary.from_dict(phases),
                )  # fmt: skip
            sweep.add(k, c, full)
        return sweep


def _point(k: int, concurrency: int, result: Result) -> dict[str, Any]:
    """A point of :meth:`Sweep.to_dict`."""
    point: dict[str, Any] = finite(
        {
            "num_speculative_tokens": k,
            "concurrency": concurrency,
            "speedup": result.speedup,
            "speedup_ci": list(result.speedup_ci),
            "acceptance_rate": result.acceptance_rate,
            "phases": None if result.phases is None else result.phases.to_dict(),
        }
    )
    return point
