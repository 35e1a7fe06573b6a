"""What a run's warm-up buys: measured rounds after a full warm-up round, a short one, or none.

    python benchmarks/warmup.py                        # 6 blocks per variant, 6 rounds each
    python benchmarks/warmup.py --blocks 1 --rounds 2  # a smoke run (no figure to quote)

On the built-in tiny pair (trained target and draft, draft model, k = 4), in the engine mode
the example suites use on it (``--mode``, default in-process), both engines resident. Every
block sends the same structured prompts, each headed by a note naming the block (``note 7:
...``), so vLLM's prefix cache has never seen a block's prompts (as for a test's first
``run()``) while the blocks' workloads stay alike; it warms both engines up one of three
ways, then times ``--rounds`` paired rounds in the plugin's counterbalanced order:

- ``full``: one round of the prompts at the measured length (what every ``run()`` did
  before this benchmark);
- ``short``: one round of the prompts at ``--short-tokens`` new tokens each (the prompts are
  prefilled and cached, and every path, drafting and verification included, runs);
- ``none``: no warm-up.

Variants rotate block by block (full, short, none, full, ...). ``--fresh N`` first restarts
the pair N times and measures the first block after each start, alternating full and short
(what a test's first ``run()`` on freshly started engines sees).

For each variant it prints the warm-up's seconds, the first measured round's time over the
median of the later rounds (per engine: what the warm-up is for), the block's speedup
(geometric mean of its round ratios baseline/speculative) and the sd of its rounds' log
ratios (what sets an interval's width), averaged over its blocks, and the
difference of the blocks' speedups from those of ``full`` (95% t-interval over blocks).
Run it on a quiet machine: every round is wall time.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdecode.tiny import ENGINE_KWARGS  # noqa: E402 (no torch until a model is built)
from pytest_specdecode.tiny.corpus import prompts  # noqa: E402 (pure Python, no torch)

VARIANTS = ("full", "short", "none")


def pair(mode: str, log_dir: str) -> tuple[Any, Any, Any]:
    """A pool holding the tiny baseline and draft-model engines, started together."""
    from pytest_specdecode.engines.config import EngineConfig
    from pytest_specdecode.engines.pool import EnginePool
    from pytest_specdecode.tiny import tiny_models

    models = tiny_models()
    spec = {"method": "draft_model", "model": str(models.draft), "num_speculative_tokens": 4}
    base = EngineConfig.create(str(models.target), None, dict(ENGINE_KWARGS))
    specd = EngineConfig.create(str(models.target), spec, dict(ENGINE_KWARGS))
    pool = EnginePool(2, timeout=600, log_dir=log_dir, mode=mode)
    b = pool.acquire(base, keep=[specd])
    s = pool.acquire(specd, keep=[base])
    print(f"started ({pool.starts} starts, {pool.start_seconds:.1f} s)", flush=True)
    return pool, b, s


def block(
    base: Any, spec: Any, variant: str, workload: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    """One block: a warm-up of ``variant``, then the paired rounds."""
    sampling = {"temperature": 0.0, "max_tokens": args.tokens, "ignore_eos": True}
    began = time.perf_counter()
    if variant != "none":
        warm = dict(sampling)
        if variant == "short":
            warm["max_tokens"] = min(args.short_tokens, args.tokens)
        base.generate_round(workload, warm)
        spec.generate_round(workload, warm)
    warmup = time.perf_counter() - began
    b_times: list[float] = []
    s_times: list[float] = []
    for i in range(args.rounds):
        if i % 2 == 0:
            b_times.append(base.generate_round(workload, sampling).elapsed)
            s_times.append(spec.generate_round(workload, sampling).elapsed)
        else:
            s_times.append(spec.generate_round(workload, sampling).elapsed)
            b_times.append(base.generate_round(workload, sampling).elapsed)
    ratios = [b / s for b, s in zip(b_times, s_times, strict=True)]
    speedup = math.exp(statistics.fmean(math.log(r) for r in ratios))

    def first(times: list[float]) -> float:
        return times[0] / statistics.median(times[1:]) if len(times) > 1 else float("nan")

    logs = [math.log(r) for r in ratios]
    return {
        "variant": variant,
        "warmup": warmup,
        "sd": statistics.stdev(logs) if len(logs) > 1 else float("nan"),
        "first_base": first(b_times),
        "first_spec": first(s_times),
        "speedup": speedup,
    }


def interval(diffs: list[float]) -> str:
    """Mean of ``diffs`` with its 95% t-interval, as text."""
    if len(diffs) < 2:
        return f"{statistics.fmean(diffs):+.2%} (one block: no interval)"
    from pytest_specdecode.measure.stats import t_quantile

    mean = statistics.fmean(diffs)
    half = t_quantile(0.975, len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return f"{mean:+.2%} (95% CI {mean - half:+.2%} to {mean + half:+.2%}, {len(diffs)} blocks)"


def report(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    print(
        f"{'variant':8} {'blocks':>6} {'warm-up s':>9} {'1st/median base':>15} "
        f"{'1st/median spec':>15} {'speedup':>8} {'round sd':>8}"
    )
    by = {v: [r for r in rows if r["variant"] == v] for v in VARIANTS}
    for variant, got in by.items():
        if not got:
            continue
        print(
            f"{variant:8} {len(got):>6} {statistics.fmean(r['warmup'] for r in got):>9.2f} "
            f"{statistics.fmean(r['first_base'] for r in got):>15.3f} "
            f"{statistics.fmean(r['first_spec'] for r in got):>15.3f} "
            f"{statistics.fmean(r['speedup'] for r in got):>7.3f}x "
            f"{statistics.fmean(r['sd'] for r in got):>8.3f}"
        )
    full = [math.log(r["speedup"]) for r in by["full"]]
    for variant in ("short", "none"):
        other = [math.log(r["speedup"]) for r in by[variant]]
        n = min(len(full), len(other))
        if n:
            diffs = [math.exp(o - f) - 1 for o, f in zip(other[:n], full[:n], strict=True)]
            print(f"speedup {variant} / full - 1: {interval(diffs)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=6, help="blocks per variant")
    parser.add_argument("--rounds", type=int, default=6, help="measured rounds per block")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per round")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--short-tokens", type=int, default=8, help="the short warm-up's")
    parser.add_argument("--fresh", type=int, default=4, help="restarts measured (alternating)")
    parser.add_argument("--mode", default="in-process", choices=("in-process", "multiprocess"))
    args = parser.parse_args()
    seeds = iter(range(1, 100000))
    base_prompts = prompts("structured", args.prompts, seed=1)

    def workload(n: int) -> list[str]:
        return [f"note {n}: {p}" for p in base_prompts]

    log_dir = tempfile.mkdtemp(prefix="warmup-bench-")
    fresh: list[dict[str, Any]] = []
    for i in range(args.fresh):
        pool, base, spec = pair(args.mode, log_dir)
        try:
            variant = ("full", "short")[i % 2]
            fresh.append(block(base, spec, variant, workload(next(seeds)), args))
            print(f"fresh {i + 1}: {fresh[-1]}", flush=True)
        finally:
            pool.close()
    rows: list[dict[str, Any]] = []
    pool, base, spec = pair(args.mode, log_dir)
    try:
        block(base, spec, "full", workload(next(seeds)), args)
        for i in range(args.blocks * len(VARIANTS)):
            variant = VARIANTS[i % len(VARIANTS)]
            rows.append(block(base, spec, variant, workload(next(seeds)), args))
            print(f"block {i + 1}: {rows[-1]}", flush=True)
    finally:
        pool.close()
    print(
        f"\ntiny pair, draft model k=4, {args.mode} engines, {args.prompts} structured prompts "
        f"x {args.tokens} tokens, {args.rounds} rounds per block, short warm-up "
        f"{args.short_tokens} tokens"
    )
    if fresh:
        report("first block after a fresh start (full and short alternating):", fresh)
    report("warm engines, prompts new to the prefix cache (one warm-up block first):", rows)


if __name__ == "__main__":
    main()
