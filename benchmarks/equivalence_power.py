"""Size and power of the sampling-equivalence test; prints figures (no pass/fail).

    python benchmarks/equivalence_power.py                  # 2,000 repetitions per cell
    python benchmarks/equivalence_power.py --reps 5000 --seed 7 --workers 2

Every repetition calls ``pytest_specdecode.measure.equivalence.compare_distributions`` (the
code ``specdecode.sample_equivalence`` runs) on two simulated engines that implement its
sampler interface, and counts how often the check fails:

- size: both engines draw from the same distributions (a failure is a false alarm);
- power, one prompt: the speculative engine raises one token's probability from 0.50 to 0.55
  (the other tokens scaled down in proportion) at position 3 of prompt 0 only;
- power, all prompts: the same 5-point shift at position 3 of every prompt.

Each prompt and position has its own fixed distribution (from ``--seed``): a dominant token
(probability 0.50 at the shifted position, else drawn from 0.3-0.8), three runner-ups sharing
60% of the rest (in ratios 5:3:2) and a Zipf tail (exponent 1.1) of 200 tokens sharing the other
40%. Positions are drawn independently (the test looks at each position's marginal). Cells are
1-8 prompts at the default 1,600 samples of 4 tokens per engine and 8 prompts at more samples
(``--reps`` each), then the samples per engine that power 0.8 needs (doubling from 1,600, then
bisection to 10%, ``--search-reps`` per step). The search for a shift in one prompt of 8 goes
to about 350,000 samples and takes most of the time (about 45 CPU-minutes in all; the cells
alone, ``--no-needed``, a few minutes).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from multiprocessing import Pool
from multiprocessing.pool import Pool as PoolType
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdecode.measure.equivalence import (  # noqa: E402 (after the path fix)
    DEFAULT_ALPHA,
    DEFAULT_SAMPLES,
    DEFAULT_TOKENS,
    compare_distributions,
)

SHIFT_POSITION = 3  # 1-based; position 1 is the prefill token the test skips
BASE_P = 0.50
SHIFT = 0.05
TAIL = 200
TARGET_POWER = 0.8
MAX_SAMPLES = 409_600

Dist = tuple[list[int], list[float]]  # token ids and cumulative weights


@dataclass(frozen=True)
class Cell:
    prompts: int
    samples: int
    scenario: str  # "same", "one" (shift in prompt 0) or "all" (shift in every prompt)
    tokens: int = DEFAULT_TOKENS


def _distribution(rng: random.Random, top: float) -> list[float]:
    rest = 1.0 - top
    runners = [0.6 * rest * w for w in (0.5, 0.3, 0.2)]
    zipf = [1 / r**1.1 for r in range(1, TAIL + 1)]
    tail = [0.4 * rest * w / sum(zipf) for w in zipf]
    return [top, *runners, *tail]


def _shifted(probs: list[float]) -> list[float]:
    top = probs[0] + SHIFT
    scale = (1.0 - top) / (1.0 - probs[0])
    return [top, *(p * scale for p in probs[1:])]


def _cumulative(probs: list[float]) -> list[float]:
    total, out = 0.0, []
    for p in probs:
        total += p
        out.append(total)
    return out


@cache
def distributions(cell: Cell, seed: int) -> tuple[list[list[Dist]], list[list[Dist]]]:
    """Baseline and speculative distributions per prompt and position, fixed by the seed."""
    rng = random.Random(f"dist:{seed}:{cell.prompts}:{cell.tokens}")
    base: list[list[Dist]] = []
    spec: list[list[Dist]] = []
    for prompt in range(cell.prompts):
        base_row, spec_row = [], []
        for position in range(1, cell.tokens + 1):
            ids = rng.sample(range(32000), 1 + 3 + TAIL)
            top = BASE_P if position == SHIFT_POSITION else rng.uniform(0.3, 0.8)
            probs = _distribution(rng, top)
            shift = position == SHIFT_POSITION and (
                cell.scenario == "all" or (cell.scenario == "one" and prompt == 0)
            )
            base_row.append((ids, _cumulative(probs)))
            spec_row.append((ids, _cumulative(_shifted(probs) if shift else probs)))
        base.append(base_row)
        spec.append(spec_row)
    return base, spec


class SimulatedEngine:
    """The sampler interface of an engine: ``n`` continuations of ``max_tokens`` per prompt."""

    def __init__(self, dists: list[list[Dist]], rng: random.Random) -> None:
        self.dists = dists
        self.rng = rng

    def sample(self, prompts: Sequence[Any], sampling: dict[str, Any]) -> list[list[list[int]]]:
        n, k = sampling["n"], sampling["max_tokens"]
        out = []
        for i, _ in enumerate(prompts):
            columns = [self.rng.choices(ids, cum_weights=cw, k=n) for ids, cw in self.dists[i][:k]]
            out.append([list(sample) for sample in zip(*columns, strict=True)])
        return out


def failures(job: tuple[Cell, int, int, int]) -> int:
    """How many of repetitions ``start``..``stop`` of ``cell`` fail the check."""
    cell, seed, start, stop = job
    base, spec = distributions(cell, seed)
    prompts = [f"prompt {i}" for i in range(cell.prompts)]
    failed = 0
    for rep in range(start, stop):
        rng = random.Random(f"rep:{seed}:{cell}:{rep}")
        check = compare_distributions(
            SimulatedEngine(base, rng), SimulatedEngine(spec, rng), prompts,
            temperature=1.0, samples=cell.samples, tokens=cell.tokens,
        )  # fmt: skip
        failed += not check.passed
    return failed


def rate(pool: PoolType, cell: Cell, seed: int, reps: int, workers: int) -> float:
    chunks = max(1, workers * 4)
    bounds = [reps * i // chunks for i in range(chunks + 1)]
    jobs = [(cell, seed, a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    return sum(pool.map(failures, jobs)) / reps


def wilson(p: float, n: int) -> tuple[float, float]:
    z = 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def show(p: float, n: int) -> str:
    lo, hi = wilson(p, n)
    return f"{p:.3f} ({lo:.3f}-{hi:.3f})"


def needed(pool: PoolType, prompts: int, scenario: str, seed: int, reps: int, workers: int) -> str:
    """Samples per engine at which the shift is caught with power 0.8: doubling from the
    default, then bisection to within 10%."""
    low = high = DEFAULT_SAMPLES
    power = rate(pool, Cell(prompts, high, scenario), seed, reps, workers)
    steps = [f"{high}: {power:.3f}"]
    while power < TARGET_POWER:
        low, high = high, high * 2
        if high > MAX_SAMPLES:
            return f"more than {low} (" + ", ".join(steps) + ")"
        power = rate(pool, Cell(prompts, high, scenario), seed, reps, workers)
        steps.append(f"{high}: {power:.3f}")
    if high == DEFAULT_SAMPLES:
        return "the default reaches it (" + ", ".join(steps) + ")"
    while high - low > high / 10:
        mid = (low + high) // 2 // (100 * prompts) * (100 * prompts)
        power = rate(pool, Cell(prompts, mid, scenario), seed, reps, workers)
        steps.append(f"{mid}: {power:.3f}")
        low, high = (mid, high) if power < TARGET_POWER else (low, mid)
    return f"about {high} ({', '.join(steps)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000, help="repetitions per cell")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2, help="processes")
    parser.add_argument(
        "--search-reps", type=int, default=500, help="repetitions per step of the samples search"
    )
    parser.add_argument("--no-needed", action="store_true", help="skip the samples search")
    args = parser.parse_args()
    started = time.perf_counter()
    print("command: python " + " ".join(sys.argv))
    print(
        f"seed {args.seed}, {args.reps} repetitions per cell ({args.search_reps} per step of the "
        f"samples search), {args.workers} processes"
    )
    print(
        f"test: compare_distributions, {DEFAULT_TOKENS} tokens (positions 2-{DEFAULT_TOKENS} "
        f"tested), alpha {DEFAULT_ALPHA}; samples are per engine, spread over the prompts"
    )
    print(
        f"simulated: per prompt and position a dominant token (p {BASE_P} at the shifted "
        f"position {SHIFT_POSITION}, else 0.3-0.8), 3 runner-ups, a Zipf tail of {TAIL} tokens;"
        f" shift: that token {BASE_P:.2f} -> {BASE_P + SHIFT:.2f}, the rest scaled down"
    )
    print("figures: share of failed checks, with 95% Wilson intervals\n")
    grid = [(1, DEFAULT_SAMPLES), (2, DEFAULT_SAMPLES), (8, DEFAULT_SAMPLES), (8, 3200), (8, 6400)]
    header = (
        f"{'prompts':>7} {'samples':>7} {'per prompt':>10}  {'size (false alarms)':<22}"
        f"{'power, one prompt':<22}{'power, all prompts':<22}"
    )
    with Pool(args.workers) as pool:
        print(header)
        for prompts, samples in grid:
            row = [rate(pool, Cell(prompts, samples, s), args.seed, args.reps, args.workers)
                   for s in ("same", "one", "all")]  # fmt: skip
            print(
                f"{prompts:>7} {samples:>7} {math.ceil(samples / prompts):>10}  "
                + "".join(f"{show(r, args.reps):<22}" for r in row),
                flush=True,
            )
        if not args.no_needed:
            print(
                f"\nsamples per engine for power {TARGET_POWER}, doubling then bisecting to 10%, "
                f"{args.search_reps} repetitions per step (samples: power on the way):"
            )
            for prompts, scenario, what in (
                (1, "one", "1 prompt"),
                (8, "all", "8 prompts, shift in every prompt"),
                (8, "one", "8 prompts, shift in one prompt"),
            ):
                found = needed(pool, prompts, scenario, args.seed, args.search_reps, args.workers)
                print(f"  {what}: {found}", flush=True)
    print(f"\nwall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
