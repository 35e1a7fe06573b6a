"""Decision quality of the statistical rules at the default settings; prints figures (no
pass/fail).

    python benchmarks/decisions.py                       # all parts, default repetitions
    python benchmarks/decisions.py --reps 2000 --seed 7 regression adaptive drift
    python benchmarks/decisions.py robust --noise t3 stall --sds 0.05 0.10 --reps 5000

Every repetition drives :class:`~pytest_specdecode.Bench` on a simulated engine source
(:class:`SimSource`, built on the test fake's ``SimulatedSource``: the engine Protocols) and
judges what it returns with the plugin's own code (``compare_one``, ``assert_speedup``). A
round's elapsed time comes from a model, nothing sleeps:

- the speculative engine is ``speedup`` times faster than the baseline (times multiplied by
  ``slowdown``, 1/0.9 for a 10% drop of the speedup);
- noise (``--noise``, the ``robust`` part; the other parts are ``gauss``):

  - ``gauss``: each engine's log time has normal noise of sd ``sd / sqrt(2)``, so the
    per-round log ratio has sd ``sd``;
  - ``t3``: the speculative engine's log time has Student t noise with 3 degrees of freedom
    scaled by ``sd / sqrt(3)`` (so its sd is ``sd``), the baseline's none: the per-round log
    ratio is t(3) with sd ``sd`` (heavy tails: 1 round in 70 beyond 3 sd);
  - ``stall``: ``gauss`` plus stalls: each engine round (warm-ups included) takes 3 times its
    time with probability 2.5%, independently, so that about 5% of paired rounds (4.94%) have
    one side stalled, either side alike; ``sd`` is the normal part's (the per-round log ratio's
    sd is then about 0.25);
- every round generated (any engine, warm-up included) adds ``drift`` to the log time of all
  rounds after it (a linear trend per slot);
- each session (each ``Bench``) draws one offset of sd ``tau`` added to the speculative side's
  log time for all its rounds (a between-session shift the rounds of one run cannot see);
- the speculative engine's counters move every round: 4-token drafts whose i-th token is
  accepted with probability ``a**i`` (``a`` = 0.8 plus noise of sd 0.01 per round).

Parts:

1. ``regression``: a saving session (``--specdecode-baseline-trials`` rounds, fixed) stored as
   ``Result.to_dict()``, then a compared session (a new ``Bench`` whose ``reference=`` makes
   it stop when the rule decides, at most ``--specdecode-max-trials`` rounds) judged by
   ``compare_one`` for every default tolerance; a test false-alarms (or catches a drop) when
   any figure regresses. Between-session shifts are either not measured (a plain baseline) or
   measured (the baseline entry carries the ``sessions`` of 5 saving sessions, as repeated
   ``--specdecode-save`` into one file writes them).
2. ``adaptive``: ``trials="auto"`` with a ``min_speedup`` gate at the true speedup, judged by
   ``assert_speedup``: share passed (interval wholly above the gate) and failed (wholly
   below), each against 2.5%; coverage of the reported interval; rounds. With no gate the
   precision rule stops the run; its interval's coverage.
3. ``drift``: 1% per slot, fixed trials in the counterbalanced order (A B, B A, ...): bias of
   the reported speedup and coverage of its interval.
4. ``robust``: the ``regression`` part (plain baseline) under each ``--noise`` at each
   ``--sds``, with ``--baseline-trials`` and ``--max-trials`` (defaults: the plugin's).
5. ``sized``: saving sessions sized by their noise (the defaults) under each ``--noise`` at
   each ``--sds``, and Gaussian sd 0.05 with each between-session ``--taus`` (5 saving
   sessions); ``--compares`` unchanged and dropped compared runs per stored baseline (more
   cut the Monte Carlo error of the shares caught where not flagged, which vary from one
   baseline to the next; the first pair is the one a single compare draws).

Each figure comes with its Monte Carlo standard error (± one se; a share seen 0 times gives
the 95% upper bound 3/n instead).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing import Pool
from multiprocessing.pool import Pool as PoolType
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# ruff: noqa: E402 (imports after the path fix)
from pytest_specdecode.baselines.compare import compare_one, reference_of, speedup_tolerance
from pytest_specdecode.baselines.report import ReportEntry
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.hardware import Device
from pytest_specdecode.engines.protocol import (
    Counters,
    PhaseTimes,
    RequestFigures,
    Round,
    StepProfile,
)
from pytest_specdecode.errors import GateError, InconclusiveError
from pytest_specdecode.measure.assertions import assert_speedup
from pytest_specdecode.measure.bench import Bench
from pytest_specdecode.measure.detectable import (
    DEFAULT_SAVED,
    FIRST_LOOK,
    LOOK_EVERY,
    SavePlan,
    compared_rounds,
    sees,
)
from pytest_specdecode.measure.result import Result
from pytest_specdecode.measure.sequential import Session
from pytest_specdecode.settings import BY_NAME
from pytest_specdecode.tolerances import DEFAULT_TOLERANCES, parse_tolerances
from tests.fakes import SimulatedEngine, SimulatedSource

SPEEDUP = 2.0  # the true speedup of every simulated pair
K = 4  # draft tokens per proposal
ACCEPT = 0.8  # per-position acceptance base: position i is accepted with probability a**i
ACCEPT_SD = 0.01  # round-to-round noise of a
PROMPTS = ["simulated prompt"]
MAX_TOKENS = 64
BASE_SECONDS = 1.0  # a baseline round's time before noise and drift
SPEC = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 3}
TARGET = "org/simulated-target"

BASELINE_TRIALS = DEFAULT_SAVED  # a fixed baseline's rounds (the regression and robust parts)
BASELINE_MAX_TRIALS = int(BY_NAME["baseline_max_trials"].default)
COMPARE_MAX_TRIALS = int(BY_NAME["compare_max_trials"].default)
MAX_TRIALS = int(BY_NAME["max_trials"].default)
TOLERANCES = parse_tolerances(DEFAULT_TOLERANCES)
SPEEDUP_TOLERANCE = next(t for t in TOLERANCES if t.figure == "speedup")
DROP = 0.10  # the regression power is measured against
SAVING_SESSIONS = 5  # saving sessions behind a measured between-session variance
NOISES = ("gauss", "t3", "stall")
STALL_P = 0.025  # chance that one engine round stalls (a paired round: 4.94%)
STALL_FACTOR = 3.0  # a stalled round takes this many times its time


# -- the simulated backend ---------------------------------------------------------------------
@dataclass(frozen=True)
class World:
    """The machine one session runs on."""

    speedup: float = SPEEDUP
    sd: float = 0.05  # per-round sd of the log ratio (each engine's log time: sd / sqrt(2))
    drift: float = 0.0  # log time added per round generated before (any engine)
    tau: float = 0.0  # sd of the session's offset of the speculative side's log time
    slowdown: float = 1.0  # speculative times multiplied by this (1 / 0.9: a 10% drop)
    noise: str = "gauss"  # one of NOISES


def noise(world: World, speculative: bool, rng: random.Random) -> float:
    """One engine round's log-time noise under ``world.noise`` (see the module docstring)."""
    if world.noise == "t3":
        if not speculative:
            return 0.0
        t3 = rng.gauss(0.0, 1.0) / math.sqrt(rng.gammavariate(1.5, 2.0) / 3)
        return t3 * world.sd / math.sqrt(3)
    log = rng.gauss(0.0, world.sd / math.sqrt(2))
    if world.noise == "stall" and rng.random() < STALL_P:
        log += math.log(STALL_FACTOR)
    return log


class SimEngine(SimulatedEngine):
    """One simulated engine (baseline or speculative) of a :class:`SimSource`."""

    source: SimSource

    def generate_round(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any], concurrency: int | None = None
    ) -> Round:
        src, world = self.source, self.source.world
        log_time = world.drift * src.slots + noise(world, self.speculative, src.rng)
        src.slots += 1
        if self.speculative:
            log_time += src.offset - math.log(world.speedup) + math.log(world.slowdown)
        elapsed = BASE_SECONDS * math.exp(log_time)
        tokens = int(sampling["max_tokens"])
        request = RequestFigures(src.token_ids(tokens), "", elapsed / tokens, elapsed / tokens)
        steps = tokens - 1
        if self.speculative:
            done = self._round_counters(tokens * len(prompts))
            self._counters = self._counters + done
            steps = max(1, done.num_drafts // len(prompts))
        return Round(elapsed, (request,) * len(prompts), profile=self._profile(elapsed, steps))

    def _profile(self, elapsed: float, steps: int) -> StepProfile:
        """The round's steps: one prefill step (a tenth of the round), then ``steps`` decode
        steps, 90% forward pass; the n-gram proposer's lookups take 2% of a speculative step."""
        prefill = PhaseTimes(1, 0.1 * elapsed, forward=0.09 * elapsed)
        decode_s = 0.9 * elapsed
        draft = 0.02 * decode_s if self.speculative else 0.0
        decode = PhaseTimes(steps, decode_s, forward=0.9 * decode_s - draft, draft=draft)
        return StepProfile(prefill, decode)

    def _round_counters(self, tokens: int) -> Counters:
        """One round's drafts: position i accepted with probability a**i (unconditional)."""
        a = min(0.99, max(0.01, ACCEPT + self.source.rng.gauss(0.0, ACCEPT_SD)))
        per_step = 1 + sum(a**i for i in range(1, K + 1))
        drafts = max(1, round(tokens / per_step))
        per_position = tuple(round(drafts * a**i) for i in range(1, K + 1))
        return Counters(drafts, drafts * K, sum(per_position), per_position)


class SimSource(SimulatedSource):
    """The engines of one session: the :class:`World`, its session offset and its clock."""

    def __init__(self, world: World, rng: random.Random) -> None:
        super().__init__(Device("cpu", "simulated"), rng)
        self.world = world
        self.offset = rng.gauss(0.0, world.tau) if world.tau else 0.0
        self._ids: dict[int, tuple[int, ...]] = {}

    def start(self, config: EngineConfig) -> SimulatedEngine:
        return SimEngine(config, self)

    def token_ids(self, n: int) -> tuple[int, ...]:
        if n not in self._ids:
            self._ids[n] = tuple(range(n))
        return self._ids[n]


def session(world: World, rng: random.Random, **bench: Any) -> Result:
    """One session: a fresh source (its own offset) and one ``Bench.run``."""
    with Bench(TARGET, SPEC, source=SimSource(world, rng), progress=None, **bench) as b:
        return b.run(PROMPTS, max_tokens=MAX_TOKENS)


# -- the jobs (one repetition each) ----------------------------------------------------------
@dataclass(frozen=True)
class RegressionCell:
    sd: float  # the baseline's per-round log-ratio sd
    new_sd: float  # the compared run's
    tau: float = 0.0
    sessions: bool = False  # True: 5 saving sessions, both baselines judged (plain, measured)
    noise: str = "gauss"
    baseline_trials: int = BASELINE_TRIALS
    max_trials: int = MAX_TRIALS


def compared(
    stored: ReportEntry, world: World, rng: random.Random, max_trials: int = MAX_TRIALS
) -> tuple[bool, int]:
    """A compared session against ``stored``: (any figure regressed, rounds run). It takes
    at most the rounds ``stored`` planned, else ``max_trials``."""
    tolerance = speedup_tolerance(SPEEDUP_TOLERANCE, stored)
    reference = reference_of(stored)
    new = ReportEntry(
        session(world, rng, reference=lambda label: (reference, tolerance), max_trials=max_trials)
    )
    regressed = any(compare_one(stored, new, t).status == "regressed" for t in TOLERANCES)
    return regressed, new.result.trials


def regression_rep(cell: RegressionCell, seed: int, rep: int) -> tuple[Any, ...]:
    """(false alarm, rounds, caught, rounds) per baseline kind of one repetition: the
    unchanged and the dropped run are compared with the same stored baseline."""
    rng = random.Random(f"{seed}:saving:{cell}:{rep}")
    saving = World(sd=cell.sd, tau=cell.tau, noise=cell.noise)
    results = [
        session(saving, rng, trials=cell.baseline_trials)
        for _ in range(SAVING_SESSIONS if cell.sessions else 1)
    ]
    plain = ReportEntry(results[-1])
    baselines = [plain]
    if cell.sessions:
        baselines.append(replace(plain, sessions=tuple(Session.of(r.ratios) for r in results)))
    same = World(sd=cell.new_sd, tau=cell.tau, noise=cell.noise)
    dropped = replace(same, slowdown=1 / (1 - DROP))
    out: list[Any] = []
    for i, stored in enumerate(baselines):
        for j, world in enumerate((same, dropped)):
            rng = random.Random(f"{seed}:compared:{cell}:{rep}:{i}:{j}")
            out += compared(stored, world, rng, cell.max_trials)
    return tuple(out)


@dataclass(frozen=True)
class AdaptiveCell:
    sd: float
    gate: bool  # min_speedup at the true speedup; False: the precision rule alone


def adaptive_rep(cell: AdaptiveCell, seed: int, rep: int) -> tuple[Any, ...]:
    """(passed, failed, covered, rounds) of one adaptive run."""
    rng = random.Random(f"{seed}:adaptive:{cell}:{rep}")
    gates = {"min_speedup": SPEEDUP} if cell.gate else None
    result = session(World(sd=cell.sd), rng, trials="auto", gates=gates)
    passed = failed = False
    if cell.gate:
        try:
            assert_speedup(result, SPEEDUP)
            passed = True
        except GateError:
            failed = True
        except InconclusiveError:
            pass
    low, high = result.speedup_ci
    return passed, failed, low <= SPEEDUP <= high, result.trials


@dataclass(frozen=True)
class DriftCell:
    sd: float
    trials: int
    drift: float = 0.01


def drift_rep(cell: DriftCell, seed: int, rep: int) -> tuple[Any, ...]:
    """(relative error of the speedup, covered) of one fixed-trials run on a drifting machine."""
    rng = random.Random(f"{seed}:drift:{cell}:{rep}")
    result = session(World(sd=cell.sd, drift=cell.drift), rng, trials=cell.trials)
    low, high = result.speedup_ci
    return result.speedup / SPEEDUP - 1, low <= SPEEDUP <= high


@dataclass(frozen=True)
class SizedCell:
    sd: float
    noise: str = "gauss"
    tau: float = 0.0  # > 0: 5 saving sessions into one file, the between-session spread measured
    most: int = BASELINE_MAX_TRIALS
    compare_cap: int = COMPARE_MAX_TRIALS
    # compared runs each way per stored baseline; out of the repr, which keys the cell's random
    # draws, so that the same seed draws the same baselines and first compared pair whatever it is
    compares: int = field(default=1, repr=False)


def sized_rep(cell: SizedCell, seed: int, rep: int) -> tuple[Any, ...]:
    """(flagged, saved rounds, false alarms, rounds, caught, rounds) of one repetition: saving
    sessions sized by their noise (``SavePlan``, as ``RunRecord`` makes it), the stored entry
    as ``RunRecord.sized`` and the save write it, then ``cell.compares`` unchanged and as many
    dropped compared runs against it, each taking at most the rounds the baseline planned
    (false alarms and caught: the share of them; rounds: their mean). ``flagged``: the
    comparison's detectable speedup drop (between-session variance included where measured)
    is above the designed 10% (``sees``, which answers exactly that question on the same
    simulated draws as ``speedup_drop``). The first compared pair draws what it drew before
    there were several."""
    rng = random.Random(f"{seed}:sized:{cell}:{rep}")
    saving = World(sd=cell.sd, tau=cell.tau, noise=cell.noise)
    plan = SavePlan(SPEEDUP_TOLERANCE, cell.most, cell.compare_cap)
    results = [session(saving, rng, plan=plan) for _ in range(SAVING_SESSIONS if cell.tau else 1)]
    last = results[-1]
    n = len(last.ratios)
    planned = compared_rounds(n, cell.compare_cap)
    sessions = tuple(Session.of(r.ratios) for r in results) if cell.tau else None
    stored = ReportEntry(replace(last, compared_rounds=planned), sessions=sessions)
    reference = reference_of(stored)  # the between-session variance, when measured
    tolerance = speedup_tolerance(SPEEDUP_TOLERANCE, stored)
    flagged = not sees(last.ratios, planned, tolerance, reference.session_var, reference.sessions)
    same = World(sd=cell.sd, tau=cell.tau, noise=cell.noise)
    out: list[Any] = [flagged, n]
    for j, world in enumerate((same, replace(same, slowdown=1 / (1 - DROP)))):
        runs = []
        for c in range(cell.compares):
            pair = f"{rep}:{j}" if c == 0 else f"{rep}:{c}:{j}"
            rng = random.Random(f"{seed}:sized-compared:{cell}:{pair}")
            runs.append(compared(stored, world, rng))
        out += [sum(r[0] for r in runs) / len(runs), sum(r[1] for r in runs) / len(runs)]
    return tuple(out)


JOBS: dict[str, Callable[[Any, int, int], tuple[Any, ...]]] = {
    "sized": sized_rep,
    "regression": regression_rep,
    "adaptive": adaptive_rep,
    "drift": drift_rep,
}


def run_chunk(job: tuple[str, Any, int, int, int]) -> list[tuple[Any, ...]]:
    part, cell, seed, start, stop = job
    return [JOBS[part](cell, seed, rep) for rep in range(start, stop)]


# -- figures -------------------------------------------------------------------------------
class Runner:
    """Repetitions of one cell spread over the pool's processes, with progress on stderr."""

    def __init__(self, pool: PoolType, workers: int, seed: int) -> None:
        self.pool, self.workers, self.seed = pool, workers, seed

    def __call__(self, part: str, cell: Any, reps: int) -> list[tuple[Any, ...]]:
        started = time.perf_counter()
        chunks = max(1, min(reps, self.workers * 8))
        bounds = [reps * i // chunks for i in range(chunks + 1)]
        jobs = [
            (part, cell, self.seed, a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a
        ]
        rows = [row for chunk in self.pool.map(run_chunk, jobs) for row in chunk]
        took = time.perf_counter() - started
        print(f"[decisions] {part} {cell}: {reps} reps in {took:.1f} s", file=sys.stderr)
        return rows


def share(flags: Sequence[Any]) -> str:
    """A share in percent ± its Monte Carlo standard error: of flags, or of per-repetition
    shares (several compared runs each; the se is then that of their mean)."""
    n = len(flags)
    p = sum(float(f) for f in flags) / n
    if p == 0:
        return f"0.00% (<{300 / n:.2f}%)"
    if all(f in (0, 1) for f in flags):
        se = math.sqrt(p * (1 - p) / n)
    else:
        se = math.sqrt(sum((float(f) - p) ** 2 for f in flags) / (n - 1) / n)
    return f"{100 * p:.2f}% ±{100 * se:.2f}"


def average(values: Sequence[float], scale: float = 1.0, digits: int = 2, unit: str = "") -> str:
    """A mean ± its standard error."""
    n = len(values)
    m = sum(values) / n
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return f"{scale * m:.{digits}f}{unit} ±{scale * sd / math.sqrt(n):.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)), flush=True)


def regression_part(run: Runner, reps: int, sessions_only: bool = False) -> None:
    print(
        f"\n## regression: saved baseline {BASELINE_TRIALS} rounds, compared run up to "
        f"{MAX_TRIALS} rounds (stops when the rule decides), tolerances {DEFAULT_TOLERANCES}; "
        f"power against a {DROP:.0%} speedup drop (speculative times / {1 - DROP:g})"
    )
    print(
        f"{reps} repetitions per cell; in each, the unchanged and the dropped run are compared "
        "with the same stored baseline; rounds: of the compared run"
    )
    header = ["cell", "false alarms", "rounds mean", "max", "power", "rounds mean", "max"]
    rows = []

    def row(name: str, data: list[tuple[Any, ...]], at: int) -> list[str]:
        alarm, r_same, caught, r_drop = ([d[at + i] for d in data] for i in range(4))
        return [
            name, share(alarm), average(r_same), str(max(r_same)),
            share(caught), average(r_drop), str(max(r_drop)),
        ]  # fmt: skip

    for sd in () if sessions_only else (0.03, 0.05, 0.07, 0.10):
        rows.append(row(f"sd {sd:.2f}", run("regression", RegressionCell(sd, sd), reps), 0))
    for sd in () if sessions_only else (0.05, 0.07):
        cell = RegressionCell(sd, round(1.5 * sd, 4))
        rows.append(
            row(f"sd {sd:.2f}, new run sd {1.5 * sd:.3f}", run("regression", cell, reps), 0)
        )
    for tau in (0.01, 0.02):
        data = run("regression", RegressionCell(0.05, 0.05, tau, sessions=True), reps)
        rows.append(row(f"sd 0.05, tau {tau:.2f} unmeasured", data, 0))
        rows.append(row(f"sd 0.05, tau {tau:.2f} measured ({SAVING_SESSIONS} sessions)", data, 4))
    table(header, rows)


def adaptive_part(run: Runner, reps: int) -> None:
    print(
        f"\n## adaptive: trials='auto', at most {MAX_TRIALS} rounds, true speedup {SPEEDUP:g}x; "
        f"gate min_speedup={SPEEDUP:g} (at the true value) judged by assert_speedup; "
        f"{reps} repetitions per cell"
    )
    header = ["cell", "passed (above)", "failed (below)", "coverage", "rounds mean", "max"]
    rows = []
    for gate in (True, False):
        for sd in (0.05, 0.07):
            data = run("adaptive", AdaptiveCell(sd, gate), reps)
            passed, failed, covered, rounds = (list(c) for c in zip(*data, strict=True))
            name = f"sd {sd:.2f}, " + ("gate at the truth" if gate else "no gate (precision)")
            rows.append([
                name, share(passed) if gate else "-", share(failed) if gate else "-",
                share(covered), average(rounds), str(max(rounds)),
            ])  # fmt: skip
    table(header, rows)


def drift_part(run: Runner, reps: int) -> None:
    print(
        f"\n## drift: log time +1% per slot (any engine, warm-up included), fixed trials, "
        f"rounds A B, B A, ...; true speedup {SPEEDUP:g}x; no noise: 1 repetition (it is "
        f"deterministic), sd 0.05: {reps} repetitions per cell"
    )
    header = ["cell", "trials", "bias of the speedup", "coverage of its 95% interval"]
    rows = []
    for sd in (0.0, 0.05):
        for trials in (5, 6, 20):
            data = run("drift", DriftCell(sd, trials), reps if sd else 1)
            errors, covered = (list(c) for c in zip(*data, strict=True))
            bias = average(errors, 100, 3, "%") if sd else f"{100 * errors[0]:+.3f}%"
            cover = share(covered) if sd else ("covers" if covered[0] else "misses")
            rows.append([f"sd {sd:.2f}", str(trials), bias, cover])
    table(header, rows)


def robust_part(
    run: Runner,
    reps: int,
    noises: Sequence[str],
    sds: Sequence[float],
    baseline_trials: int,
    max_trials: int,
) -> None:
    print(
        f"\n## robust: as regression (plain baseline of {baseline_trials} rounds, compared run "
        f"up to {max_trials} rounds), under heavy-tailed noise: t3 (per-round log ratio t(3) "
        f"with the sd given: scale sd/sqrt(3)), stall (normal sd given, plus each engine "
        f"round x{STALL_FACTOR:g} with probability {STALL_P}); {reps} repetitions per cell"
    )
    header = ["cell", "false alarms", "rounds mean", "max", "power", "rounds mean", "max"]
    rows = []
    for name in noises:
        for sd in sds:
            cell = RegressionCell(sd, sd, noise=name, baseline_trials=baseline_trials,
                                  max_trials=max_trials)  # fmt: skip
            data = run("regression", cell, reps)
            alarm, r_same, caught, r_drop = (list(c) for c in zip(*data, strict=True))
            rows.append([
                f"{name} sd {sd:.2f}", share(alarm), average(r_same), str(max(r_same)),
                share(caught), average(r_drop), str(max(r_drop)),
            ])  # fmt: skip
    table(header, rows)


def sized_part(run: Runner, reps: int, noises: Sequence[str], sds: Sequence[float],
               taus: Sequence[float], compares: int = 1) -> None:  # fmt: skip
    print(
        f"\n## sized: saving sessions sized by their noise (baseline_trials auto: rounds planned "
        f"once from the first {FIRST_LOOK}, in steps of {LOOK_EVERY}, at most "
        f"{BASELINE_MAX_TRIALS}), "
        f"compared runs up to the rounds the baseline planned (at most {COMPARE_MAX_TRIALS}); "
        f"flagged = the baseline's detectable speedup drop is above {DROP:.0%}; caught "
        f"among the runs not flagged; {reps} repetitions per cell, {compares} unchanged and "
        f"{compares} dropped compared run(s) per baseline (shares and rounds: per baseline, "
        f"averaged)"
    )
    header = ["cell", "flagged", "saved rounds", "at the cap", "false alarms", "rounds",
              "caught (not flagged)", "caught (flagged)", "caught (all)", "rounds"]  # fmt: skip
    rows = []
    cells = [SizedCell(sd, name, compares=compares) for name in noises for sd in sds]
    cells += [SizedCell(0.05, "gauss", tau, compares=compares) for tau in taus]
    for cell in cells:
        data = run("sized", cell, reps)
        flagged, saved, alarm, r_same, caught, r_drop = (list(c) for c in zip(*data, strict=True))
        seen = [c for c, f in zip(caught, flagged, strict=True) if not f]
        blind = [c for c, f in zip(caught, flagged, strict=True) if f]
        capped = [n >= cell.most for n in saved]
        name = f"{cell.noise} sd {cell.sd:.2f}" + (f", tau {cell.tau:.2f}" if cell.tau else "")
        rows.append([
            name, share(flagged), average(saved, digits=1), share(capped), share(alarm),
            average(r_same), share(seen) if seen else "-", share(blind) if blind else "-",
            share(caught), average(r_drop),
        ])  # fmt: skip
    table(header, rows)


PARTS = ("sized", "regression", "adaptive", "drift", "robust")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", help=f"any of {', '.join(PARTS)} (default: all)")
    parser.add_argument("--reps", type=int, default=10000, help="repetitions per cell")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2, help="processes")
    parser.add_argument(
        "--noise", nargs="+", choices=NOISES, default=list(NOISES), help="robust part: noise"
    )
    parser.add_argument(
        "--sds", nargs="+", type=float, default=[0.05, 0.10], help="robust part: sd"
    )
    parser.add_argument("--taus", nargs="*", type=float, default=[0.01, 0.02],
                        help="sized part: between-session sds (gauss sd 0.05)")  # fmt: skip
    parser.add_argument("--compares", type=int, default=1,
                        help="sized part: compared runs each way per stored baseline")  # fmt: skip
    parser.add_argument("--sessions-only", action="store_true",
                        help="regression part: only the between-session rows")  # fmt: skip
    parser.add_argument("--baseline-trials", type=int, default=BASELINE_TRIALS,
                        help="robust part: rounds of the saved baseline")  # fmt: skip
    parser.add_argument("--max-trials", type=int, default=MAX_TRIALS,
                        help="robust part: most rounds of a compared run")  # fmt: skip
    args = parser.parse_args()
    parts = args.parts or list(PARTS)
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    started = time.perf_counter()
    print("command: python " + " ".join(sys.argv))
    print(f"seed {args.seed}, {args.reps} repetitions per cell, {args.workers} processes")
    print(
        f"simulated: true speedup {SPEEDUP:g}x, per-round log-ratio sd as given (each "
        f"engine's log time sd/sqrt(2)), {K}-token drafts, acceptance a**i with a={ACCEPT} "
        f"(sd {ACCEPT_SD} per round); figures ± one Monte Carlo standard error"
    )
    with Pool(args.workers) as pool:
        run = Runner(pool, args.workers, args.seed)
        if "sized" in parts:
            sized_part(run, args.reps, args.noise, args.sds, args.taus, args.compares)
        if "regression" in parts:
            regression_part(run, args.reps, args.sessions_only)
        if "adaptive" in parts:
            adaptive_part(run, args.reps)
        if "drift" in parts:
            drift_part(run, args.reps)
        if "robust" in parts:
            robust_part(run, args.reps, args.noise, args.sds, args.baseline_trials, args.max_trials)
    print(f"\nwall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
