"""Is speculation worth it for this workload? A result's :class:`~.verdict.Verdict` and its
reasons, from the figures."""

from __future__ import annotations

from .phases import PhaseSummary
from .result import Result
from .theory import first_position_acceptance, hopeless, speedup_from_tokens_per_step
from .verdict import Verdict, by_interval

#: Below this share of prompts with the baseline's greedy output (temperature 0), the two
#: engines did different work: the result cannot be worth it.
MIN_GREEDY_MATCH = 0.5
#: Beyond this relative difference in output tokens (the last round, both sides), the two
#: engines did different work: the result cannot be worth it.
MAX_LENGTH_GAP = 0.1


def different_work(result: Result) -> list[str]:
    """Why the two engines' outputs are not comparable (the reasons; empty when they are):
    at temperature 0 fewer than :data:`MIN_GREEDY_MATCH` of the prompts give the baseline's
    output, or the two sides generated output lengths more than :data:`MAX_LENGTH_GAP`
    apart."""
    reasons = []
    if result.temperature == 0 and result.match_rate < MIN_GREEDY_MATCH:
        reasons.append(
            f"outputs differ at temperature 0: {result.match_rate:.2f} of prompts match the "
            f"baseline's token for token (below {MIN_GREEDY_MATCH:.2f}), so the engines did "
            "not generate the same text and the speedup does not compare like with like"
        )
    base, spec = result.baseline.generated_tokens, result.speculative.generated_tokens
    if base > 0 and abs(spec - base) > MAX_LENGTH_GAP * base:
        reasons.append(
            f"output lengths differ: the speculative engine generated {spec} tokens to the "
            f"baseline's {base} ({spec / base:.0%}) in the last round (more than "
            f"{MAX_LENGTH_GAP:.0%} apart), so the engines did not do the same work"
        )
    return reasons


def judge(
    result: Result, *, max_extra_memory_gib: float | None = None
) -> tuple[Verdict, list[str]]:
    """Worth it when the speedup's 95% interval lies above 1 (and memory fits, and the two
    engines did the same work: :func:`different_work`), not worth it when it lies below 1
    (or memory does not fit), inconclusive otherwise (:func:`by_interval`); the reasons say
    why in words drawn from the figures."""
    low, high = result.speedup_ci
    interval = by_interval(result.speedup_ci)
    reasons: list[str] = []
    k = result.num_speculative_tokens
    if interval is Verdict.NOT_WORTH:
        reasons.append(f"slower: speedup {result.speedup:.2f}x (95% CI {low:.2f}-{high:.2f}x)")
    elif interval is Verdict.WORTH:
        reasons.append(f"faster: speedup {result.speedup:.2f}x (95% CI {low:.2f}-{high:.2f}x)")
    else:
        reasons.append(f"the speedup's 95% interval {low:.2f}-{high:.2f}x contains 1.0")
    first = first_position_acceptance(result.acceptance_per_position)
    if result.cost_ratio is not None and first is not None and result.num_drafts:
        c = result.cost_ratio
        if hopeless(first, c):
            reasons.append(
                f"acceptance too low for this cost ratio: first draft token accepted "
                f"{first:.2f} <= draft/target cost {c:.2f}, so even k=1 cannot win "
                "(nor a longer draft, with acceptance not rising along positions)"
            )
        elif result.efficiency is not None and result.efficiency < 0.7:
            allowed = speedup_from_tokens_per_step(result.mean_acceptance_length, k, c)
            reasons.append(
                f"overhead: the measured speedup is {result.efficiency:.0%} of the "
                f"{allowed:.2f}x that {result.mean_acceptance_length:.2f} tokens per step "
                f"and k={k} allow at cost ratio {c:.2f}"
            )
    elif result.acceptance_rate < 0.3 and result.num_drafts:
        reasons.append(f"low acceptance: {result.acceptance_rate:.2f} of draft tokens accepted")
    batch = result.concurrency or result.num_prompts
    if interval is Verdict.NOT_WORTH and batch >= 16:
        reasons.append(f"speedup gone at concurrency {batch}: verification competes for compute")
    memory_ok = True
    if result.extra_memory_gib is not None:
        extra = f"speculation costs {result.extra_memory_gib:.2f} GiB more memory"
        if max_extra_memory_gib is not None and result.extra_memory_gib > max_extra_memory_gib:
            memory_ok = False
            reasons.append(f"{extra}, above the {max_extra_memory_gib:g} GiB allowed")
        elif result.extra_memory_gib > 0.05:
            reasons.append(extra)
    apart = different_work(result)
    reasons.extend(apart)
    if interval is Verdict.NOT_WORTH or not memory_ok:
        if interval is Verdict.NOT_WORTH and result.phases is not None:
            reasons.append(why_slower(result.phases))
        return Verdict.NOT_WORTH, reasons
    if interval is Verdict.WORTH and not apart:
        return Verdict.WORTH, reasons
    return Verdict.INCONCLUSIVE, reasons


def why_slower(phases: PhaseSummary) -> str:
    """What the engines' step profiles say about a slowdown: the term that dominates the
    speculative decode step when the acceptance length is below the break-even, else that the
    loss lies outside the decode steps."""
    if phases.pays is None:
        return phases.explanation
    if not phases.pays:
        return f"why: {phases.explanation}"
    base, spec = phases.baseline.prefill, phases.speculative.prefill
    prefill = ""
    if base.step_ms is not None and spec.step_ms is not None:
        prefill = (
            f" (prefill {spec.steps * spec.step_ms:.1f} vs {base.steps * base.step_ms:.1f} ms "
            "per round, speculative vs baseline, or time between steps)"
        )
    return (
        f"the decode steps pay ({phases.tokens_per_step:.2f} tokens per step, above the "
        f"break-even {phases.break_even_length:.2f}); the loss lies outside them{prefill}"
    )


def verdict_of(result: Result) -> Verdict:
    """The result's verdict; for one not judged (a sweep's point, a report from before
    verdicts), its interval's (:func:`~.verdict.by_interval`)."""
    return result.verdict or by_interval(result.speedup_ci)
