"""Does a load round stall when it follows the round before at once? Two real vLLM servers (the
tiny pair), rounds alternating between them as ``load()`` runs them; prints figures (no
pass/fail).

    .tox/py/bin/python benchmarks/round_quiet.py [--repeats 10] [--requests 8] [--rate 1]
                                                 [--quiet 0 2] [--cold] [--out FILE]

Two ``vllm serve`` processes on loopback, as ``benchmarks/peer_serve.py`` starts them: the
built-in tiny target alone, and the target with the tiny draft (k=4). Each round sends
``--requests`` requests (held-out structured prompts of the tiny corpus, 64 tokens, greedy,
EOS ignored) through ``ServedEngine.load_round``, the code ``load()`` runs, either on an
arrival schedule of ``--rate`` req/s whose first request is moved to the round's start (t = 0:
the worst case; ``load()`` itself sends it one gap later) or all at once. Each repeat runs,
for every quiet gap of ``--quiet`` (seconds; the order alternates between repeats) and both
rates, one round on each server (the order alternating), each round started that long after
the round before it ended (0: at once, as ``load()`` did before ``quiet_seconds``; 2:
``QUIET_S``, what it does now). ``--cold`` adds a variant sent at once without opening the
connections before the round's clock starts (``load_round`` opens them ahead; here each
request takes a kept-alive one or opens its own): is it the set-up?

Printed per variant, rate and server: the rounds, the TTFT (from the send) p50 and p99 over all
their requests, the largest TTFT of a round's first-sent request, and the rounds *stalled*:
those with a request whose TTFT is over 3 times the median TTFT of that server at that rate
(all gaps pooled). Run it on a quiet machine: every request is wall time.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from peer_serve import (  # noqa: E402
    SIDES,
    exit_on_sigterm,
    machine_and_versions,
    rate_words,
    say,
    started_servers,
)

MAX_TOKENS = 64
STALL_FACTOR = 3.0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--rate", type=float, default=1.0, help="the finite rate (req/s)")
    parser.add_argument("--quiet", type=float, nargs="+", default=[0.0, 2.0])
    parser.add_argument("--cold", action="store_true", help="add: at once, not opened ahead")
    parser.add_argument("--out", type=Path, help="write every round's TTFTs as JSON")
    return parser.parse_args(argv)


def variants(args: argparse.Namespace) -> list[tuple[float, bool]]:
    """Each variant's quiet gap (seconds) and whether its connections are opened ahead."""
    return [(gap, True) for gap in args.quiet] + ([(0.0, False)] if args.cold else [])


def label(gap: float, ahead: bool) -> str:
    return f"{gap:g} s" + ("" if ahead else ", cold")


def measure(urls: tuple[str, str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every round: its gap, rate, server and each request's TTFT from the send (ms)."""
    from pytest_specdecode.engines.config import EngineConfig
    from pytest_specdecode.engines.served import ServedEngine
    from pytest_specdecode.measure.inputs import cycled
    from pytest_specdecode.measure.load import arrival_times
    from pytest_specdecode.tiny.corpus import prompts as corpus_prompts

    prompts = corpus_prompts("structured", 8, seed=1)
    sampling = {"max_tokens": MAX_TOKENS, "temperature": 0.0, "ignore_eos": True}
    engines = {
        side: ServedEngine(url, EngineConfig.create(url, None, {}), role=side)
        for side, url in zip(SIDES, urls, strict=True)
    }
    rounds: list[dict[str, Any]] = []
    try:
        for engine in engines.values():
            engine.generate_round(list(prompts), sampling)  # warm-up, as load() does
        ended, block = time.perf_counter(), 0
        for repeat in range(args.repeats):
            for variant in variants(args) if repeat % 2 == 0 else variants(args)[::-1]:
                gap, ahead = variant
                for rate in (args.rate, math.inf):
                    arrivals = arrival_times(rate, requests=args.requests, round_index=repeat)
                    arrivals = [t - arrivals[0] for t in arrivals]
                    sides = SIDES if block % 2 == 0 else SIDES[::-1]
                    block += 1
                    for side in sides:
                        engine = engines[side]
                        if not ahead:  # the connections open inside the round, as requests go
                            engine._connect_ahead = lambda pool, n: None  # type: ignore[method-assign]
                        time.sleep(max(0.0, gap - (time.perf_counter() - ended)))
                        try:
                            done = engine.load_round(
                                cycled(prompts, args.requests), sampling, arrivals
                            )
                        finally:
                            vars(engine).pop("_connect_ahead", None)
                        ended = time.perf_counter()
                        ttft = [
                            None if q.ttft_sent is None else q.ttft_sent * 1000.0
                            for q in done.requests
                        ]
                        rounds.append({"repeat": repeat, "variant": label(gap, ahead),
                                       "rate": rate, "side": side, "ttft_ms": ttft})  # fmt: skip
            say(f"repeat {repeat + 1}/{args.repeats} done")
    finally:
        for engine in engines.values():
            engine.close()
    return rounds


def report(rounds: list[dict[str, Any]], args: argparse.Namespace) -> None:
    from pytest_specdecode.measure.stats import percentile

    medians = {
        (rate, side): statistics.median(
            t for r in rounds if (r["rate"], r["side"]) == (rate, side) for t in r["ttft_ms"] if t
        )
        for rate in (args.rate, math.inf)
        for side in SIDES
    }
    print(f"\n{'variant':>10} {'rate':>12} {'server':>12} {'rounds':>7} {'TTFT p50':>9} "
          f"{'TTFT p99':>9} {'first max':>10} {'stalled':>8}")  # fmt: skip
    for name in (label(*v) for v in variants(args)):
        for rate in (args.rate, math.inf):
            for side in SIDES:
                these = [
                    r for r in rounds if (r["variant"], r["rate"], r["side"]) == (name, rate, side)
                ]
                ttft = sorted(t for r in these for t in r["ttft_ms"] if t is not None)
                first = max(r["ttft_ms"][0] or 0.0 for r in these)
                limit = STALL_FACTOR * medians[rate, side]
                stalled = sum(any(t is not None and t > limit for t in r["ttft_ms"]) for r in these)
                print(f"{name:>10} {rate_words(rate):>12} {side:>12} {len(these):>7} "
                      f"{percentile(ttft, 50):>7.1f}ms {percentile(ttft, 99):>7.1f}ms "
                      f"{first:>8.1f}ms {stalled:>3}/{len(these):<4}")  # fmt: skip
    print(f"\nstalled: a request's TTFT over {STALL_FACTOR:g} x its server's median at that "
          "rate (" + ", ".join(f"{rate_words(r)} {s} {m:.1f} ms" for (r, s), m in medians.items())
          + ")")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    exit_on_sigterm()
    device, versions = machine_and_versions()
    print("command: " + " ".join(["python", "benchmarks/round_quiet.py", *sys.argv[1:]]))
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\nmachine: {device}\nversions: {versions}")
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="round_quiet-") as tmp:
        with started_servers(Path(tmp)) as (base_url, spec_url, _target):
            rounds = measure((base_url, spec_url), args)
    report(rounds, args)
    if args.out:
        plain = [{**r, "rate": "inf" if math.isinf(r["rate"]) else r["rate"]} for r in rounds]
        args.out.write_text(json.dumps(plain, indent=1) + "\n", encoding="utf-8")
    print(f"wall: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
