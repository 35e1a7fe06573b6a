"""What phase timing costs a round: each engine of the tiny pair with phase timing on and off.

    python benchmarks/phase_overhead.py              # 20 measured rounds per engine pair
    python benchmarks/phase_overhead.py --rounds 2   # a smoke run (no figure to quote)

For the baseline engine and then the speculative one (the built-in tiny pair, draft model,
k = 4), two engines of that configuration run side by side: one with phase timing (the
default), one started with ``SPECDECODE_PHASES=0``. After one warm-up round each, rounds
alternate between them (on-off, then off-on, ...); each pair of neighbouring rounds gives a
ratio on/off of the round's time. It prints the geometric mean of those ratios minus 1 (the
overhead) with its 95% interval, twice: for the round's time as measured (inside the engine
worker, what the speedup sees) and for the caller's wait per round (adding the start and
collect calls into vLLM's workers, made outside the timed part). With it, from the rounds with
phase timing: how much of a round's wall time its timed steps cover (the rest is request
handling before the first step and after the last) and each phase's share of the decode and
prefill steps (the figures ``tests/e2e/test_e2e_phase_timing.py`` prints but, being measured, does
not assert). Run it on a quiet machine: other work on the machine widens the interval.
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

from pytest_specdecode.engines.phases import PHASES_ENV  # noqa: E402 (pure Python)
from pytest_specdecode.tiny import ENGINE_KWARGS  # noqa: E402 (no torch until a model is built)
from pytest_specdecode.tiny.corpus import prompts  # noqa: E402 (pure Python, no torch)

#: Structured requests like the tiny models' training data (as benchmarks/harness.py).
PROMPTS = prompts("structured", 4, seed=1)
SAMPLING = {"temperature": 0.0, "max_tokens": 64, "ignore_eos": True}


def start(config: Any, timing: bool, log_dir: str) -> Any:
    """A local engine of ``config``, with phase timing on or off."""
    from pytest_specdecode.engines.hardware import detect_device
    from pytest_specdecode.engines.local import Engine
    from pytest_specdecode.engines.placement import place
    from pytest_specdecode.engines.protocol import Placement

    placement = place(config, detect_device(), max_engines=2)
    env = {**placement.env, PHASES_ENV: "1" if timing else "0"}
    return Engine(
        config, Placement(placement.engine_kwargs, placement.memory, env),
        timeout=600, log_dir=log_dir,
    )  # fmt: skip


def overhead(ratios: list[float]) -> str:
    """The overhead (geometric mean ratio - 1) and its 95% interval, as text."""
    from pytest_specdecode.measure.stats import ratio_interval

    if len(ratios) < 2:
        mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        return f"{mean - 1:+.2%} (one pair: no interval)"
    mean, (low, high) = ratio_interval(ratios)
    return f"{mean - 1:+.2%} (95% CI {low - 1:+.2%} to {high - 1:+.2%}, {len(ratios)} pairs)"


def shares(profiles: list[Any]) -> str:
    """Each phase's share of the summed decode and prefill steps of ``profiles``, as text."""
    from pytest_specdecode.engines.protocol import PHASES

    parts = []
    for kind in ("decode", "prefill"):
        times = [getattr(p, kind) for p in profiles]
        total = sum(t.total for t in times)
        if total <= 0:
            continue
        each = ", ".join(
            f"{phase} {sum(t.seconds(phase) for t in times) / total:.1%}" for phase in PHASES
        )
        parts.append(f"{kind} steps ({sum(t.steps for t in times)}): {each}")
    return "; ".join(parts)


def measure(config: Any, rounds: int, log_dir: str) -> dict[str, Any]:
    """Interleaved rounds on two engines of ``config``: phase timing on and off."""
    on, off = start(config, True, log_dir), start(config, False, log_dir)
    try:
        for engine in (on, off):
            engine.generate_round(PROMPTS, SAMPLING)  # warm-up
        elapsed: dict[bool, list[float]] = {True: [], False: []}
        waited: dict[bool, list[float]] = {True: [], False: []}
        profiled: dict[bool, bool] = {}
        profiles: list[Any] = []
        covered: list[float] = []
        for i in range(rounds):
            for timing in (True, False) if i % 2 == 0 else (False, True):
                began = time.perf_counter()
                done = (on if timing else off).generate_round(PROMPTS, SAMPLING)
                waited[timing].append(time.perf_counter() - began)
                elapsed[timing].append(done.elapsed)
                profiled[timing] = done.profile is not None
                if done.profile is not None:
                    profiles.append(done.profile)
                    steps = done.profile.prefill.total + done.profile.decode.total
                    covered.append(steps / done.elapsed)
        if profiled != {True: True, False: False}:
            raise RuntimeError(f"phase timing was not as asked (profile seen: {profiled})")
        return {
            "elapsed": [a / b for a, b in zip(elapsed[True], elapsed[False], strict=True)],
            "waited": [a / b for a, b in zip(waited[True], waited[False], strict=True)],
            "round_ms": 1e3 * sum(elapsed[False]) / rounds,
            "covered": covered,
            "shares": shares(profiles),
        }
    finally:
        on.close()
        off.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="measured rounds per engine")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    from pytest_specdecode.engines.config import EngineConfig
    from pytest_specdecode.tiny import tiny_models

    models = tiny_models()
    spec = {"method": "draft_model", "model": str(models.draft), "num_speculative_tokens": 4}
    configs = {
        "baseline": EngineConfig.create(str(models.target), None, dict(ENGINE_KWARGS)),
        "speculative": EngineConfig.create(str(models.target), spec, dict(ENGINE_KWARGS)),
    }
    print(f"phase timing overhead: tiny pair, {len(PROMPTS)} prompts x "
          f"{SAMPLING['max_tokens']} tokens, {args.rounds} rounds per engine, on and off "
          "interleaved")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="specdecode-phase-overhead-") as log_dir:
        for name, config in configs.items():
            found = measure(config, args.rounds, log_dir)
            print(f"{name}: round {found['round_ms']:.0f} ms without timing; overhead on the "
                  f"measured round {overhead(found['elapsed'])}; on the caller's wait "
                  f"{overhead(found['waited'])}", flush=True)  # fmt: skip
            covered = sorted(found["covered"])
            print(f"  timed steps cover {statistics.median(covered):.1%} of a round (median; "
                  f"least {covered[0]:.1%}, most {covered[-1]:.1%}); {found['shares']}",
                  flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
