"""Is speculation worth it for this workload? A verdict and its reasons, from the figures."""

from __future__ import annotations

from .result import Result

WORTH = "worth it"
NOT_WORTH = "not worth it"
INCONCLUSIVE = "inconclusive"


def judge(result: Result, *, max_extra_memory_gib: float | None = None) -> tuple[str, list[str]]:
    """Worth it when the speedup's 95% interval lies above 1 (and memory fits), not worth it
    when it lies below 1 (or memory does not fit), inconclusive otherwise; the reasons say why
    in words drawn from the figures."""
    low, high = result.speedup_ci
    reasons: list[str] = []
    k = result.num_speculative_tokens
    if high < 1.0:
        reasons.append(f"slower: speedup {result.speedup:.2f}x (95% CI {low:.2f}-{high:.2f}x)")
    elif low > 1.0:
        reasons.append(f"faster: speedup {result.speedup:.2f}x (95% CI {low:.2f}-{high:.2f}x)")
    else:
        reasons.append(f"the speedup's 95% interval {low:.2f}-{high:.2f}x contains 1.0")
    if result.alpha is not None and result.cost_ratio is not None:
        if result.alpha <= result.cost_ratio:
            reasons.append(
                f"acceptance too low for this cost ratio: alpha {result.alpha:.2f} <= draft/"
                f"target cost {result.cost_ratio:.2f}, so no k can win"
            )
        elif result.efficiency is not None and result.efficiency < 0.7:
            reasons.append(
                f"overhead: the measured speedup is {result.efficiency:.0%} of the "
                f"{result.predicted_speedup:.2f}x that alpha {result.alpha:.2f} and k={k} predict"
            )
    elif result.acceptance_rate < 0.3 and result.num_drafts:
        reasons.append(f"low acceptance: {result.acceptance_rate:.2f} of draft tokens accepted")
    batch = result.concurrency or result.num_prompts
    if high < 1.0 and batch >= 16:
        reasons.append(f"speedup gone at concurrency {batch}: verification competes for compute")
    memory_ok = True
    if result.extra_memory_gib is not None:
        extra = f"speculation costs {result.extra_memory_gib:.2f} GiB more memory"
        if max_extra_memory_gib is not None and result.extra_memory_gib > max_extra_memory_gib:
            memory_ok = False
            reasons.append(f"{extra}, above the {max_extra_memory_gib:g} GiB allowed")
        elif result.extra_memory_gib > 0.05:
            reasons.append(extra)
    if high < 1.0 or not memory_ok:
        return NOT_WORTH, reasons
    if low > 1.0:
        return WORTH, reasons
    return INCONCLUSIVE, reasons
