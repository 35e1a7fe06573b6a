"""Sweeps over k and concurrency: the best k per concurrency and the crossover."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from .kschedule import DEFAULT_TOLERANCE, KSchedule, check_tolerance, choose_k, label_key
from .model import Derived, Form, Key, Record, encode, finite, json
from .phases import PhaseSummary
from .result import Result, number, summarized


@dataclass(frozen=True)
class SweepPoint(Record):
    """A point of a sweep as a report keeps it: its figures, not its whole result (that is a
    report's result under :meth:`Sweep.point_label`)."""

    JSON = Form("sweep_point", inline=True)

    num_speculative_tokens: int = field(metadata=json(schema={"minimum": 1}))
    concurrency: int = field(metadata=json(schema={"minimum": 1}))
    speedup: float = field(metadata=json(schema={"exclusiveMinimum": 0}))
    speedup_ci: tuple[float, float] = field(
        metadata=json(schema={"$ref": "#/$defs/interval"}, replace=True)
    )
    acceptance_rate: float = field(
        metadata=json(optional=True, schema={"$ref": "#/$defs/number_or_null"}, replace=True)
    )
    phases: PhaseSummary | None = field(metadata=json(optional=True))

    @classmethod
    def of(cls, k: int, concurrency: int, result: Result) -> SweepPoint:
        return cls(
            k, concurrency, result.speedup, result.speedup_ci, result.acceptance_rate,
            result.phases,
        )  # fmt: skip


def _best_k(best: dict[int, tuple[int, Result]]) -> dict[str, int]:
    return {str(c): k for c, (k, _) in best.items()}


@dataclass
class Sweep:
    """Results of ``specdecode.sweep``, one per (k, concurrency) point, the speculative
    config the sweep varied k in (``base_config``) and the sweep's ``label`` (``""``: none).
    Data only: the reports say it in words
    (:func:`~pytest_specdecode.reporting.table.sweep_line`)."""

    JSON = Form(
        "sweep",
        "Sweeps (specdecode.sweep / Bench.sweep): one per test, a point per (k, concurrency), "
        "with the k schedule the sweep gives.",
        required=("points",),
        derived=(
            Derived(
                "best_k", dict[str, int], "points",
                Key(
                    write=_best_k,
                    schema={"additionalProperties": {"type": "integer", "minimum": 1}},
                    doc="concurrency (as a string) -> the k with the highest speedup there",
                ),
            ),
            Derived(
                "crossover", int | None, "best_k",
                Key(doc="the lowest concurrency at which even the best k's interval lies below "
                    "1.0; null when none"),
            ),
            Derived(
                "saved_schedule", KSchedule | None, "crossover",
                Key(
                    name="schedule",
                    doc="Sweep.schedule() with the default tolerance; null for a sweep that "
                    "measured nothing",
                ),
            ),
        ),
    )  # fmt: skip

    nodeid: str = field(metadata=json(schema={"minLength": 1}))
    #: each point's figures in a report (:class:`SweepPoint`)
    points: list[tuple[int, int, Result]] = field(
        default_factory=list,
        metadata=json(
            form=list[SweepPoint], write=lambda points: [
                SweepPoint.of(k, c, r).to_dict() for k, c, r in points
            ],
        ),
    )  # fmt: skip
    base_config: dict[str, Any] = field(default_factory=dict, metadata=json(hidden=True))
    label: str = field(default="", metadata=label_key("sweep", "point", "long k=2 c=8"))

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

    @property
    def saved_schedule(self) -> KSchedule | None:
        """The schedule a report keeps: :meth:`schedule` at the default tolerance (None for
        a sweep that measured nothing)."""
        return self.schedule() if self.points else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (:func:`~.model.encode`)."""
        return encode(self)

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
            if full is None or SweepPoint.of(k, c, full).to_dict() != finite(dict(point)):
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
