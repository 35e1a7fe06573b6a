"""Per-session state: settings, the engine pool, every result produced, and the comparison
with a saved baseline."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..baselines import files as report_files
from ..baselines.compare import (
    Matching,
    ResultKey,
    StoredResults,
    Verdict,
    check_speedup_amount,
    comparison_entries,
    environment_change_lines,
    environments_differing,
    parse_tolerances,
    reference_of,
    result_key,
    speedup_tolerance,
    too_few_rounds,
    verdicts_for,
)
from ..baselines.environment import collect
from ..engines.protocol import EngineSource
from ..engines.schedule import Need
from ..errors import ConfigError, GateError
from ..measure.load import LoadResult
from ..measure.result import Outcome, Result, entry
from ..measure.sequential import Reference
from ..measure.timing import TimeSpent
from ..reporting.checklist import Checklist, checklists
from ..settings import BY_NAME, MIN_BASELINE_ROUNDS, GlobalSettings, check_served_pair
from .marker import TestSpec

if TYPE_CHECKING:
    from ..measure.bench import Bench


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
    baseline: dict[str, Any] | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    #: each way a compared baseline entry's environment differs from this run's, with the keys
    #: of the results it concerns
    environment_keys: dict[str, list[str]] = field(default_factory=dict)
    #: results received from pytest-xdist workers, as report entries (controller only)
    remote_results: list[dict[str, Any]] = field(default_factory=list)
    #: sweeps made with ``specdecode.sweep``
    sweeps: list[Any] = field(default_factory=list)
    #: draft rankings made with ``specdecode.choose_draft``
    rankings: list[Any] = field(default_factory=list)
    #: distribution checks made with ``specdecode.sample_equivalence``
    distribution_checks: list[Any] = field(default_factory=list)
    #: load results made with ``specdecode.load``
    loads: list[LoadResult] = field(default_factory=list)
    #: schedule checks made with ``specdecode.check_schedule``
    schedule_checks: list[Any] = field(default_factory=list)
    #: how each test judged its results, by result key (node id, label)
    outcomes: dict[tuple[str, str], Outcome] = field(default_factory=dict)
    #: gate failures of the running tests, by result key (None: the test as a whole)
    gate_failures: dict[tuple[str, str] | str, list[str]] = field(default_factory=dict)
    #: where engines come from when not local vLLM workers or the served pair (a test fake)
    source_factory: Callable[[], EngineSource | None] | None = None
    #: output files that could not be written at the end of the session (shown in the summary)
    output_errors: list[str] = field(default_factory=list)
    #: (what, path) of every file written at the end of the session
    written: list[tuple[str, str]] = field(default_factory=list)
    #: each specdecode test's node id and the engine keys it needs, in run order
    schedule: list[tuple[str, Need]] = field(default_factory=list)
    #: every Bench the tests made (their time spent on warm-up, rounds, ...)
    benches: list[Bench] = field(default_factory=list)
    #: time spent by each pytest-xdist worker, and how its engines started (controller only)
    remote_time: list[TimeSpent] = field(default_factory=list)
    remote_start_notes: list[str] = field(default_factory=list)
    #: sweeps, rankings, distribution checks and loads received from pytest-xdist workers, as
    #: their ``to_dict()``, by report key (:data:`PRODUCTS`; controller only)
    remote_products: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _environment: dict[str, Any] | None = None
    _pool: EngineSource | None = None

    def __post_init__(self) -> None:
        check_served_pair(
            self.settings, "--specdecode-baseline-url", "--specdecode-speculative-url"
        )
        self.tolerances = parse_tolerances(
            self.settings.get("compare_fail"), self.settings.source("compare_fail")
        )
        check_outputs(self.settings)
        path = self.settings.get("compare")
        if path is None:
            if self.settings.get("update_baseline"):
                raise ConfigError(
                    "--specdecode-update-baseline needs --specdecode-compare PATH (the baseline "
                    "file to update)"
                )
            return
        if not os.path.exists(path) and self.settings.get("update_baseline"):
            return  # created at the end of the session
        if self.settings.get("update_baseline"):  # refused now when it cannot be merged into
            self.baseline = report_files.load_to_merge(path, "baseline file")
        else:
            self.baseline = report_files.load(path, "baseline file")
        assert self.baseline is not None  # (it exists)
        self._stored = StoredResults(self.baseline["results"])
        check_speedup_amount(
            self.tolerances,
            self.baseline["results"],
            f"{self.settings.source('compare_fail')} (against the baseline {path})",
        )
        few = too_few_rounds(self.baseline["results"])
        if few and self.speedup_tolerance is not None and not self.settings.get("update_baseline"):
            raise ConfigError(
                f"--specdecode-compare {path}: the regression rule needs at least "
                f"{MIN_BASELINE_ROUNDS} stored rounds per result (it pools the baseline's "
                f"rounds); these have fewer: {', '.join(few[:5])}"
                f"{' and more' if len(few) > 5 else ''}. Save the baseline again on the "
                f"reference commit: pytest --specdecode-save {path} (a saving run takes "
                "--specdecode-baseline-trials rounds, default 30)"
            )

    @property
    def speedup_tolerance(self) -> Any:
        return next((t for t in self.tolerances if t.figure == "speedup"), None)

    @property
    def saving(self) -> bool:
        """Whether this run's results will serve as a baseline."""
        return bool(self.settings.get("save") or self.settings.get("update_baseline"))

    @property
    def served(self) -> bool:
        return self.settings.get("speculative_url") is not None

    @property
    def reorders(self) -> bool:
        """Whether tests sharing local engines run together (and share a pytest-xdist
        worker): not with ``--specdecode-no-reorder``, not against served endpoints."""
        return not self.settings.get("no_reorder") and not self.served

    @property
    def pool(self) -> EngineSource:
        """The engines of the session: a fake from a plugin hook, the served pair the
        settings name, or local vLLM workers."""
        if self._pool is None and self.source_factory is not None:
            self._pool = self.source_factory()
        if self._pool is None:
            from ..measure.bench import make_source

            self._pool = make_source(self.settings, self.progress)
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

    def own_time(self) -> TimeSpent:
        """Time this process spent: its pool's engine starts and its tests' measurements."""
        spent = TimeSpent()
        if self._pool is not None:
            spent = TimeSpent(
                engine_starts=self._pool.starts,
                restarts=self._pool.restarts,
                start_seconds=self._pool.start_seconds,
                stop_seconds=self._pool.stop_seconds,
            )
        for bench in self.benches:
            spent += bench.time
        return spent

    def time_spent(self) -> TimeSpent:
        """Time spent by this process and every pytest-xdist worker."""
        total = self.own_time()
        for remote in self.remote_time:
            total += remote
        return total

    def results_for(self, nodeid: str) -> list[Result]:
        return [r for r in self.results if r.nodeid == nodeid]

    def loads_for(self, nodeid: str) -> list[LoadResult]:
        return [r for r in self.loads if r.nodeid == nodeid]

    def add(self, result: Result, engine_info: dict[str, Any]) -> None:
        """Take a result a test made (and its engines' facts, first come)."""
        self.results.append(result)
        if not self.engine_info:
            self.engine_info.update(engine_info)

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

    def entry(self, result: Result, *, with_outputs: bool = True) -> dict[str, Any]:
        """A local result as a report entry, with its test's outcome."""
        return entry(result, self.outcomes.get(result.key), with_outputs=with_outputs)

    def result_dicts(self, *, with_outputs: bool = True) -> list[dict[str, Any]]:
        """Every result of the session as report entries: local ones, then those from
        pytest-xdist workers."""
        local = [self.entry(r, with_outputs=with_outputs) for r in self.results]
        remote = self.remote_results
        if not with_outputs:
            remote = [_without_outputs(r) for r in remote]
        return local + remote

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def environment(self) -> dict[str, Any]:
        """This run's environment (computed once, after the first result)."""
        if self._environment is None:
            results = self.result_dicts(with_outputs=False)
            models = [r["target"] for r in results] + [r["draft"] for r in results if r["draft"]]
            self._environment = collect(models, self.engine_info)
        return self._environment

    def check_regressions(self, nodeid: str) -> list[str]:
        """Compare this test's results with the baseline; returns failure messages."""
        if self.baseline is None:
            return []
        new = [r.to_dict(with_outputs=False) for r in self.results_for(nodeid)]
        matching = self._stored.match(new)
        refused = self._environment_refused(matching)
        verdicts = verdicts_for(
            Matching([(r, s) for r, s in matching.pairs if result_key(r) not in refused]),
            self.tolerances,
        )
        self.verdicts.extend(verdicts)
        return [
            f"{key}: not compared: its baseline entry was measured in another environment "
            f"({'; '.join(changes)}) and --specdecode-strict-environment is set"
            for key, changes in refused.items()
        ] + ["regression: " + v.describe() for v in verdicts if v.status == "regressed"]

    def _environment_refused(self, matching: Matching) -> dict[str, list[str]]:
        """Warn (once per difference) when a matched baseline entry was measured in another
        environment than this run (each entry's own, ``own_environment``); returns the keys of
        the results that --specdecode-strict-environment keeps from being compared, with their
        differences."""
        assert self.baseline is not None
        differing = environments_differing(
            matching, self.baseline.get("environment"), self.environment()
        )
        refused: dict[str, list[str]] = {}
        for change, keys in differing.items():
            if change not in self.environment_keys:
                self.progress(
                    "WARNING: comparing with a baseline entry from another environment: "
                    f"{change} ({keys[0]})"
                )
            known = self.environment_keys.setdefault(change, [])
            known.extend(k for k in keys if k not in known)
            for key in keys:
                refused.setdefault(key, []).append(change)
        return refused if self.settings.get("strict_environment") else {}

    @property
    def environment_changes(self) -> list[str]:
        """How the compared baseline entries' environments differ from this run's, each with
        the results it concerns."""
        return environment_change_lines(self.environment_keys)

    def reference(self, nodeid: str, label: str | None) -> tuple[Reference, float] | None:
        """The stored speedup of a result and its relative tolerance, when comparing with a
        baseline that holds it (the regression rule decides the run's rounds)."""
        tolerance = self.speedup_tolerance
        if self.baseline is None or tolerance is None:
            return None
        stored = self._stored.find(ResultKey(nodeid, label or ""))
        if stored is None or len(stored.get("ratios") or []) < MIN_BASELINE_ROUNDS:
            return None
        return reference_of(stored), speedup_tolerance(tolerance, stored)

    def matching(self) -> Matching | None:
        """Every result of the session against the baseline (None without a baseline)."""
        if self.baseline is None:
            return None
        return self._stored.match(self.result_dicts(with_outputs=False))

    def missing(self) -> list[str]:
        """Baseline entries this run did not produce."""
        matching = self.matching()
        return [] if matching is None else [result_key(r) for r in matching.missing]

    def comparisons(self) -> list[dict[str, Any]]:
        """The report's ``comparisons``: every verdict of the session (workers' included),
        then one "missing" entry per baseline result this run did not produce."""
        missing = [Verdict(key, "", "missing") for key in self.missing()]
        return comparison_entries([*self.verdicts, *missing])

    def report_session(self) -> dict[str, Any]:
        """The report's ``session`` part: engine starts and where the wall time went."""
        spent = self.time_spent()
        wall = time.time() - self.started
        other = None if self.remote_time else round(wall - spent.accounted_seconds, 3)
        return {
            "started": datetime.fromtimestamp(self.started, UTC).isoformat(timespec="seconds"),
            "engine_starts": spent.engine_starts,
            "engine_start_seconds": round(spent.start_seconds, 3),
            "max_engines": self.settings.get("max_engines"),
            "wall_seconds": wall,
            "workers": len({r.get("worker") for r in self.remote_results}) or 1,
            "time": {**spent.to_dict(), "other_seconds": other},
            "engine_mode": self.engine_info.get("engine_mode"),
            "reordered": self.reorders,
            "start_notes": self.start_notes(),
        }

    def report(self) -> dict[str, Any]:
        session = self.report_session()
        data = report_files.build(self.result_dicts(), self.environment(), session)
        for kind in PRODUCTS:
            if self.products(kind):
                data[kind] = self.products(kind)
        if self.baseline is not None:
            data["comparisons"] = self.comparisons()
        return with_checklist(data)

    def start_notes(self) -> list[str]:
        """How engines started: why some started one after the other."""
        notes = list(self._pool.sequential_reasons if self._pool is not None else [])
        return notes + [n for n in dict.fromkeys(self.remote_start_notes) if n not in notes]

    def worker_output(self, nodeid: str | None = None, worker: str | None = None) -> dict[str, Any]:
        """What a pytest-xdist worker sends the controller, in the one format
        :meth:`receive_worker_output` takes. For a test (``nodeid``; sent on its report): its
        results (with their outcome and ``worker``), verdicts, sweeps, rankings, distribution
        checks and the engines' facts, or nothing when it made none. When the worker finishes
        (no ``nodeid``): its time spent and how its engines started."""
        if nodeid is None:
            return {"time": self.own_time().to_dict(), "start_notes": self.start_notes()}
        output: dict[str, Any] = {
            "results": [{**self.entry(r), "worker": worker} for r in self.results_for(nodeid)],
            "verdicts": [vars(v) for v in self.verdicts if v.nodeid == nodeid],
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
        finished worker's)."""
        self.remote_results.extend(output.get("results") or [])
        self.verdicts.extend(Verdict(**v) for v in output.get("verdicts") or [])
        for kind in PRODUCTS:
            self.remote_products.setdefault(kind, []).extend(output.get(kind) or [])
        if output.get("engine_info") and not self.engine_info:
            self.engine_info.update(output["engine_info"])
        if "time" in output:
            self.remote_time.append(TimeSpent.of(output["time"] or {}))
        self.remote_start_notes.extend(output.get("start_notes") or [])

    def products(self, kind: str) -> list[dict[str, Any]]:
        """Every sweep, ranking or distribution check of the session (``kind``: its report
        key, one of :data:`PRODUCTS`) as dicts: local ones, then those from pytest-xdist
        workers."""
        local = [x.to_dict() for x in getattr(self, kind)]
        return local + self.remote_products.get(kind, [])

    @property
    def produced(self) -> bool:
        """Whether the session has anything to report: a result or another product, here or
        from a pytest-xdist worker."""
        return bool(self.results or self.remote_results) or any(map(self.products, PRODUCTS))

    def checklists(self) -> list[Checklist]:
        """The "worth it?" checklist of every target and proposer measured so far."""
        return checklists({
            "results": self.result_dicts(with_outputs=False),
            "sweeps": self.products("sweeps"),
            "rankings": self.products("rankings"),
            "loads": self.products("loads"),
            "schedule_checks": self.products("schedule_checks"),
            "environment": {"served": True} if self.served else {},
        })  # fmt: skip


#: What tests make besides results, by report key (each a ``SpecDecodeSession`` list of
#: objects with ``nodeid`` and ``to_dict()``).
PRODUCTS = report_files.PRODUCTS


def with_checklist(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a report) with its ``checklist`` made from its results and loads."""
    data = {k: v for k, v in data.items() if k != "checklist"}
    if data["results"] or data.get("loads"):
        data["checklist"] = [c.to_dict() for c in checklists(data)]
    return data


def _without_outputs(result: dict[str, Any]) -> dict[str, Any]:
    trimmed = dict(result)
    for side in ("baseline", "speculative"):
        if isinstance(trimmed.get(side), dict):
            trimmed[side] = {
                k: v for k, v in trimmed[side].items() if k not in ("token_ids", "texts")
            }
    return trimmed


#: Output settings: (setting, what the file is).
OUTPUTS = (("report", "report"), ("save", "saved run"), ("html", "HTML report"))


def check_outputs(settings: GlobalSettings) -> None:
    """Before anything runs: every output path can be written, no two outputs share a path,
    none overwrites the baseline being compared, and the HTML report's matplotlib is there."""
    from ..baselines.outputs import check_writable, same_file

    paths = [(name, settings.get(name)) for name, _ in OUTPUTS if settings.get(name)]
    for name, path in paths:
        check_writable(path, f"{BY_NAME[name].option} (from {settings.source(name)})")
    compare = settings.get("compare")
    if compare and settings.get("update_baseline"):
        check_writable(compare, "--specdecode-compare (updated by --specdecode-update-baseline)")
    if settings.get("save"):  # merged into at the end: refuse now a file that cannot be
        source = settings.source("save")
        what = BY_NAME["save"].option + (
            "" if source == BY_NAME["save"].option else f" (from {source})"
        )
        report_files.load_to_merge(settings.get("save"), what)
    for i, (name, path) in enumerate(paths):
        for other, other_path in paths[i + 1 :]:
            if same_file(path, other_path):
                raise ConfigError(
                    f"{BY_NAME[name].option} and {BY_NAME[other].option} name the same file "
                    f"{path!r}; give each output its own path"
                )
        if compare and same_file(path, compare):
            raise ConfigError(
                f"{BY_NAME[name].option} {path!r} is the baseline given to --specdecode-compare: "
                "writing it would replace the stored figures with this run's. Save elsewhere, "
                "or refresh the baseline on purpose with --specdecode-update-baseline"
            )
    if settings.get("html"):
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise ConfigError(
                f"--specdecode-html (from {settings.source('html')}) needs matplotlib for its "
                "charts: pip install 'pytest-specdecode[html]' (or matplotlib)"
            )
