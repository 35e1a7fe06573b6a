"""What vLLM's per-request speculative-decoding metrics cost in a timed round; prints figures
(no pass/fail).

    python benchmarks/per_request.py [--rounds 40] [--prompts 4] [--max-tokens 64]
    python benchmarks/per_request.py --same-engine [--rounds 40] ...

On the built-in tiny models (``pytest_specdecode.tiny``), a draft model with k=4, rounds of
the same prompts alternate between per-request metrics ``none`` (A) and ``detailed`` (B, what
the plugin turns on) in the order A B, B A, A B, ..., so a linear drift of the machine adds as
much to either side over every two rounds; one warm-up round each first. Printed: the median
and the geometric mean of the per-round time ratio B / A with the 95% t-interval of the
geometric mean (on log ratios) and a distribution-free 95% interval of the median (robust to
the rounds a busy machine stretches), and the machine's load average before and after.

- By default: two speculative engines through the plugin's pool, identical but for
  ``per_request_spec_decode_metrics``, both resident; each round is timed inside its engine
  worker, as the plugin times its rounds. The ratio also holds whatever separates two engine
  processes (where their threads run, their memory), which an A/A run of two identical
  engines shows.
- ``--same-engine``: one in-process ``vllm.LLM`` (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)
  whose scheduler's metrics level is switched between rounds: the same process, memory and
  threads on both sides, so the ratio is the metrics' cost alone (without the msgpack
  encoding between engine core and front end, which the last line times). With
  ``--cpu-time`` its rounds are timed by the process's CPU seconds (all threads): the work
  done, which other load on a shared machine disturbs less than wall time.

Last, as a check that needs no quiet machine: vLLM's own per-request bookkeeping for one round
timed alone (the worker reads the metrics after its clock stops, so the plugin's handling of
them is outside the timed round).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdecode.tiny import ENGINE_KWARGS  # noqa: E402 (no torch until a model is built)
from pytest_specdecode.tiny.corpus import prompts  # noqa: E402 (pure Python, no torch)

LEVELS = ("none", "detailed")
#: One timed round at a metrics level: (seconds, per-request drafted tokens per verify step,
#: or None where the request reported no metrics).
Generate = Callable[[str], tuple[float, list[tuple[int, ...] | None]]]


def two_engines(target: str, spec: dict[str, Any], run: Callable[[Generate], None]) -> None:
    """Two engine workers through the plugin's pool, one per level."""
    from pytest_specdecode.engines.config import EngineConfig
    from pytest_specdecode.engines.pool import EnginePool
    from pytest_specdecode.engines.protocol import REQUEST_METRICS_ARG

    configs = {
        level: EngineConfig.create(target, spec, {**ENGINE_KWARGS, REQUEST_METRICS_ARG: level})
        for level in LEVELS
    }
    pool = EnginePool(2, progress=lambda m: print(f"  {m}", file=sys.stderr))
    try:
        engines = {
            level: pool.acquire(config, keep=list(configs.values()))
            for level, config in configs.items()
        }

        def generate(level: str) -> tuple[float, list[tuple[int, ...] | None]]:
            done = engines[level].generate_round(WORKLOAD, SAMPLING)
            steps = [
                q.per_step_drafted if q.spec_steps is not None else None for q in done.requests
            ]
            return done.elapsed, steps

        run(generate)
    finally:
        pool.close()


def same_engine(target: str, spec: dict[str, Any], run: Callable[[Generate], None]) -> None:
    """One in-process engine whose scheduler switches its metrics level between rounds."""
    from pytest_specdecode.engines.hardware import find_iomp
    from pytest_specdecode.engines.placement import openmp_preload

    preload = openmp_preload(os.environ.get("LD_PRELOAD", ""), find_iomp())
    if preload is not None:  # the OpenMP runtime the plugin gives its CPU engines: start again
        os.execve(
            sys.executable, [sys.executable, *sys.argv], {**os.environ, "LD_PRELOAD": preload}
        )
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import vllm

    from pytest_specdecode.engines.placement import CPU_KV_CACHE_BYTES
    from pytest_specdecode.engines.protocol import REQUEST_METRICS_ARG

    llm = vllm.LLM(
        target, speculative_config=spec, disable_log_stats=False,
        kv_cache_memory_bytes=CPU_KV_CACHE_BYTES, **{REQUEST_METRICS_ARG: "detailed"},
        **ENGINE_KWARGS,
    )  # fmt: skip
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    params = vllm.SamplingParams(**SAMPLING)

    def generate(level: str) -> tuple[float, list[tuple[int, ...] | None]]:
        scheduler.spec_decode_metrics_level = level  # read per request and per step
        clock = time.process_time if CPU_TIME else time.perf_counter
        start = clock()
        outputs = llm.generate(WORKLOAD, params, use_tqdm=False)
        elapsed = clock() - start
        metrics = [o.outputs[0].spec_decode_metrics for o in outputs]
        return elapsed, [None if m is None else tuple(m.per_step_drafted) for m in metrics]

    run(generate)


def measure(generate: Generate, rounds: int) -> dict[str, Any]:
    """Warm-up, one probe round per level, then ``rounds`` rounds per level A B, B A, ..."""
    for level in LEVELS:
        generate(level)
    probe = {level: generate(level)[1] for level in LEVELS}
    load_before = os.getloadavg()
    times: dict[str, list[float]] = {level: [] for level in LEVELS}
    start = time.perf_counter()
    for i in range(rounds):
        for level in LEVELS if i % 2 == 0 else LEVELS[::-1]:
            times[level].append(generate(level)[0])
    return {
        "times": times,
        "wall": time.perf_counter() - start,
        "reported": {level: all(s is not None for s in steps) for level, steps in probe.items()},
        "steps": [s or () for s in probe["detailed"]],
        "load": (load_before, os.getloadavg()),
    }


def report(found: dict[str, Any], args: argparse.Namespace) -> None:
    from pytest_specdecode.measure.stats import ratio_interval

    times = found["times"]
    ratios = [d / n for d, n in zip(times["detailed"], times["none"], strict=True)]
    geo, (low, high) = ratio_interval(ratios)
    med = statistics.median(ratios)
    reported = found["reported"]
    from pytest_specdecode.engines.hardware import cpu_model

    how = "one in-process engine switched" if args.same_engine else "two engine workers"
    if CPU_TIME:
        how += " (rounds timed by the process's CPU seconds, all threads)"
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores")
    print(f"per-request metrics reported: none {reported['none']}, detailed {reported['detailed']}")
    print(
        f"{how}; {args.prompts} structured prompts x {args.max_tokens} tokens, draft_model "
        f"k={args.k}; {args.rounds} rounds per level in A B, B A order ({found['wall']:.0f} s); "
        f"median round none {statistics.median(times['none']):.3f} s, detailed "
        f"{statistics.median(times['detailed']):.3f} s"
    )
    print(
        f"time ratio detailed / none: median {med:.4f} ({(med - 1) * 100:+.2f}%), geometric mean "
        f"{geo:.4f} ({(geo - 1) * 100:+.2f}%), 95% CI {low:.4f}-{high:.4f} "
        f"({(low - 1) * 100:+.2f}% to {(high - 1) * 100:+.2f}%)"
    )
    low_rank, high_rank = median_ranks(len(ratios))
    ordered = sorted(ratios)
    quartiles = statistics.quantiles(ratios, n=4)
    print(
        f"median's distribution-free 95% CI {ordered[low_rank]:.4f}-{ordered[high_rank]:.4f}; "
        f"quartiles {quartiles[0]:.4f}, {quartiles[2]:.4f}; extremes {ordered[0]:.3f}, "
        f"{ordered[-1]:.3f}; detailed slower in {sum(r > 1 for r in ratios)}/{len(ratios)} rounds"
    )
    before, after = (tuple(round(x, 2) for x in load) for load in found["load"])
    print(f"load average (1, 5, 15 min): before {before}, after {after}")
    steps = found["steps"]
    cost = bookkeeping_seconds(steps, args.k)
    share = cost / statistics.median(times["none"])
    print(
        f"vLLM's own bookkeeping for one round ({sum(map(len, steps))} verify steps over "
        f"{len(steps)} requests: observe per step, to_dict and msgpack per request), timed "
        f"alone: {cost * 1e6:.0f} us, {share:.4%} of the median round"
    )


def median_ranks(n: int) -> tuple[int, int]:
    """0-based ranks of the sorted values bounding a distribution-free 95% interval of the
    median (binomial with p = 1/2, normal approximation)."""
    half = 1.96 * n**0.5 / 2
    return max(0, int(n / 2 - half)), min(n - 1, int(n / 2 + half + 0.999))


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


WORKLOAD: list[str] = []
SAMPLING: dict[str, Any] = {}
CPU_TIME = False  # --same-engine --cpu-time: time rounds by this process's CPU time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40, help="rounds per level (>= 30)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per round (one batch)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--same-engine", action="store_true", help="one engine, level switched")
    parser.add_argument(
        "--cpu-time", action="store_true", help="with --same-engine: CPU seconds, not wall"
    )
    args = parser.parse_args()
    global CPU_TIME
    CPU_TIME = args.cpu_time and args.same_engine

    from pytest_specdecode.tiny import tiny_models

    models = tiny_models()
    spec = {"method": "draft_model", "model": str(models.draft), "num_speculative_tokens": args.k}
    WORKLOAD[:] = prompts("structured", args.prompts, seed=1)
    SAMPLING.update(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    found: dict[str, Any] = {}

    def run(generate: Generate) -> None:
        found.update(measure(generate, args.rounds))

    (same_engine if args.same_engine else two_engines)(str(models.target), spec, run)
    report(found, args)


if __name__ == "__main__":
    main()
