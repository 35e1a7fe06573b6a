"""Error rates of the "prefix cache clearly below" rule (issue 47); prints figures (no
pass/fail).

    python benchmarks/cache_gap.py                      # all cells, default repetitions
    python benchmarks/cache_gap.py --reps 2000 --seed 7 --trials 5 10

Every repetition drives :class:`~pytest_specdecode.Bench` on a simulated engine source
(:class:`SimSource`, built on the test fake's ``SimulatedSource``: the engine Protocols) and
judges what ``Bench.run`` returns with the plugin's own code: a run is **flagged** when the
result carries the ``prefix_cache`` note (set by ``cache_warning``, i.e. ``clearly_below`` on
``prefix_cache_gap_ci``: the gap's whole 95% interval below ``-CACHE_GAP_MARGIN``); the
benchmark checks that ``clearly_below(result.prefix_cache_gap_ci)`` agrees. Nothing sleeps.

Each engine round looks up ``PROMPTS`` prompts of ``PROMPT_TOKENS`` tokens in the prefix cache
(vLLM's ``prefix_cache_queries``) and finds some of them (``prefix_cache_hits``); the round's hit
rate comes from a model (``--models``):

- ``sd <x>``: the side's true hit rate plus normal noise of sd ``x`` per round (clipped to 0-1,
  hits rounded to whole tokens), independently on each side: the per-round paired difference
  has sd ``x * sqrt(2)``;
- ``block``: hits move by whole prompts: each of the round's ``PROMPTS`` prompts is found
  whole (its tokens up to its last full 16-token block) with probability the side's true rate,
  else not at all (per-round sd of a side's hit rate ``sqrt(p (1 - p) / PROMPTS)``, 0.14 at
  0.8), independently on each side and round.

The baseline's true hit rate is ``BASELINE_RATE``; the speculative side's is that plus the true
gap (``--gaps``): 0 measures false alarms (the share of runs flagged), a negative gap the power
(the share flagged; -0.05 is at the margin, where a rule whose interval covers would flag at
most 2.5%). A round's time has log-normal noise (sd 0.05 per engine) around 1 s (baseline) and
0.5 s (speculative); the speculative engine's counters also count drafts (4 tokens, 80%
accepted). ``trials`` fixed rounds per run (``--trials``; the plugin's default first).

Each share comes with its Monte Carlo standard error (± one se; a share seen 0 times gives the
95% upper bound 3/n instead, one seen every time the lower bound 1 - 3/n). A model without
noise (``sd 0``) is deterministic: 1 repetition; its gap of exactly -0.05 is decided by the
rounding of the counts and of floating point (the hit rates are whole tokens over 4,096).
"""

from __future__ import annotations

import argparse
import math
import random
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# ruff: noqa: E402 (imports after the path fix)
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.hardware import Device
from pytest_specdecode.engines.protocol import Counters, RequestFigures, Round
from pytest_specdecode.measure.bench import Bench
from pytest_specdecode.measure.cache import CACHE_GAP_MARGIN, clearly_below
from pytest_specdecode.measure.result import Result
from pytest_specdecode.settings import BY_NAME
from tests.fakes import SimulatedEngine, SimulatedSource

DEFAULT_TRIALS = int(BY_NAME["trials"].default)
TRIALS = (DEFAULT_TRIALS, *(t for t in (3, 5, 10, 20) if t != DEFAULT_TRIALS))
GAPS = (0.0, -0.03, -0.05, -0.10, -0.20, -0.5)
MODELS = ("sd 0", "sd 0.02", "sd 0.05", "sd 0.10", "block")
BASELINE_RATE = 0.8  # the baseline's true hit rate
PROMPTS = 8  # prompts per round
PROMPT_TOKENS = 512  # tokens per prompt
BLOCK = 16  # tokens per KV-cache block: vLLM caches whole blocks only
TIME_SD = 0.05  # each engine round's log-time sd
SPEEDUP = 2.0
MAX_TOKENS = 16
SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
TARGET = "org/simulated-target"


@dataclass(frozen=True)
class Cell:
    model: str  # one of MODELS ("sd <x>" or "block")
    gap: float  # the speculative side's true hit rate minus the baseline's
    trials: int


def side_rate(model: str, rate: float, rng: random.Random) -> tuple[int, int]:
    """One engine round's (queries, hits) under ``model`` for a true hit rate ``rate``."""
    queries = PROMPTS * PROMPT_TOKENS
    if model == "block":
        whole = (PROMPT_TOKENS - 1) // BLOCK * BLOCK  # vLLM recomputes the last token
        found = sum(rng.random() < rate for _ in range(PROMPTS))
        return queries, found * whole
    sd = float(model.split()[1])
    drawn = rate + (rng.gauss(0.0, sd) if sd else 0.0)
    return queries, round(queries * min(1.0, max(0.0, drawn)))


class SimEngine(SimulatedEngine):
    """One simulated engine of a :class:`SimSource`: timed rounds, drafts on the speculative
    side, and prefix-cache lookups drawn by the source's model."""

    source: SimSource

    def generate_round(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any], concurrency: int | None = None
    ) -> Round:
        src = self.source
        log_time = src.rng.gauss(0.0, TIME_SD) - (math.log(SPEEDUP) if self.speculative else 0.0)
        elapsed = math.exp(log_time)
        tokens = int(sampling["max_tokens"])
        request = RequestFigures(tuple(range(tokens)), "", elapsed / tokens, elapsed / tokens)
        rate = BASELINE_RATE + (src.cell.gap if self.speculative else 0.0)
        queries, hits = side_rate(src.cell.model, rate, src.rng)
        looked = Counters(prefix_cache_queries=queries, prefix_cache_hits=hits)
        if self.speculative:
            looked = looked + Counters(100, 400, 320, (80, 80, 80, 80))
        self._counters = self._counters + looked
        return Round(elapsed, (request,) * len(prompts))


class SimSource(SimulatedSource):
    """The engines of one run, drawing from ``cell``'s model."""

    def __init__(self, cell: Cell, rng: random.Random) -> None:
        super().__init__(Device("cpu", "simulated"), rng)
        self.cell = cell

    def start(self, config: EngineConfig) -> SimulatedEngine:
        return SimEngine(config, self)


def run_once(cell: Cell, seed: int, rep: int) -> tuple[bool, Result]:
    """One ``Bench.run`` of ``cell``: (flagged, its result). Flagged: the result carries the
    ``prefix_cache`` note ``Bench`` adds with its warning."""
    rng = random.Random(f"{seed}:{cell}:{rep}")
    source = SimSource(cell, rng)
    with Bench(TARGET, SPEC, source=source, progress=None, trials=cell.trials) as bench:
        result = bench.run(["simulated prompt"] * PROMPTS, max_tokens=MAX_TOKENS)
    flagged = "prefix_cache" in result.notes
    if flagged != clearly_below(result.prefix_cache_gap_ci):
        raise AssertionError(f"the note and clearly_below disagree on {result.prefix_cache_gap_ci}")
    return flagged, result


def share(flags: Sequence[bool]) -> str:
    """A share in percent ± its Monte Carlo standard error (0 seen: the 95% bound 3/n)."""
    n = len(flags)
    p = sum(flags) / n
    if n == 1:
        return "100% (1 run)" if p else "0% (1 run)"
    if p == 0:
        return f"0% (<{300 / n:.2g}%)"
    if p == 1:
        return f"100% (>{100 - 300 / n:.4g}%)"
    return f"{100 * p:.2f}% ±{100 * math.sqrt(p * (1 - p) / n):.2f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)), flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000, help="repetitions per cell")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--models", nargs="+", default=list(MODELS),
                        help="'sd <x>' or 'block' per model")  # fmt: skip
    parser.add_argument("--gaps", nargs="+", type=float, default=list(GAPS))
    parser.add_argument("--trials", nargs="+", type=int, default=list(TRIALS))
    args = parser.parse_args(argv)
    started = time.perf_counter()
    given = sys.argv[1:] if argv is None else list(argv)
    print("command: " + shlex.join(["python", "benchmarks/cache_gap.py", *given]))
    print(
        f"seed {args.seed}, {args.reps} repetitions per cell (sd 0: 1); baseline true hit rate "
        f"{BASELINE_RATE}, {PROMPTS} prompts of {PROMPT_TOKENS} tokens a round; flagged = "
        f"the gap's 95% interval wholly below -{CACHE_GAP_MARGIN} (the result's prefix_cache "
        "note); shares ± one Monte Carlo standard error"
    )
    header = ["model", "trials", *(f"gap {g:+.2f}" for g in args.gaps)]
    rows = []
    for model in args.models:
        for trials in args.trials:
            row = [model, str(trials)]
            for gap in args.gaps:
                cell = Cell(model, gap, trials)
                reps = 1 if model.replace(" ", "") in ("sd0", "sd0.0") else args.reps
                t0 = time.perf_counter()
                flags = [run_once(cell, args.seed, rep)[0] for rep in range(reps)]
                took = time.perf_counter() - t0
                print(f"[cache_gap] {cell}: {reps} reps in {took:.1f} s", file=sys.stderr)
                row.append(share(flags))
            rows.append(row)
    print("\nshare of runs flagged (gap 0: false alarms; below 0: power)")
    table(header, rows)
    print(f"\nwall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
