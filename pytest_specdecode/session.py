"""Per-session state: settings, the engine pool, and every result produced."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .engine import EnginePool
from .environment import collect
from .marker import TestSpec
from .result import Result
from .settings import GlobalSettings


@dataclass
class SpecDecodeSession:
    """What the plugin carries through a pytest session (stored in ``config.stash``)."""

    settings: GlobalSettings
    progress: Callable[[str], None]
    results: list[Result] = field(default_factory=list)
    specs: dict[str, TestSpec] = field(default_factory=dict)
    spec_errors: dict[str, Exception] = field(default_factory=dict)
    engine_info: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    _pool: EnginePool | None = None

    @property
    def pool(self) -> EnginePool:
        if self._pool is None:
            self._pool = EnginePool(
                self.settings.get("max_engines"),
                timeout=self.settings.get("timeout"),
                progress=self.progress,
            )
        return self._pool

    @property
    def engine_starts(self) -> int:
        return self._pool.starts if self._pool is not None else 0

    def results_for(self, nodeid: str) -> list[Result]:
        return [r for r in self.results if r.nodeid == nodeid]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def report(self) -> dict[str, Any]:
        from . import report

        models = [r.target for r in self.results] + [r.draft for r in self.results if r.draft]
        session = {
            "engine_starts": self.engine_starts,
            "engine_start_seconds": self._pool.start_seconds if self._pool is not None else 0.0,
            "max_engines": self.settings.get("max_engines"),
            "wall_seconds": time.time() - self.started,
        }
        return report.build(
            [r.to_dict() for r in self.results], collect(models, self.engine_info), session
        )
