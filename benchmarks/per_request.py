"""What vLLM's per-request speculative-decoding metrics cost in a timed round; prints figures
(no pass/fail).

    python benchmarks/per_request.py [--rounds 40] [--prompts 4] [--max-tokens 64]

Two speculative engines on the built-in tiny models (``pytest_specdecode.tiny``), identical
but for ``per_request_spec_decode_metrics`` (``none`` against ``detailed``, what the plugin
turns on), both resident, one warm-up each; then rounds of the same prompts in the order
A B, B A, A B, ... (A: none, B: detailed), so a linear drift of the machine adds as much to
either side over every two rounds. Each round is timed inside the engine worker, as the
plugin times its rounds. It prints the median and the geometric mean of the per-round time
ratio detailed / none, with the 95% t-interval of the geometric mean (on log ratios), and the
machine's load average before and after; then, as a check that needs no quiet machine, vLLM's
own per-request bookkeeping for one round timed alone (the worker reads the metrics after its
clock stops, so the plugin's own handling is outside the timed round).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdecode.tiny import ENGINE_KWARGS  # noqa: E402 (no torch until a model is built)
from pytest_specdecode.tiny.corpus import prompts  # noqa: E402 (pure Python, no torch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40, help="rounds per engine (>= 30)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per round (one batch)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument(
        "--first", choices=("none", "detailed"), default="none", help="engine started first"
    )
    args = parser.parse_args()

    from pytest_specdecode.engines.config import EngineConfig
    from pytest_specdecode.engines.hardware import cpu_model
    from pytest_specdecode.engines.pool import EnginePool
    from pytest_specdecode.engines.protocol import REQUEST_METRICS_ARG
    from pytest_specdecode.measure.stats import ratio_interval
    from pytest_specdecode.tiny import tiny_models

    models = tiny_models()
    spec = {"method": "draft_model", "model": str(models.draft), "num_speculative_tokens": args.k}
    workload = prompts("structured", args.prompts, seed=1)
    sampling = {"temperature": 0.0, "max_tokens": args.max_tokens, "ignore_eos": True}
    configs = {
        level: EngineConfig.create(
            str(models.target), spec, {**ENGINE_KWARGS, REQUEST_METRICS_ARG: level}
        )
        for level in sorted(("none", "detailed"), key=lambda level: level != args.first)
    }
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; load {os.getloadavg()}")
    pool = EnginePool(2, progress=lambda m: print(f"  {m}", file=sys.stderr))
    try:
        engines = {
            level: pool.acquire(config, keep=list(configs.values()))
            for level, config in configs.items()
        }
        for engine in engines.values():  # warm-up
            engine.generate_round(workload, sampling)
        probe = {level: e.generate_round(workload, sampling) for level, e in engines.items()}
        reported = {
            level: all(q.spec_steps is not None for q in done.requests)
            for level, done in probe.items()
        }
        load_before = os.getloadavg()
        times: dict[str, list[float]] = {"none": [], "detailed": []}
        start = time.perf_counter()
        for i in range(args.rounds):
            order = ("none", "detailed") if i % 2 == 0 else ("detailed", "none")
            for level in order:
                times[level].append(engines[level].generate_round(workload, sampling).elapsed)
        wall = time.perf_counter() - start
        load_after = os.getloadavg()
    finally:
        pool.close()

    ratios = [d / n for d, n in zip(times["detailed"], times["none"], strict=True)]
    geo, (low, high) = ratio_interval(ratios)
    med = statistics.median(ratios)
    print(f"per-request metrics reported: none {reported['none']}, detailed {reported['detailed']}")
    print(
        f"workload: {args.prompts} structured prompts x {args.max_tokens} tokens, draft_model "
        f"k={args.k}; {args.first} engine started first; {args.rounds} rounds per engine in "
        f"A B, B A order ({wall:.0f} s); median "
        f"round none {statistics.median(times['none']):.3f} s, detailed "
        f"{statistics.median(times['detailed']):.3f} s"
    )
    print(
        f"time ratio detailed / none: median {med:.4f} ({(med - 1) * 100:+.2f}%), geometric mean "
        f"{geo:.4f} ({(geo - 1) * 100:+.2f}%), 95% CI {low:.4f}-{high:.4f} "
        f"({(low - 1) * 100:+.2f}% to {(high - 1) * 100:+.2f}%)"
    )
    print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}")
    steps = [q.per_step_drafted or () for q in probe["detailed"].requests]
    cost = bookkeeping_seconds(steps, args.k)
    print(
        f"vLLM's own bookkeeping for one round ({sum(map(len, steps))} verify steps over "
        f"{len(steps)} requests: observe per step, to_dict and msgpack per request), timed "
        f"alone in this process: {cost * 1e6:.0f} us, {cost / statistics.median(times['none']):.4%}"
        " of the median round"
    )


def bookkeeping_seconds(steps: list[tuple[int, ...]], k: int, repeats: int = 200) -> float:
    """The least time, over ``repeats``, of what vLLM does per round with per-request metrics
    on (``detailed``): per request a ``RequestSpecDecodeMetrics``, one ``observe`` per verify
    step, and on finishing ``to_dict`` and the msgpack encoding that carries it from the engine
    core to the front end."""
    from vllm.v1.metrics.stats import RequestSpecDecodeMetrics
    from vllm.v1.serial_utils import MsgpackEncoder

    encoder = MsgpackEncoder()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for drafted in steps:
            metrics = RequestSpecDecodeMetrics.new(k)
            for d in drafted:
                metrics.observe(num_draft_tokens=d, num_accepted=min(d, k), detailed=True)
            metrics.to_dict()
            encoder.encode(metrics)
        best = min(best, time.perf_counter() - start)
    return best


if __name__ == "__main__":
    main()
