"""How honest is the TPOT gain's interval under load? An A/A pair of engines measured by the
plugin's own load code; prints figures (no pass/fail).

    python benchmarks/load_intervals.py [--rates 2 8] [--repeats 20] [--requests 12]
                                        [--rounds 3] [--max-tokens 32] [--max-seconds 900]

Two engines of the same configuration (the built-in tiny target, no speculation; they differ
only in ``seed``, which greedy decoding never reads) take the baseline and the speculative
role. For each repeat, ``measure.load_rounds.run_load`` sends each rate's seeded schedule
(the repeat's seed) of ``--requests`` requests to both, ``--rounds`` times, in the plugin's
counterbalanced order, and ``measure.load.build_point`` computes each
rate's p50 TPOT gain and its 95% interval, exactly as ``Bench.load`` does. The true gain
is 1: an honest interval excludes 1.0 in about 5% of repeats. Printed per rate: how many
intervals exclude 1.0 (with its 95% Wilson interval), the A/A gains' spread, the median
interval width, and the arrival loop's p99 lateness.

Run it on a quiet machine: every request is wall time.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ROLES = ("baseline", "speculative")


def wilson(hits: int, n: int) -> tuple[float, float]:
    """The 95% Wilson interval of a proportion."""
    if n == 0:
        return 0.0, 1.0
    z = 1.959964
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[2.0, 8.0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--requests", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-seconds", type=float, default=900.0)
    args = parser.parse_args(argv)

    from pytest_specdecode.engines.config import EngineConfig
    from pytest_specdecode.engines.hardware import cpu_model
    from pytest_specdecode.engines.pool import EnginePool
    from pytest_specdecode.measure.load import build_point, round_schedules
    from pytest_specdecode.measure.load_rounds import run_load
    from pytest_specdecode.tiny import ENGINE_KWARGS, tiny_models
    from pytest_specdecode.tiny.corpus import prompts

    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"command: python benchmarks/load_intervals.py {' '.join(sys.argv[1:])}".rstrip())
    target = str(tiny_models().target)
    chosen = prompts("structured", 4, seed=1)
    configs = {
        role: EngineConfig.create(target, None, {**ENGINE_KWARGS, "seed": seed}, role=role)
        for seed, role in enumerate(ROLES)
    }
    sampling = {"temperature": 0.0, "max_tokens": args.max_tokens, "ignore_eos": True, "seed": 0}
    print(
        f"A/A: tiny target, no speculation, {args.requests} requests x {args.max_tokens} tokens "
        f"x {args.rounds} rounds per rate and repeat, Poisson arrivals, up to {args.repeats} "
        "repeats",
        flush=True,
    )
    gains: dict[float, list[tuple[float, float, float, float]]] = {r: [] for r in args.rates}
    pool = EnginePool(2)
    began = time.perf_counter()
    try:
        for repeat in range(args.repeats):
            elapsed = time.perf_counter() - began
            if repeat and elapsed / repeat * (repeat + 1) > args.max_seconds:
                print(f"stopping after {repeat} repeats: --max-seconds {args.max_seconds:g}")
                break
            schedules = round_schedules(
                args.rates, requests=args.requests, seed=repeat, rounds=args.rounds
            )
            raw = run_load(
                pool, configs["baseline"], configs["speculative"], chosen, sampling, schedules,
                rounds=args.rounds,
            )  # fmt: skip
            points = [
                build_point(r.rate, r.baseline, r.speculative, r.counters, {}) for r in raw.rates
            ]
            for point in points:
                low, high = point.tpot_speedup_ci
                late = max(point.baseline.lateness_p99, point.speculative.lateness_p99)
                gains[point.rate].append((point.tpot_speedup, low, high, late))
            line = "; ".join(
                f"{rate:g} req/s: {g[-1][0]:.3f} [{g[-1][1]:.3f}, {g[-1][2]:.3f}]"
                for rate, g in gains.items()
            )
            print(f"repeat {repeat + 1}: A/A gain {line}", flush=True)
    finally:
        pool.close()
    for rate, rows in gains.items():
        n = len(rows)
        if not n:
            continue
        misses = sum(1 for _, low, high, _ in rows if low > 1.0 or high < 1.0)
        lo, hi = wilson(misses, n)
        logs = [math.log(g) for g, _, _, _ in rows]
        widths = [high / low for _, low, high, _ in rows]
        print(
            f"{rate:g} req/s: {misses}/{n} intervals exclude 1.0 ({misses / n:.0%}, 95% CI "
            f"{lo:.0%}-{hi:.0%}; nominal 5%); A/A gain geometric mean "
            f"{math.exp(statistics.fmean(logs)):.3f}, sd of log gain "
            f"{statistics.stdev(logs) if n > 1 else 0.0:.3f}; median interval width "
            f"(high/low) {statistics.median(widths):.3f}; arrival lateness p99 up to "
            f"{max(r[3] for r in rows) * 1000:.1f} ms"
        )
    print(f"wall: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
