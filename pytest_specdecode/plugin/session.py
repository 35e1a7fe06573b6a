"""The plugin's session: a :class:`~pytest_specdecode.run.record.RunRecord` (every product,
the comparison with a saved baseline, the files) with pytest's state on top: the tests' specs
and gates, how each test judged its results, the engine pool and pytest-xdist transport."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..baselines.files import FORMAT_VERSION
from ..baselines.report import Report
from ..engines.protocol import EngineSource
from ..engines.schedule import Need
from ..errors import GateError
from ..measure.result import Outcome, Result, finite
from ..measure.timing import TimeSpent
from ..run.record import PRODUCTS, RunRecord
from ..settings import GlobalSettings, check_served_pair
from .marker import TestSpec


class SpecDecodeSession(RunRecord):
    """What the plugin carries through a pytest session (stored in ``config.stash``)."""

    RENAMED = "The tests were renamed or pytest's rootdir differs from the saving run's"
    ALLOW_CONFIG_CHANGE = "--specdecode-allow-config-change"

    def __init__(
        self,
        settings: GlobalSettings,
        progress: Callable[[str], None],
        source_factory: Callable[[], EngineSource | None] | None = None,
    ) -> None:
        check_served_pair(settings, "--specdecode-baseline-url", "--specdecode-speculative-url")
        super().__init__(settings, progress=progress)
        self.specs: dict[str, TestSpec] = {}
        self.spec_errors: dict[str, Exception] = {}
        #: gate failures of the running tests, by result key (None: the test as a whole)
        self.gate_failures: dict[tuple[str, str] | str, list[str]] = {}
        #: where engines come from when not local vLLM workers or the served pair (a fake)
        self.source_factory = source_factory
        #: each specdecode test's node id and the engine keys it needs, in run order
        self.schedule: list[tuple[str, Need]] = []
        self._pool: EngineSource | None = None

    @property
    def served(self) -> bool:
        return self.settings.served

    @property
    def reorders(self) -> bool:
        """Whether tests sharing local engines run together (and share a pytest-xdist
        worker): not with ``--specdecode-no-reorder``, not against served endpoints."""
        return not self.settings.no_reorder and not self.served

    @property
    def pool(self) -> EngineSource:
        """The engines of the session: a fake from a plugin hook, the served pair the
        settings name, or local vLLM workers."""
        if self._pool is None and self.source_factory is not None:
            self._pool = self.source_factory()
        if self._pool is None:
            from ..measure.bench import make_source

            self._pool = make_source(self.settings, self.progress)
        if all(s is not self._pool for s in self._sources):
            self._sources.append(self._pool)
        return self._pool

    @property
    def local_engines(self) -> bool:
        """Whether the tests start vLLM engines here (not servers, not a fake)."""
        from ..engines.pool import EnginePool

        return isinstance(self.pool, EnginePool)

    def plan_from(self, nodeid: str) -> None:
        """A test starts: tell the pool what it and the tests after it need."""
        ids = [n for n, _ in self.schedule]
        if nodeid in ids:
            self.pool.plan([need for _, need in self.schedule[ids.index(nodeid) :]])

    def gate_failed(self, nodeid: str, error: GateError) -> None:
        """Record a failed gate of a running test (under its result, when it names one)."""
        key = error.key if error.key is not None else nodeid
        self.gate_failures.setdefault(key, []).append(str(error))

    def judge(self, nodeid: str, passed: bool | None) -> list[Result]:
        """A test ended: its results' outcomes. Returns the test's results."""
        results = self.results_for(nodeid)
        whole = self.gate_failures.pop(nodeid, [])
        for result in results:
            mine = self.gate_failures.pop(result.key, [])
            self.outcomes[result.key] = Outcome(passed, tuple(mine + whole))
        return results

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def worker_output(self, nodeid: str | None = None, worker: str | None = None) -> dict[str, Any]:
        """What a pytest-xdist worker sends the controller, in the one format
        :meth:`receive_worker_output` takes. For a test (``nodeid``; sent on its report): its
        results (with their outcome and ``worker``), verdicts, sweeps, rankings, distribution
        checks and the engines' facts, or nothing when it made none. When the worker finishes
        (no ``nodeid``): its time spent and how its engines started."""
        if nodeid is None:
            return {"time": self.own_time().to_dict(), "start_notes": self.start_notes()}
        output: dict[str, Any] = {
            "results": [self.entry(r) | {"worker": worker} for r in self.results_for(nodeid)],
            # the report's entry and every field (status, node id), for the controller
            "comparisons": [
                v.to_dict() | finite(vars(v) | {"detectable": v.to_dict()["detectable"]})
                for v in self.verdicts
                if v.nodeid == nodeid
            ],
            **{
                kind: [x.to_dict() for x in getattr(self, kind) if x.nodeid == nodeid]
                for kind in PRODUCTS
            },
        }
        if not any(output.values()):
            return {}
        return {**output, "engine_info": dict(self.engine_info)}

    def receive_worker_output(self, output: dict[str, Any]) -> None:
        """Take what a pytest-xdist worker sent (:meth:`worker_output`: a test's, or the
        finished worker's), read once into the typed objects."""
        if "time" in output:
            self.remote_time.append(TimeSpent.of(output["time"] or {}))
            self.remote_start_notes.extend(output.get("start_notes") or [])
            return
        made = {k: v for k, v in output.items() if k != "engine_info"}
        self.receive(
            Report.from_dict(
                {"format_version": FORMAT_VERSION, "environment": {}, **made},
                "the output of a pytest-xdist worker",
            )
        )
        if output.get("engine_info") and not self.engine_info:
            self.engine_info.update(output["engine_info"])
