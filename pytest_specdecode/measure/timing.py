"""Where a session's wall time goes: engine starts and shutdowns, warm-up, measured rounds,
distribution sampling and load rounds (the rest is "other": pytest, the
reports)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class TimeSpent:
    """Seconds (and engine starts) spent on each kind of work; adds up with ``+``."""

    engine_starts: int = 0
    restarts: int = 0  # starts of an engine the session had started before
    start_seconds: float = 0.0  # waiting for engines to start (starts together counted once)
    stop_seconds: float = 0.0  # shutting engines down (evictions and the session's end)
    warmup_seconds: float = 0.0
    round_seconds: float = 0.0  # the measured paired rounds
    sampling_seconds: float = 0.0  # sample_equivalence
    load_seconds: float = 0.0  # load(): its warm-up and open-loop rounds

    def __add__(self, other: TimeSpent) -> TimeSpent:
        return TimeSpent(**{
            f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)
        })  # fmt: skip

    @property
    def accounted_seconds(self) -> float:
        return (
            self.start_seconds
            + self.stop_seconds
            + self.warmup_seconds
            + self.round_seconds
            + self.sampling_seconds
            + self.load_seconds
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            f.name: round(v, 3) if isinstance(v := getattr(self, f.name), float) else v
            for f in fields(self)
        }

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> TimeSpent:
        """From :meth:`to_dict` (unknown keys ignored, missing ones 0)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
