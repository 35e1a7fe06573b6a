"""What the phase timer's wrappers cost per engine step, on the exact code that runs in vLLM's
worker (``engines/phases.py``'s ``StepTimer`` on a model runner of vLLM's V1 shape whose
methods do nothing), against the same runner unwrapped.

    python benchmarks/phase_wrapper_cost.py                 # 200,000 steps, decode steps of 4
    python benchmarks/phase_wrapper_cost.py --steps 20000   # a smoke run

The A/B rounds of ``benchmarks/phase_overhead.py`` cannot resolve an overhead below the noise
of a round (a few percent on a 2-core CPU); this bounds it from below the noise: the wrappers'
own time per step (clock marks, the prefill test, the step record, the collection at the
round's end) divided by a measured decode step gives the share of a step they take. It prints
microseconds per step with and without the timer (medians of repeats) and the difference.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdecode.engines.phases import StepTimer  # noqa: E402 (pure Python)


class Runner:
    """vLLM's V1 model runner as the timer wraps it, every method free."""

    def __init__(self) -> None:
        self.requests: dict[str, Any] = {}

    def execute_model(self, scheduler_output: Any, intermediate_tensors: Any = None) -> Any:
        for req in scheduler_output.scheduled_new_reqs:
            self.requests[req.req_id] = SimpleNamespace(num_prompt_tokens=5)
        self._model_forward()
        return None

    def _model_forward(self, **kwargs: Any) -> None:
        return None

    def sample_tokens(self, grammar_output: Any) -> None:
        self._sample()
        self.propose_draft_token_ids()

    def _sample(self) -> None:
        return None

    def propose_draft_token_ids(self) -> None:
        return None


def decode_output(batch: int) -> SimpleNamespace:
    """A decode step's scheduler output: ``batch`` cached requests past their prompts."""
    ids = [f"r{i}" for i in range(batch)]
    return SimpleNamespace(
        total_num_scheduled_tokens=batch,
        scheduled_new_reqs=[],
        scheduled_cached_reqs=SimpleNamespace(
            req_ids=ids, num_computed_tokens=[64] * batch, resumed_req_ids=set()
        ),
    )


def per_step(steps: int, batch: int, timed: bool) -> float:
    """Seconds per step of ``steps`` decode steps (one round), with the timer or without."""
    runner = Runner()
    for i in range(batch):
        runner.requests[f"r{i}"] = SimpleNamespace(num_prompt_tokens=5)
    timer = StepTimer.install(runner) if timed else None
    out = decode_output(batch)
    if timer is not None:
        timer.begin()
    start = time.perf_counter()
    for _ in range(steps):
        runner.execute_model(out)
        runner.sample_tokens(None)
    if timer is not None:
        timer.collect()
    return (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000, help="steps per repeat")
    parser.add_argument("--batch", type=int, default=4, help="requests per decode step")
    parser.add_argument("--repeats", type=int, default=7, help="repeats of each (median)")
    args = parser.parse_args(argv)
    plain = statistics.median(per_step(args.steps, args.batch, False) for _ in range(args.repeats))
    timed = statistics.median(per_step(args.steps, args.batch, True) for _ in range(args.repeats))
    print(
        f"{args.steps} decode steps of {args.batch} requests, median of {args.repeats}: "
        f"{plain * 1e6:.2f} us per step unwrapped, {timed * 1e6:.2f} us with the phase timer; "
        f"the timer adds {(timed - plain) * 1e6:.2f} us per step"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
