"""``RunRecord``: what a run made (every Bench's results, loads, sweeps, rankings and checks),
its comparison with a saved baseline, and the files written from it (JSON report, saved run,
HTML page, exports, updated baseline), with or without pytest::

    record = RunRecord(report="run.json", html="run.html", compare="baseline.json")
    with record.bench(target, speculative_config) as bench:
        bench.run(prompts, max_tokens=64, label="json")
    sys.exit(record.finish())   # 1 when a figure regressed against the baseline

Keywords take the plugin options' names and parsers (``save``, ``compare_fail``,
``update_baseline``, ...). The plugin session is a ``RunRecord`` with pytest's state on top.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from ..baselines import files as report_files
from ..baselines.compare import (
    Entry,
    Matching,
    ResultKey,
    StoredResults,
    Tolerance,
    Verdict,
    check_speedup_amount,
    detectable_drops,
    environment_change_lines,
    environments_differing,
    parse_tolerances,
    reference_of,
    result_key,
    speedup_tolerance,
    too_few_rounds,
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

#: Exit statuses (a script's ``sys.exit(record.finish())`` and ``python -m
#: pytest_specdecode``): nothing regressed; a figure regressed against the baseline; bad input
#: or an output that could not be written; the command crashed.
EXIT_OK, EXIT_REGRESSED, EXIT_BAD_INPUT, EXIT_CRASH = 0, 1, 2, 3

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
    what they make.
    """

    #: Why results may fail to match the baseline (in the "nothing matched" error).
    RENAMED = "The benches or their run labels were renamed since the baseline was saved"

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
        self._compared: set[tuple[str, str]] = set()
        self._environment: dict[str, Any] | None = None
        self.baseline: dict[str, Any] | None = None
        self._open_baseline()

    # -- the baseline ------------------------------------------------------------------------
    def _open_baseline(self) -> None:
        """Check the outputs and read the baseline to compare with: refused now, not after
        the run, when a path cannot be written or the baseline cannot be used."""
        self.tolerances: list[Tolerance] = parse_tolerances(
            self.settings.get("compare_fail"), self.settings.source("compare_fail")
        )
        check_outputs(self.settings)
        path = self.settings.get("compare")
        update = self.settings.get("update_baseline")
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
        self._baseline_environment = stored.environment
        self._stored = StoredResults(stored.results)
        check_speedup_amount(
            self.tolerances,
            stored.results,
            f"{self.settings.source('compare_fail')} (against the baseline {path})",
        )
        few = too_few_rounds(stored.results)
        if few and self.speedup_tolerance is not None and not update:
            raise ConfigError(
                f"{BY_NAME['compare'].option} {path}: the regression rule needs at least "
                f"{MIN_BASELINE_ROUNDS} stored rounds per result (it pools the baseline's "
                f"rounds); these have fewer: {', '.join(few[:5])}"
                f"{' and more' if len(few) > 5 else ''}. Save the baseline again on the "
                f"reference commit: pytest {BY_NAME['save'].option} {path} (a saving run takes "
                f"{BY_NAME['baseline_trials'].option} rounds, default 30)"
            )

    @property
    def speedup_tolerance(self) -> Tolerance | None:
        return next((t for t in self.tolerances if t.figure == "speedup"), None)

    @property
    def saving(self) -> bool:
        """Whether this run's results will serve as a baseline."""
        return bool(self.settings.get("save") or self.settings.get("update_baseline"))

    def trials(self, trials: int | str) -> int | str:
        """The rounds a run takes: a saving run takes at least ``baseline_trials`` (a baseline
        pools its rounds into every later comparison); sized by its noise (``auto``), the
        :meth:`plan` decides and ``trials`` is only a floor."""
        if not self.saving or self.plan() is not None:
            return trials
        least = self.settings.get("baseline_trials")
        least = DEFAULT_SAVED if least == "auto" else int(least)
        return least if trials == "auto" else max(int(trials), least)

    def plan(self) -> SavePlan | None:
        """How a saving run sized by its noise takes its rounds (None: not saving, a fixed
        ``baseline_trials``, or no speedup tolerance to size for)."""
        tolerance = self.speedup_tolerance
        if not self.saving or tolerance is None:
            return None
        if self.settings.get("baseline_trials") != "auto":
            return None
        return SavePlan(
            tolerance,
            int(self.settings.get("baseline_max_trials")),
            self.compare_cap,
            DEFAULT_SAVED,
        )

    @property
    def compare_cap(self) -> int:
        """The most rounds a compared run takes, whatever its baseline planned."""
        return int(self.settings.get("compare_max_trials"))

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
        planned = reference.compared or int(self.settings.get("max_trials"))
        return replace(reference, compared=min(planned, self.compare_cap))

    # -- what the benches make -----------------------------------------------------------------
    def bench(
        self,
        target: str | None = None,
        speculative_config: Mapping[str, Any] | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
        *,
        name: str = "bench",
        trials: int | str | None = None,
        **kwargs: Any,
    ) -> Bench:
        """A :class:`~pytest_specdecode.measure.bench.Bench` whose products this record takes:
        its runs go on until the regression rule decides against the baseline, and take
        ``baseline_trials`` rounds when saving. Keywords are the Bench's."""
        if trials is None:
            trials = int(BY_NAME["trials"].default)
        bench = Bench(
            target, speculative_config, engine_kwargs, name=name, sink=self,
            reference=lambda label: self.reference(name, label), progress=self.progress,
            trials=self.trials(trials), plan=self.plan(), **kwargs,
        )  # fmt: skip
        self.benches.append(bench)
        return bench

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
        """The report's ``session`` part: engine starts and where the wall time went."""
        spent = self.time_spent()
        wall = time.time() - self.started
        other = None if self.remote_time else round(wall - spent.accounted_seconds, 3)
        return {
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

    def _max_engines(self) -> Any:
        return next(
            (b.settings.get("max_engines") for b in self.benches),
            self.settings.get("max_engines"),
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
        the failure messages (a regression, or a result kept from being compared)."""
        if self.baseline is None:
            return []
        fresh = [
            r
            for r in (self.results if nodeid is None else self.results_for(nodeid))
            if r.key not in self._compared
        ]
        self._compared.update(r.key for r in fresh)
        matching = self._stored.match([ReportEntry(r) for r in fresh])
        refused = self._environment_refused(matching)
        kept = Matching([(r, s) for r, s in matching.pairs if result_key(r) not in refused])
        verdicts = verdicts_for(kept, self.tolerances)
        with_detectable(verdicts, kept, self.tolerances, self._compared_limit)
        self.verdicts.extend(verdicts)
        return [
            f"{key}: not compared: its baseline entry was measured in another environment "
            f"({'; '.join(changes)}) and {BY_NAME['strict_environment'].option} is set"
            for key, changes in refused.items()
        ] + ["regression: " + v.describe() for v in verdicts if v.status == "regressed"]

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
        return refused if self.settings.get("strict_environment") else {}

    @property
    def environment_changes(self) -> list[str]:
        """How the compared baseline entries' environments differ from this run's."""
        return environment_change_lines(self.environment_keys)

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

    def nothing_matched(self) -> str | None:
        """Why the comparison compared nothing (no result matched the baseline), or None."""
        from ..reporting.table import printable

        matching = self.matching()
        if matching is None or not matching.nothing_matched:
            return None
        new = printable(result_key(matching.pairs[0][0]))
        stored = printable(result_key(matching.missing[0]))
        return (
            f"no result of this run matched the baseline {self.settings.get('compare')}: e.g. "
            f"this run's '{new}' against the stored '{stored}'. {self.RENAMED}; nothing was "
            "compared"
        )

    # -- the files -------------------------------------------------------------------------------
    def write(self, *, interrupted: bool = False) -> bool:
        """Write every requested file; one that fails is recorded in :attr:`output_errors`
        and does not stop the others. Ctrl-C stops the writing: the file being written keeps
        its previous content (writes are atomic), every file not written is named, and False
        is returned. An interrupted run does not update the baseline."""
        report = with_checklist(self.as_report())
        writers = [(p.name, p.path, p.write) for p in planned(self.settings)]
        if self.settings.get("update_baseline"):
            compare = self.settings.get("compare")
            if interrupted:
                self.output_errors.append(
                    f"baseline {compare} NOT updated: the run was interrupted"
                )
            else:
                writers.append(("baseline", compare, _update_baseline))
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

    def finish(self) -> int:
        """A script's end: compare what was not compared yet, write every requested file, say
        what regressed and what was written, and return the exit status: :data:`EXIT_OK`,
        :data:`EXIT_REGRESSED` when a figure regressed (or a result was kept from being
        compared), :data:`EXIT_BAD_INPUT` when a file could not be written or nothing matched
        the baseline."""
        failures = self.check_regressions()
        if self.produced or self.settings.get("update_baseline"):
            self.write()
        unmatched = self.nothing_matched()
        if unmatched is not None:
            self.output_errors.append(unmatched)
        for change in self.environment_changes:
            self.progress(f"WARNING: the baseline comes from another environment: {change}")
        for failure in failures:
            self.progress(failure)
        for key in self.missing():
            self.progress(f"missing from this run: {key}")
        for name, path in self.written:
            self.progress(f"baseline updated: {path}" if name == "baseline" else f"wrote {path}")
        for error in self.output_errors:
            self.progress(f"ERROR: {error}")
        if self.output_errors:
            return EXIT_BAD_INPUT
        return EXIT_REGRESSED if failures else EXIT_OK


def _update_baseline(path: str, report: Report) -> None:
    data = report.to_dict()
    report_files.update_baseline(path, data["results"], data["environment"], data["session"])
