"""``RunRecord``: what a run made (every Bench's results, loads, sweeps, rankings and checks),
its comparison with a saved baseline, and the files written from it (JSON report, saved run,
HTML page, exports, updated baseline), with or without pytest::

    with RunRecord(report="run.json", html="run.html", compare="baseline.json") as record:
        with record.bench(target, speculative_config) as bench:
            bench.run(prompts, max_tokens=64, label="json")
    sys.exit(record.status)   # 1 when a figure regressed against the baseline

Leaving the ``with`` block finishes the record (:meth:`RunRecord.finish`); an exception
inside it still writes what was measured, then ends the script with :data:`EXIT_CRASH`
(Ctrl-C: the ``KeyboardInterrupt`` goes on, exit status 130).

Keywords take the plugin options' names and parsers (``save``, ``compare_fail``,
``update_baseline``, ...). The plugin session is a ``RunRecord`` with pytest's state on top.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from ..baselines import files as report_files
from ..baselines.compare import (
    Entry,
    Matching,
    ResultKey,
    StoredResults,
    Tolerance,
    Verdict,
    check_baseline_rounds,
    check_speedup_amount,
    check_unique_keys,
    configuration_changes,
    detectable_drops,
    environment_change_lines,
    environments_differing,
    nothing_compared,
    parse_tolerances,
    reference_of,
    result_key,
    speedup_tolerance,
    verdicts_for,
    with_detectable,
)
from ..baselines.environment import collect
from ..baselines.report import Report, ReportEntry
from ..engines.protocol import EngineSource
from ..errors import ConfigError
from ..measure.bench import Bench, Product, Progress
from ..measure.choice import Ranking
from ..measure.detectable import DEFAULT_SAVED, SavePlan, compared_rounds
from ..measure.equivalence import DistributionCheck
from ..measure.kschedule import ScheduleCheck
from ..measure.load import LoadResult
from ..measure.result import Outcome, Result, entry
from ..measure.sequential import Reference
from ..measure.sweep import Sweep
from ..measure.timing import TimeSpent
from ..settings import BY_NAME, MIN_BASELINE_ROUNDS, GlobalSettings, parse_keywords
from .outputs import check_outputs, planned, with_checklist

#: Exit statuses (a script's ``sys.exit(record.status)`` and ``python -m
#: pytest_specdecode``): nothing regressed; a figure regressed against the baseline; bad input
#: (an output that could not be written, a baseline that does not fit the run, nothing
#: measured or nothing compared); the command or script crashed; a script stopped by Ctrl-C
#: (the shell's status for SIGINT).
EXIT_OK, EXIT_REGRESSED, EXIT_BAD_INPUT, EXIT_CRASH = 0, 1, 2, 3
EXIT_INTERRUPTED = 130

#: What a report says when the run measured nothing (its ``session.nothing_measured``).
NOTHING_MEASURED = "nothing was measured: no result, load or check was made"

#: What a run makes besides results, by report key, and the type of each.
PRODUCTS: dict[str, type] = {
    "sweeps": Sweep,
    "rankings": Ranking,
    "distribution_checks": DistributionCheck,
    "loads": LoadResult,
    "schedule_checks": ScheduleCheck,
}
assert tuple(PRODUCTS) == report_files.PRODUCTS

#: The keywords a RunRecord takes (the plugin options of the same names).
RECORD_SETTINGS = (
    "report",
    "save",
    "html",
    "export",
    "compare",
    "compare_fail",
    "update_baseline",
    "strict_environment",
    "allow_config_change",
    "baseline_trials",
    "baseline_max_trials",
    "compare_max_trials",
)


def _stderr(message: str) -> None:
    print(f"[specdecode] {message}", file=sys.stderr, flush=True)


class RunRecord:
    """Every product of a run, its comparison with a saved baseline and its output files.

    ``settings`` (parsed plugin options) or keywords (:data:`RECORD_SETTINGS`, parsed and
    checked as the options are: unwritable paths and an unreadable baseline are refused now,
    before anything runs). Benches made by :meth:`bench` (or given ``sink=record``) hand it
    what they make. As a context manager it finishes when its block ends and keeps what was
    measured when the block raises (:meth:`__exit__`); :attr:`status` is the exit status.
    """

    #: Why results may fail to match the baseline (in the "nothing matched" error).
    RENAMED = "The benches or their run labels were renamed since the baseline was saved"
    #: How a message names the setting that compares across configurations on purpose.
    ALLOW_CONFIG_CHANGE = "RunRecord(allow_config_change=True)"

    def __init__(
        self,
        settings: GlobalSettings | None = None,
        *,
        progress: Progress | None = _stderr,
        **keywords: Any,
    ) -> None:
        if settings is None:
            settings = parse_keywords(keywords, "RunRecord", RECORD_SETTINGS)
        elif keywords:
            raise TypeError("RunRecord: give settings or keywords, not both")
        self.settings = settings
        self.progress: Progress = progress or (lambda _: None)
        self.started = time.time()
        self.results: list[Result] = []
        self.sweeps: list[Sweep] = []
        self.rankings: list[Ranking] = []
        self.distribution_checks: list[DistributionCheck] = []
        self.loads: list[LoadResult] = []
        self.schedule_checks: list[ScheduleCheck] = []
        self.engine_info: dict[str, Any] = {}
        #: how each result was judged, by result key (node id, label)
        self.outcomes: dict[tuple[str, str], Outcome] = {}
        self.verdicts: list[Verdict] = []
        #: each way a compared baseline entry's environment differs from this run's, with the
        #: keys of the results it concerns
        self.environment_keys: dict[str, list[str]] = {}
        #: every Bench that made something (their time spent on warm-up, rounds, ...)
        self.benches: list[Bench] = []
        self._sources: list[EngineSource] = []
        #: the pytest-xdist worker that made each result received from one, by result key
        self.workers: dict[tuple[str, str], str | None] = {}
        #: time spent and engine-start notes of each pytest-xdist worker
        self.remote_time: list[TimeSpent] = []
        self.remote_start_notes: list[str] = []
        #: output files that could not be written, and (what, path) of those written
        self.output_errors: list[str] = []
        self.written: list[tuple[str, str]] = []
        #: what happened to an output besides being written (removed, not updated)
        self.notices: list[str] = []
        #: results kept from being compared (another environment with strict_environment,
        #: another target or method without allow_config_change), with why
        self.not_compared: list[str] = []
        #: each way a compared baseline entry's configuration differs from its result's, with
        #: the keys of the results it concerns
        self.configuration_keys: dict[str, list[str]] = {}
        #: the exit status, once :meth:`finish` (or leaving the ``with`` block) decided it
        self.status: int | None = None
        self._compared: set[tuple[str, str]] = set()
        self._environment: dict[str, Any] | None = None
        self.baseline: dict[str, Any] | None = None
        self._open_baseline()

    # -- the baseline ------------------------------------------------------------------------
    def _open_baseline(self) -> None:
        """Check the outputs and read the baseline to compare with: refused now, not after
        the run, when a path cannot be written or the baseline cannot be used."""
        self.tolerances: list[Tolerance] = parse_tolerances(
            self.settings.compare_fail, self.settings.source("compare_fail")
        )
        check_outputs(self.settings)
        path = self.settings.compare
        update = self.settings.update_baseline
        if path is None:
            if update:
                raise ConfigError(
                    f"{BY_NAME['update_baseline'].option} needs {BY_NAME['compare'].option} "
                    "PATH (the baseline file to update)"
                )
            return
        if not os.path.exists(path) and update:
            return  # created at the end of the run
        if update:  # refused now when it cannot be merged into
            self.baseline = report_files.load_to_merge(path, "baseline file")
        else:
            self.baseline = report_files.load(path, "baseline file")
        assert self.baseline is not None  # (it exists)
        stored = Report.from_dict(self.baseline, f"baseline file {path}")
        check_unique_keys(stored.results, f"{BY_NAME['compare'].option} {path}")
        self._baseline_environment = stored.environment
        self._stored = StoredResults(stored.results)
        check_speedup_amount(
            self.tolerances,
            stored.results,
            f"{self.settings.source('compare_fail')} (against the baseline {path})",
        )
        if not update:  # an update is a saving run: its rounds replace the stored ones
            check_baseline_rounds(
                stored.results, self.tolerances, f"{BY_NAME['compare'].option} {path}", path
            )

    @property
    def speedup_tolerance(self) -> Tolerance | None:
        return next((t for t in self.tolerances if t.figure == "speedup"), None)

    @property
    def saving(self) -> bool:
        """Whether this run's results will serve as a baseline."""
        return bool(self.settings.save or self.settings.update_baseline)

    def trials(self, trials: int | str) -> int | str:
        """The rounds a run takes: a saving run takes at least ``baseline_trials`` (a baseline
        pools its rounds into every later comparison); sized by its noise (``auto``), the
        :meth:`plan` decides and ``trials`` is only a floor."""
        if not self.saving or self.plan() is not None:
            return trials
        least = self.settings.baseline_trials
        least = DEFAULT_SAVED if least == "auto" else int(least)
        return least if trials == "auto" else max(int(trials), least)

    def plan(self) -> SavePlan | None:
        """How a saving run sized by its noise takes its rounds (None: not saving, a fixed
        ``baseline_trials``, or no speedup tolerance to size for)."""
        tolerance = self.speedup_tolerance
        if not self.saving or tolerance is None:
            return None
        if self.settings.baseline_trials != "auto":
            return None
        return SavePlan(
            tolerance,
            self.settings.baseline_max_trials,
            self.compare_cap,
            DEFAULT_SAVED,
        )

    @property
    def compare_cap(self) -> int:
        """The most rounds a compared run takes, whatever its baseline planned."""
        return self.settings.compare_max_trials

    def reference(self, nodeid: str, label: str | None) -> tuple[Reference, float] | None:
        """The stored speedup of a result and its relative tolerance, when comparing with a
        baseline that holds it (the regression rule decides the run's rounds)."""
        tolerance = self.speedup_tolerance
        if self.baseline is None or tolerance is None or self.saving:
            return None
        stored = self._stored.find(ResultKey(nodeid, label or ""))
        if stored is None or len(stored.result.ratios or []) < MIN_BASELINE_ROUNDS:
            return None
        return self._compared_limit(reference_of(stored)), speedup_tolerance(tolerance, stored)

    def _compared_limit(self, reference: Reference) -> Reference:
        """``reference`` with the most rounds a run compared with it takes: what its baseline
        planned (``max_trials`` for a baseline saved before plans), at most the cap."""
        planned = reference.compared or self.settings.max_trials
        return replace(reference, compared=min(planned, self.compare_cap))

    # -- what the benches make -----------------------------------------------------------------
    def bench(
        self,
        target: str | os.PathLike[str] | None = None,
        speculative_config: Mapping[str, Any] | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
        *,
        name: str = "bench",
        trials: int | str | None = None,
        **kwargs: Any,
    ) -> Bench:
        """A :class:`~pytest_specdecode.measure.bench.Bench` whose products this record takes:
        its runs go on until the regression rule decides against the baseline, and take
        ``baseline_trials`` rounds when saving. Keywords are the Bench's (``progress``
        defaults to the record's); ``sink``, ``reference`` and ``plan`` are the record's own.
        Two Benches of one name are refused a key the other holds (:meth:`held`)."""
        for own in ("sink", "reference", "plan"):
            if own in kwargs:
                raise TypeError(
                    f"RunRecord.bench({own}=...): set by the record (its Benches hand it their "
                    "products and compare with its baseline); make a Bench(...) for your own"
                )
        if trials is None:
            trials = int(BY_NAME["trials"].default)
        progress = kwargs.pop("progress", self.progress)
        bench = Bench(
            target, speculative_config, engine_kwargs, name=name, sink=self,
            reference=lambda label: self.reference(name, label), progress=progress,
            trials=self.trials(trials), plan=self.plan(), **kwargs,
        )  # fmt: skip
        self.benches.append(bench)
        return bench

    def held(self, name: str, call: str) -> set[str]:
        """The labels of the results (``call="load"``: loads) held under ``name``: a Bench of
        that name refuses them as it refuses its own (two workloads under one key would be
        saved and compared as one)."""
        made: list[Result] | list[LoadResult] = self.loads if call == "load" else self.results
        return {p.label for p in made if p.nodeid == name}

    def take(self, product: Product, bench: Bench) -> None:
        """A Bench made ``product`` (a result, load, sweep, ranking or check)."""
        if bench not in self.benches:
            self.benches.append(bench)
        source = bench.source
        if all(s is not source for s in self._sources):
            self._sources.append(source)
        if not self.engine_info and bench.engine_info:
            self.engine_info.update(bench.engine_info)
        if isinstance(product, Result):
            self.results.append(self.sized(product))
            return
        for kind, cls in PRODUCTS.items():
            if isinstance(product, cls):
                getattr(self, kind).append(product)
                return
        raise TypeError(f"RunRecord.take: not a product: {type(product).__name__}")

    def sized(self, result: Result) -> Result:
        """``result`` with what it lets a later run see when it is saved as a baseline: the
        compared rounds it plans and each compared figure's detectable drop."""
        if not self.saving or len(result.ratios or []) < MIN_BASELINE_ROUNDS:
            return result
        compared = compared_rounds(len(result.ratios), self.compare_cap)
        return replace(
            result,
            compared_rounds=compared,
            detectable=detectable_drops(result, self.tolerances, compared),
        )

    @property
    def served(self) -> bool:
        """Whether the engines were running servers."""
        return any(b.served for b in self.benches)

    @property
    def reorders(self) -> bool:
        """Whether tests sharing local engines ran together (the plugin's choice)."""
        return False

    def results_for(self, nodeid: str) -> list[Result]:
        return [r for r in self.results if r.nodeid == nodeid]

    def loads_for(self, nodeid: str) -> list[LoadResult]:
        return [r for r in self.loads if r.nodeid == nodeid]

    # -- time -----------------------------------------------------------------------------------
    def own_time(self) -> TimeSpent:
        """Time this process spent: its engines' starts and its benches' measurements."""
        spent = TimeSpent()
        for source in self._sources:
            spent += TimeSpent(
                engine_starts=source.starts,
                restarts=source.restarts,
                start_seconds=source.start_seconds,
                stop_seconds=source.stop_seconds,
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

    def start_notes(self) -> list[str]:
        """How engines started: why some started one after the other."""
        notes = [n for s in self._sources for n in s.sequential_reasons]
        notes = list(dict.fromkeys(notes))
        return notes + [n for n in dict.fromkeys(self.remote_start_notes) if n not in notes]

    # -- the report ------------------------------------------------------------------------------
    def entry(self, result: Result, *, with_outputs: bool = True) -> dict[str, Any]:
        """A result as a report entry, with its outcome (and the pytest-xdist worker that
        made it, when one did)."""
        data = entry(result, self.outcomes.get(result.key), with_outputs=with_outputs)
        if result.key in self.workers:
            data["worker"] = self.workers[result.key]
        return data

    def receive(self, report: Report) -> None:
        """Take what was made elsewhere (a pytest-xdist worker's test), read once into the
        typed objects: its results with their outcomes and worker, its products and
        verdicts."""
        for item in report.results:
            self.results.append(item.result)
            self.outcomes[item.key] = item.outcome
            self.workers[item.key] = item.worker
            self._compared.add(item.key)  # the worker compared it
        for kind in PRODUCTS:
            getattr(self, kind).extend(getattr(report, kind))
        self.verdicts.extend(report.comparisons or ())

    @property
    def produced(self) -> bool:
        """Whether there is anything to report, here or from a pytest-xdist worker."""
        return bool(self.results) or any(getattr(self, kind) for kind in PRODUCTS)

    def environment(self) -> dict[str, Any]:
        """This run's environment (computed once, after the first result)."""
        if self._environment is None:
            models = [r.target for r in self.results] + [r.draft for r in self.results if r.draft]
            self._environment = collect(models, self.engine_info)
        return self._environment

    def report_session(self) -> dict[str, Any]:
        """The report's ``session`` part: engine starts and where the wall time went (and
        ``nothing_measured`` when the run made nothing)."""
        spent = self.time_spent()
        wall = time.time() - self.started
        other = None if self.remote_time else round(wall - spent.accounted_seconds, 3)
        nothing = {} if self.produced else {"nothing_measured": NOTHING_MEASURED}
        return nothing | {
            "started": datetime.fromtimestamp(self.started, UTC).isoformat(timespec="seconds"),
            "engine_starts": spent.engine_starts,
            "engine_start_seconds": round(spent.start_seconds, 3),
            "max_engines": self._max_engines(),
            "wall_seconds": wall,
            "workers": len(set(self.workers.values())) or 1,
            "time": {**spent.to_dict(), "other_seconds": other},
            "engine_mode": self.engine_info.get("engine_mode"),
            "reordered": self.reorders,
            "start_notes": self.start_notes(),
        }

    def _max_engines(self) -> int:
        return next(
            (b.settings.max_engines for b in self.benches),
            self.settings.max_engines,
        )

    def as_report(self) -> Report:
        """The run as the typed report model (what the renderers take): its results with
        their outcomes and workers, its products and, when comparing, every verdict and the
        baseline entries this run did not produce."""
        missing = [Verdict(key, "", "missing") for key in self.missing()]
        return Report(
            results=tuple(
                ReportEntry(
                    r,
                    self.outcomes.get(r.key, Outcome()),
                    remote=r.key in self.workers,
                    worker=self.workers.get(r.key),
                )  # fmt: skip
                for r in self.results
            ),
            environment=self.environment(),
            session=self.report_session(),
            sweeps=tuple(self.sweeps),
            rankings=tuple(self.rankings),
            distribution_checks=tuple(self.distribution_checks),
            loads=tuple(self.loads),
            schedule_checks=tuple(self.schedule_checks),
            comparisons=None if self.baseline is None else (*self.verdicts, *missing),
        )

    def report(self) -> dict[str, Any]:
        """The JSON report (the schema's format): results, products, comparisons, checklist."""
        return with_checklist(self.as_report()).to_dict()

    # -- the comparison --------------------------------------------------------------------------
    def check_regressions(self, nodeid: str | None = None) -> list[str]:
        """Compare results not compared yet (a test's, or all) with the baseline; returns
        the failure messages (a result kept from being compared, also in
        :attr:`not_compared`, or a regression)."""
        if self.baseline is None:
            return []
        fresh = [
            r
            for r in (self.results if nodeid is None else self.results_for(nodeid))
            if r.key not in self._compared
        ]
        self._compared.update(r.key for r in fresh)
        matching = self._stored.match([ReportEntry(r) for r in fresh])
        environment = self._environment_refused(matching)
        configuration = self._configuration_refused(matching)
        refused = [
            f"{key}: not compared: its baseline entry was measured in another environment "
            f"({'; '.join(changes)}) and {BY_NAME['strict_environment'].option} is set"
            for key, changes in environment.items()
        ] + [
            f"{key}: not compared: its baseline entry is of another configuration "
            f"({', '.join(changes)}), whose figures are not this run's to compare with; save a "
            f"baseline of this configuration, or give {self.ALLOW_CONFIG_CHANGE} if the change "
            "is intended"
            for key, changes in configuration.items()
        ]
        self.not_compared.extend(refused)
        out = set(environment) | set(configuration)
        kept = Matching([(r, s) for r, s in matching.pairs if result_key(r) not in out])
        verdicts = verdicts_for(kept, self.tolerances)
        with_detectable(verdicts, kept, self.tolerances, self._compared_limit)
        self.verdicts.extend(verdicts)
        return refused + [
            "regression: " + v.describe() for v in verdicts if v.status == "regressed"
        ]

    def _configuration_refused(self, matching: Matching[Entry]) -> dict[str, list[str]]:
        """Warn when a matched baseline entry is of another configuration than its result
        (:func:`~pytest_specdecode.baselines.compare.configuration_changes`, naming each field
        that differs); returns the keys of the results whose entry has another target or
        method, with those changes, unless ``allow_config_change`` is set."""
        assert self.baseline is not None
        changes = configuration_changes(matching, self._baseline_environment, self.environment())
        for change in changes:
            self.progress(
                f"WARNING: comparing with a baseline entry of another configuration: "
                f"{change.text()}"
            )
            for text in change.changes:
                known = self.configuration_keys.setdefault(text, [])
                if change.key not in known:
                    known.append(change.key)
        if self.settings.allow_config_change:
            return {}
        return {c.key: list(c.incomparable) for c in changes if c.incomparable}

    def _environment_refused(self, matching: Matching[Entry]) -> dict[str, list[str]]:
        """Warn (once per difference) when a matched baseline entry was measured in another
        environment than this run (each entry's own); returns the keys of the results that
        ``strict_environment`` keeps from being compared, with their differences."""
        assert self.baseline is not None
        differing = environments_differing(matching, self._baseline_environment, self.environment())
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
        return refused if self.settings.strict_environment else {}

    @property
    def environment_changes(self) -> list[str]:
        """How the compared baseline entries' environments differ from this run's."""
        return environment_change_lines(self.environment_keys)

    @property
    def configuration_lines(self) -> list[str]:
        """How the compared baseline entries' configurations differ from their results'."""
        return environment_change_lines(self.configuration_keys)

    def matching(self) -> Matching[Entry] | None:
        """Every result against the baseline (None without a baseline)."""
        if self.baseline is None:
            return None
        return self._stored.match([ReportEntry(r) for r in self.results])

    def missing(self) -> list[str]:
        """Baseline entries this run did not produce."""
        matching = self.matching()
        return [] if matching is None else [result_key(r) for r in matching.missing]

    @property
    def regressed(self) -> bool:
        """Whether a figure regressed against the baseline."""
        return any(v.status == "regressed" for v in self.verdicts)

    def nothing_compared(self) -> str | None:
        """Why the comparison compared nothing, or None (:func:`~pytest_specdecode.baselines.
        compare.nothing_compared`: the baseline or this run holds no results, or not one
        matched). An empty baseline being updated is filled, not compared."""
        from ..reporting.table import printable

        matching = self.matching()
        if matching is None or (self.settings.update_baseline and not self._stored.results):
            return None
        why = nothing_compared(
            matching, f"the baseline {self.settings.compare}", "this run", self.RENAMED
        )
        return None if why is None else printable(why)

    # -- the files -------------------------------------------------------------------------------
    def write(self, *, interrupted: bool = False, ended: str = "was interrupted") -> bool:
        """Write every requested file; one that fails is recorded in :attr:`output_errors`
        and does not stop the others. Ctrl-C stops the writing: the file being written keeps
        its previous content (writes are atomic), every file not written is named, and False
        is returned. An interrupted run (how it ``ended``) does not update the baseline.

        A run that measured nothing writes a report (and HTML page) saying so, removes an
        export left from an earlier run, leaves the saved run as it was, and never writes an
        empty baseline: no file it leaves can pass for this run's."""
        writers = [(p.name, p.path, p.write) for p in planned(self.settings)]
        if not self.produced:
            writers = [w for w in writers if self._nothing_to_write(w[0], w[1])]
        if self.settings.update_baseline:
            compare = self.settings.compare
            assert compare is not None  # (update_baseline needs it: refused at the start)
            if interrupted:
                self.output_errors.append(f"baseline {compare} NOT updated: the run {ended}")
            elif not self.results:
                why = "nothing was measured" if not self.produced else "this run made no result"
                self.output_errors.append(f"baseline {compare} NOT updated: {why}")
            else:
                writers.append(("baseline", compare, _update_baseline))
        if not writers:
            return True
        report = with_checklist(self.as_report())
        for index, (name, path, write) in enumerate(writers):
            try:
                write(path, report)
            except KeyboardInterrupt:
                self.output_errors.extend(
                    f"{later} {where} NOT written: interrupted (KeyboardInterrupt)"
                    for later, where, _ in writers[index:]
                )
                return False
            except Exception as exc:  # noqa: BLE001 - every file gets its chance
                self.output_errors.append(f"{name} {path} could not be written: {exc}")
            else:
                self.written.append((name, path))
        return True

    def _nothing_to_write(self, name: str, path: str) -> bool:
        """Whether output ``name`` is written when the run measured nothing: the report and
        the HTML page are (they say so); a saved run is left as it was; an export from an
        earlier run is removed (there is nothing to export, and it must not pass for this
        run's figures)."""
        if name in ("report", "html"):
            return True
        if name == "save":
            self.notices.append(f"saved run {path} NOT updated: {NOTHING_MEASURED}")
        elif os.path.islink(path) or os.path.isfile(path):
            try:
                os.unlink(path)
            except OSError as exc:
                self.output_errors.append(
                    f"{name} {path} is left from an earlier run and could not be removed "
                    f"({exc.strerror or exc}): {NOTHING_MEASURED}"
                )
            else:
                self.notices.append(f"removed {path} ({name}, from an earlier run): "
                                    f"{NOTHING_MEASURED}")  # fmt: skip
        return False

    def finish(self) -> int:
        """A script's end: compare what was not compared yet, write every requested file, say
        what regressed and what was written, and return the exit status (also kept in
        :attr:`status`; a second call returns it and does nothing more): :data:`EXIT_OK`,
        :data:`EXIT_REGRESSED` when a figure regressed, :data:`EXIT_BAD_INPUT` when a file
        could not be written, a result was kept from being compared (another environment with
        ``strict_environment``, another target or method without ``allow_config_change``),
        nothing was compared with the baseline, or nothing was measured."""
        if self.status is not None:
            return self.status
        failures = self.check_regressions()
        self.write()
        unmatched = self.nothing_compared()
        if unmatched is not None:
            self.output_errors.append(unmatched)
        self._say_end(failures)
        if not self.produced:
            self.progress(f"ERROR: {NOTHING_MEASURED}")
        if self.output_errors or self.not_compared or not self.produced:
            self.status = EXIT_BAD_INPUT
        else:
            self.status = EXIT_REGRESSED if self.regressed else EXIT_OK
        return self.status

    def _say_end(self, failures: list[str]) -> None:
        """Say what the comparison found and what happened to each file."""
        for change in self.environment_changes:
            self.progress(f"WARNING: the baseline comes from another environment: {change}")
        for failure in failures:
            self.progress(failure)
        for key in self.missing():
            self.progress(f"missing from this run: {key}")
        for name, path in self.written:
            self.progress(f"baseline updated: {path}" if name == "baseline" else f"wrote {path}")
        for notice in self.notices:
            self.progress(notice)
        for error in self.output_errors:
            self.progress(f"ERROR: {error}")

    # -- a script's with block -------------------------------------------------------------------
    def __enter__(self) -> RunRecord:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Leaving the block finishes the record (:meth:`finish`; its status in
        :attr:`status`). Leaving it by an exception keeps what was measured, as the plugin
        keeps an interrupted run: the report, saved run, HTML page and exports are written
        (the baseline is not updated), and then a ``KeyboardInterrupt`` goes on (exit status
        130, :data:`EXIT_INTERRUPTED`) and any other exception, its traceback printed, ends
        the script with :data:`EXIT_CRASH` (``SystemExit``), so that a crash never reads as a
        pass or a regression."""
        if exc is None:
            self.finish()
            return
        if self.status is not None:  # finished inside the block
            return
        if isinstance(exc, KeyboardInterrupt):
            ended, self.status = "was interrupted (KeyboardInterrupt)", EXIT_INTERRUPTED
        elif isinstance(exc, Exception):
            traceback.print_exception(exc, file=sys.stderr)
            ended, self.status = f"crashed ({type(exc).__name__}: {exc})", EXIT_CRASH
        else:  # SystemExit, GeneratorExit: the script ends early on its own
            ended, self.status = f"ended early ({type(exc).__name__})", EXIT_CRASH
        try:
            failures = self.check_regressions()
        except Exception:  # noqa: BLE001 - the comparison must not cost the files
            failures = []
        self.write(interrupted=True, ended=ended)
        self._say_end(failures)
        self.progress(
            f"ERROR: the script {ended}: what it measured is in the files above; exit status "
            f"{self.status}"
        )
        if self.status == EXIT_CRASH and isinstance(exc, Exception):
            raise SystemExit(EXIT_CRASH) from exc


def _update_baseline(path: str, report: Report) -> None:
    data = report.to_dict()
    report_files.update_baseline(path, data["results"], data["environment"], data["session"])
