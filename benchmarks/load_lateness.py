"""How late the worker's open-loop arrival loop submits requests against their schedule
(issue 23): what the harness adds to a load round's latencies; prints figures (no pass/fail).

    python benchmarks/load_lateness.py [--rates 1,4,16] [--requests 24] [--max-tokens 32]
                                       [--skip-engines]

Lateness is ``sent - arrival`` of each request (seconds after the round's start, both read
from the loop's own clock): p50, p99 and max over the requests of each rate, on a Poisson
schedule (``measure.load.arrival_times``, seed 0). Two settings run the same code, the
worker's ``load`` command (:meth:`pytest_specdecode.engines.worker._Engine.load`):

- ``stand-in``: the command in this process on an engine whose steps do no work, each one
  token per request: the loop's own overhead (sleep overshoot, bookkeeping).
- the tiny target without and with draft-model speculation (k = 4), each a real engine
  worker driven through ``Engine.load_round``: a request due while a step runs waits for it
  to end, as on a server, so its lateness adds the rest of that step. The TTFT, TPOT and e2e
  p50 are shown beside it. In the multiprocess engine mode the engine core begins its next
  step while the loop reads the last one's outputs, so a request added then may join only
  the step after: up to one step later than on a server, inside TTFT (timed from the
  arrival), never hidden from it.

Run it on a quiet machine: lateness is wall time.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdecode.engines.protocol import LoadRound  # noqa: E402
from pytest_specdecode.measure.load import arrival_times  # noqa: E402
from pytest_specdecode.measure.stats import percentile  # noqa: E402

Round = Callable[[Sequence[str], dict[str, Any], Sequence[float]], LoadRound]


class _IdleEngine:
    """``llm.llm_engine`` whose steps do no work: one token per running request a step."""

    def __init__(self) -> None:
        self.running: dict[str, int] = {}

    def add_request(self, request_id: str, prompt: Any, params: Any) -> str:
        self.running[request_id] = int(params.max_tokens)
        return request_id

    def has_unfinished_requests(self) -> bool:
        return bool(self.running)

    def step(self) -> list[Any]:
        outputs = []
        for rid in list(self.running):
            self.running[rid] -= 1
            done = self.running[rid] == 0
            if done:
                del self.running[rid]
            token = types.SimpleNamespace(token_ids=[0])
            outputs.append(types.SimpleNamespace(request_id=rid, outputs=[token], finished=done))
        return outputs

    def abort_request(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.running.pop(rid, None)


def stand_in() -> Round:
    from pytest_specdecode.engines.worker import _Engine

    engine = _Engine(types.SimpleNamespace(llm_engine=_IdleEngine()))
    return lambda prompts, sampling, arrivals: LoadRound.of(
        engine.load(prompts, sampling, arrivals)
    )


def ms(values: Sequence[float], q: float) -> str:
    return f"{1000 * percentile(sorted(values), q):7.2f}"


def measure(name: str, load: Round, prompts: list[str], args: argparse.Namespace) -> None:
    sampling = {"temperature": 0.0, "max_tokens": args.max_tokens, "ignore_eos": True}
    load(prompts[:2], sampling, [0.0, 0.0])  # warm-up
    for rate in args.rates:
        arrivals = arrival_times(rate, requests=args.requests)
        done = load(prompts, sampling, arrivals)
        late = [q.sent - q.arrival for q in done.requests]
        line = (
            f"{name:<12} {rate:5g} req/s  lateness ms p50 {ms(late, 50)} p99 {ms(late, 99)} "
            f"max {1000 * max(late):7.2f}"
        )
        if name != "stand-in":
            ttft = [q.ttft for q in done.requests if q.ttft is not None]
            tpot = [q.tpot for q in done.requests if q.tpot is not None]
            e2e = [q.e2e for q in done.requests]
            line += (
                f"  | p50 TTFT {1000 * statistics.median(ttft):6.1f} ms, TPOT "
                f"{1000 * statistics.median(tpot):6.1f} ms, e2e {statistics.median(e2e):5.2f} s"
            )
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default="1,4,16")
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--skip-engines", action="store_true")
    args = parser.parse_args()
    args.rates = [float(r) for r in args.rates.split(",")]
    from pytest_specdecode.engines.hardware import cpu_model
    from pytest_specdecode.tiny.corpus import prompts as corpus_prompts

    print(f"command: python {' '.join(sys.argv)}")
    print(f"date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    prompts = corpus_prompts("structured", args.requests, seed=1)
    print(f"{args.requests} requests a rate (Poisson arrivals, seed 0) x {args.max_tokens} tokens")
    measure("stand-in", stand_in(), prompts, args)
    if not args.skip_engines:
        from pytest_specdecode.engines.config import EngineConfig
        from pytest_specdecode.engines.pool import EnginePool
        from pytest_specdecode.tiny import ENGINE_KWARGS, tiny_models

        models = tiny_models()
        spec = {"method": "draft_model", "model": str(models.draft), "num_speculative_tokens": 4}
        configs = {
            "baseline": EngineConfig.create(str(models.target), None, ENGINE_KWARGS),
            "speculative": EngineConfig.create(str(models.target), spec, ENGINE_KWARGS),
        }
        pool = EnginePool(2, progress=lambda m: print(f"  {m}", file=sys.stderr))
        try:
            for name, config in configs.items():
                engine = pool.acquire(config, keep=list(configs.values()))
                started = time.perf_counter()
                measure(name, engine.load_round, prompts, args)
                print(f"  ({name}: engine mode {engine.info.get('engine_mode')}, "
                      f"{time.perf_counter() - started:.0f} s of rounds)")  # fmt: skip
        finally:
            pool.close()
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
