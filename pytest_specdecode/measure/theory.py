"""The theoretical bound (Leviathan et al. 2023) and what separates acceptance from overhead.

With per-token acceptance ``alpha``, ``k`` speculative tokens and draft/target cost ratio ``c``:

- expected tokens per verify step ``E = (1 - alpha**(k+1)) / (1 - alpha)`` (vLLM's mean
  acceptance length under i.i.d. acceptance), and
- expected wall-time factor ``S = E / (c*k + 1)`` (:func:`predicted_speedup`).

vLLM's *acceptance rate* (accepted / draft tokens) is not ``alpha``. Each draft is a run of
Bernoulli(``alpha``) trials that stops at the first rejection or at the end of the draft, so
with ``A`` accepted tokens and ``F`` drafts that ended in a rejection there were ``A + F``
trials and the maximum-likelihood ``alpha = A / (A + F)``:

- from per-step arrays (vLLM's per-request ``per_step_accepted`` / ``per_step_drafted``),
  ``F`` is counted exactly (:func:`alpha_from_steps`);
- from the per-position counters with every draft ``k`` long, ``F`` is the number of drafts
  less the last per-position count (:func:`alpha_from_counts`);
- drafts can be shorter than ``k`` (structured outputs drop grammar-invalid draft tokens,
  n-gram proposes partial drafts: ``num_draft_tokens < k * num_drafts``); then the counters do
  not say which drafts were short, and counting every draft not accepted to position ``k`` as
  a rejection biases ``alpha`` low (0.78 / 0.74 / 0.70 at ``alpha = 0.8``, ``k = 4``, with
  10 / 30 / 50% of drafts short). :func:`alpha_from_counts` then maximises the likelihood of
  the per-position counts over ``alpha`` and the unknown distribution of draft lengths
  (independent of acceptance), with the mean draft length fixed by the draft-token counter.

Efficiency = measured speedup / ``(E_obs / (c*k + 1))``, ``E_obs`` the measured tokens per
verify step (mean acceptance length, ``1 + accepted / drafts``): the share of the wall-time
factor that the measured acceptance allows which the engine delivered, so it reads overhead
alone (the i.i.d. ``E`` misses acceptance that decays with position, by 3-8%). A regression
with steady acceptance but falling efficiency reads as "overhead grew"; with falling ``alpha``,
as "acceptance fell". The predicted speedup from ``alpha`` stays as the theory figure.

Speculation can win at some ``k`` only if the first draft token is accepted more often than
the draft costs: with ``p1`` the first-position acceptance, ``k = 1`` gives
``(1 + p1) / (1 + c)``, and when acceptance does not rise along positions no longer draft
does better once ``p1 <= c`` (:func:`hopeless`). ``alpha <= c`` is not that test: with
acceptance [0.5, 0.05, 0.05, 0.05] and ``c = 0.4``, ``alpha = 0.345`` yet ``k = 1`` wins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def alpha_from_steps(accepted: Sequence[int], drafted: Sequence[int]) -> float | None:
    """Maximum-likelihood per-token acceptance from per-step accepted and drafted counts.

    A step whose draft was fully accepted ended without a rejection; every other step with
    a draft ended in one. Steps without draft tokens say nothing. ``None`` without drafts.
    """
    if len(accepted) != len(drafted):
        raise ValueError(f"{len(accepted)} accepted counts for {len(drafted)} steps")
    total = rejections = 0
    for a, d in zip(accepted, drafted, strict=True):
        if d <= 0:
            continue
        if not 0 <= a <= d:
            raise ValueError(f"{a} tokens accepted of a {d}-token draft")
        total += a
        rejections += a < d
    if total + rejections == 0:
        return None
    return total / (total + rejections)


def alpha_from_counts(
    num_drafts: int,
    accepted_per_position: Sequence[int],
    num_draft_tokens: int | None = None,
) -> float | None:
    """Maximum-likelihood per-token acceptance from vLLM's counters.

    ``accepted_per_position[i]``: drafts whose first ``i + 1`` tokens were accepted. With
    ``num_draft_tokens`` below ``k * num_drafts`` (short drafts), the estimate accounts for
    them (see the module docstring); without it, or with every draft ``k`` long, it is
    ``A / (A + num_drafts - accepted_per_position[-1])``.
    """
    if num_drafts <= 0 or not accepted_per_position:
        return None
    k = len(accepted_per_position)
    counts: list[int] = []
    for n in accepted_per_position:  # counters never rise along positions; rounding might
        counts.append(max(0, min(int(n), counts[-1] if counts else num_drafts)))
    accepted = sum(counts)
    if num_draft_tokens is None or num_draft_tokens >= k * num_drafts:
        trials = accepted + num_drafts - counts[-1]
        return accepted / trials if trials > 0 else 1.0
    if num_draft_tokens <= 0:
        return None
    if accepted >= num_draft_tokens:
        return 1.0
    if accepted == 0:
        return 0.0
    return _alpha_short_drafts(num_drafts, counts, num_draft_tokens)


# --- short drafts: likelihood over alpha and the draft-length distribution ---
#
# With S_m the share of drafts at least m tokens long (S_0 = 1 >= S_1 >= ... >= S_k >= 0,
# sum S_m = num_draft_tokens / num_drafts = t) and c_m the drafts with exactly m tokens
# accepted, P(m accepted) = alpha**m (S_m - alpha S_{m+1}), so the log-likelihood is
# A log(alpha) + sum_m c_m log(S_m - alpha S_{m+1}). For fixed alpha it is concave in S over
# a polytope (log-barrier Newton below); alpha is found where the profile's derivative
# A / alpha - sum_m c_m S_{m+1} / (S_m - alpha S_{m+1}) changes sign. When the moment solution
# sum_m acc_m / alpha**m = num_draft_tokens (unconstrained S) is feasible, it is the maximum.


def _alpha_short_drafts(num_drafts: int, counts: Sequence[int], num_draft_tokens: int) -> float:
    k = len(counts)
    t = num_draft_tokens / num_drafts
    moment = _moment_alpha(counts, num_draft_tokens)
    shares = [n / num_drafts / moment ** (i + 1) for i, n in enumerate(counts)]
    if all(a >= b for a, b in zip([1.0, *shares], shares, strict=False)):
        return moment
    runs = [num_drafts, *counts, 0]
    exact = [runs[m] - runs[m + 1] for m in range(k + 1)]
    accepted = sum(counts)

    def slope(alpha: float) -> float:
        s = [1.0, *_best_lengths(alpha, exact, t), 0.0]
        return accepted / alpha - sum(
            c * s[m + 1] / (s[m] - alpha * s[m + 1]) for m, c in enumerate(exact) if c
        )

    lo, hi = 1e-9, 1.0 - 1e-9
    f_lo, f_hi = slope(lo), slope(hi)
    if f_hi >= 0.0:
        return hi
    if f_lo <= 0.0:
        return lo
    # Illinois regula falsi on the profile's slope, bisecting when it stalls
    side = 0
    for _ in range(100):
        x = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        if not lo < x < hi or hi - lo > 0.05:
            x = 0.5 * (lo + hi)
        fx = slope(x)
        if fx > 0.0:
            lo, f_lo = x, fx
            if side == 1:
                f_hi /= 2.0
            side = 1
        else:
            hi, f_hi = x, fx
            if side == -1:
                f_lo /= 2.0
            side = -1
        if hi - lo < 1e-9:
            break
    return 0.5 * (lo + hi)


def _moment_alpha(counts: Sequence[int], num_draft_tokens: int) -> float:
    """The alpha solving ``sum_m acc_m / alpha**m = num_draft_tokens`` (0 < A < T)."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if sum(n / mid ** (i + 1) for i, n in enumerate(counts)) > num_draft_tokens:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    return 0.5 * (lo + hi)


def _best_lengths(alpha: float, exact: Sequence[int], t: float) -> list[float]:
    """S_1..S_k maximising sum_m c_m log(S_m - alpha S_{m+1}) over the length polytope."""
    k = len(exact) - 1
    n = sum(exact)
    base = [(k + 1 - m) / (k + 1) for m in range(1, k + 1)]  # strictly decreasing, sum k/2
    if t >= k / 2:
        mix = 2 * t / k - 1
        s = [mix + (1 - mix) * b for b in base]
    else:
        s = [2 * t / k * b for b in base]

    def value(s: Sequence[float], w: float) -> float:
        full = [1.0, *s, 0.0]
        gaps = [full[m] - full[m + 1] for m in range(k + 1)]
        if min(gaps) <= 0.0:
            return -math.inf
        total = 0.0
        for m, c in enumerate(exact):
            gap = gaps[m]
            total += w * math.log(gap)
            if c:
                total += c * math.log(gap + (1.0 - alpha) * full[m + 1])
        return total

    w = 0.1 * n
    while w > n * 1e-11:
        for _ in range(60):
            full = [1.0, *s, 0.0]
            grad = [0.0] * (k + 2)
            diag = [0.0] * (k + 2)
            off = [0.0] * (k + 2)  # off[m]: Hessian entry between S_m and S_{m+1}
            for m, c in enumerate(exact):
                gap = full[m] - full[m + 1]
                g1, g2 = w / gap, w / (gap * gap)
                grad[m] += g1
                grad[m + 1] -= g1
                diag[m] -= g2
                diag[m + 1] -= g2
                off[m] += g2
                if c:
                    u = gap + (1.0 - alpha) * full[m + 1]
                    u1, u2 = c / u, c / (u * u)
                    grad[m] += u1
                    grad[m + 1] -= alpha * u1
                    diag[m] -= u2
                    diag[m + 1] -= alpha * alpha * u2
                    off[m] += alpha * u2
            g, d, o = grad[1 : k + 1], diag[1 : k + 1], off[1:k]
            x1 = _tridiagonal(o, d, g)
            x2 = _tridiagonal(o, d, [1.0] * k)
            nu = sum(x1) / sum(x2)
            step_dir = [nu * b - a for a, b in zip(x1, x2, strict=True)]
            gain = sum(a * b for a, b in zip(g, step_dir, strict=True))
            if not gain > 1e-13 * n:
                break
            f0, step = value(s, w), 1.0
            while step > 1e-14:
                trial = [a + step * b for a, b in zip(s, step_dir, strict=True)]
                if value(trial, w) >= f0 + 0.25 * step * gain:
                    s = trial
                    break
                step *= 0.5
            else:
                break
        w /= 30.0
    return s


def _tridiagonal(off: Sequence[float], diag: Sequence[float], rhs: Sequence[float]) -> list[float]:
    """Solve a symmetric tridiagonal (definite) system by the Thomas algorithm."""
    n = len(diag)
    c = [0.0] * n
    d = [0.0] * n
    c[0] = off[0] / diag[0] if n > 1 else 0.0
    d[0] = rhs[0] / diag[0]
    for i in range(1, n):
        den = diag[i] - off[i - 1] * c[i - 1]
        c[i] = off[i] / den if i < n - 1 else 0.0
        d[i] = (rhs[i] - off[i - 1] * d[i - 1]) / den
    x = [0.0] * n
    x[-1] = d[-1]
    for i in range(n - 2, -1, -1):
        x[i] = d[i] - c[i] * x[i + 1]
    return x


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """``(1 - alpha**(k+1)) / (1 - alpha)``; ``k + 1`` when every token is accepted."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def predicted_speedup(alpha: float, k: int, cost_ratio: float) -> float:
    """Leviathan's wall-time factor ``(1 - alpha**(k+1)) / ((1 - alpha)(c*k + 1))``."""
    return expected_tokens_per_step(alpha, k) / (cost_ratio * k + 1)


def speedup_from_tokens_per_step(tokens_per_step: float, k: int, cost_ratio: float) -> float:
    """The wall-time factor that ``tokens_per_step`` allows: ``E / (c*k + 1)`` (no overhead)."""
    return tokens_per_step / (cost_ratio * k + 1)


def first_position_acceptance(acceptance_per_position: Sequence[float]) -> float | None:
    """Share of drafts whose first token was accepted; ``None`` without per-position data."""
    return float(acceptance_per_position[0]) if acceptance_per_position else None


def hopeless(first_position: float, cost_ratio: float) -> bool:
    """No ``k`` can win: even ``k = 1`` gives ``(1 + p1) / (1 + c) <= 1`` (and, with
    acceptance not rising along positions, every longer draft gives no more)."""
    return first_position <= cost_ratio


def acceptance_rate_from_alpha(alpha: float, k: int) -> float:
    """vLLM's accepted/draft-token rate implied by ``alpha`` (i.i.d.): ``(E - 1) / k``."""
    return (expected_tokens_per_step(alpha, k) - 1) / k
