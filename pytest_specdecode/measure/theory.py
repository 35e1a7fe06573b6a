"""The theoretical bound (Leviathan et al. 2023) and what separates acceptance from overhead.

With per-token acceptance ``alpha``, ``k`` speculative tokens and draft/target cost ratio ``c``:

- expected tokens per verify step ``E = (1 - alpha**(k+1)) / (1 - alpha)`` (vLLM's mean
  acceptance length under i.i.d. acceptance), and
- expected wall-time factor ``S = E / (c*k + 1)``.

vLLM's *acceptance rate* (accepted / draft tokens) is not ``alpha``. We estimate ``alpha`` from
the per-position counters by maximum likelihood: each draft is a run of Bernoulli(``alpha``)
trials that stops at the first rejection or after ``k`` acceptances, so with ``S`` accepted
tokens in ``D`` drafts, ``F`` of which had all ``k`` tokens accepted (the last per-position
count), there were ``S + D - F`` trials and ``alpha = S / (S + D - F)``.

Efficiency = measured speedup / predicted speedup. A regression with steady acceptance but
falling efficiency reads as "overhead grew"; with falling ``alpha``, as "acceptance fell".
"""

from __future__ import annotations

from collections.abc import Sequence


def alpha_from_counts(num_drafts: int, accepted_per_position: Sequence[int]) -> float | None:
    """Maximum-likelihood per-token acceptance from vLLM's per-position counters."""
    if num_drafts <= 0 or not accepted_per_position:
        return None
    accepted = sum(accepted_per_position)
    full = accepted_per_position[-1]
    trials = accepted + num_drafts - full
    return accepted / trials if trials > 0 else 1.0


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """``(1 - alpha**(k+1)) / (1 - alpha)``; ``k + 1`` when every token is accepted."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def predicted_speedup(alpha: float, k: int, cost_ratio: float) -> float:
    """Leviathan's wall-time factor ``(1 - alpha**(k+1)) / ((1 - alpha)(c*k + 1))``."""
    return expected_tokens_per_step(alpha, k) / (cost_ratio * k + 1)


def acceptance_rate_from_alpha(alpha: float, k: int) -> float:
    """vLLM's accepted/draft-token rate implied by ``alpha`` (i.i.d.): ``(E - 1) / k``."""
    return (expected_tokens_per_step(alpha, k) - 1) / k
