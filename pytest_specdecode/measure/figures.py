"""From paired rounds to a :class:`~pytest_specdecode.measure.result.Result`: figures, theory
and the verdict, each a pure function of what was measured."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..engines.config import EngineConfig, lossy
from ..engines.footprint import ProposerMemory
from ..engines.protocol import Counters, Round, Sampling
from ..errors import NoSpeculationError
from .cache import cache_gap, hit_rates
from .paired import PairedRounds
from .phases import summarize
from .result import Divergence, EngineFigures, Result
from .sequential import repeated_interval
from .stats import mean, ratio_interval


def engine_figures(
    rounds: Sequence[Round],
    memory_gib: float | None = None,
    kv_cache_tokens: int | None = None,
    counters: Counters | None = None,
) -> EngineFigures:
    """One engine's figures over its measured rounds (outputs from the last one; the prefix
    cache's from ``counters``, the engine's over those rounds)."""
    counters = counters or Counters()
    seconds = [r.elapsed for r in rounds]
    requests = [q for r in rounds for q in r.requests]
    return EngineFigures(
        tokens_per_second=sum(r.tokens for r in rounds) / sum(seconds) if sum(seconds) else 0.0,
        tpot=mean([q.tpot for q in requests]),
        ttft=mean([q.ttft for q in requests]),
        seconds=seconds,
        generated_tokens=rounds[-1].tokens,
        token_ids=[list(q.token_ids) for q in rounds[-1].requests],
        texts=[q.text for q in rounds[-1].requests],
        memory_gib=memory_gib,
        kv_cache_tokens=kv_cache_tokens,
        prefix_cache_queries=counters.prefix_cache_queries,
        prefix_cache_hits=counters.prefix_cache_hits,
        prefix_cache_hit_rate=counters.prefix_cache_hit_rate,
    )


def round_rates(rounds: Sequence[Round]) -> list[float]:
    """Tokens per second of each round."""
    return [r.tokens / r.elapsed for r in rounds if r.elapsed > 0]


def compare_outputs(
    baseline: Sequence[Sequence[int]], speculative: Sequence[Sequence[int]]
) -> tuple[float, list[Divergence]]:
    """Fraction of prompts with identical token ids, and the first divergence of the others."""
    divergences = []
    for i, (a, b) in enumerate(zip(baseline, speculative, strict=True)):
        if list(a) == list(b):
            continue
        j = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if j is None:
            j = min(len(a), len(b))
        divergences.append(
            Divergence(i, j, a[j] if j < len(a) else None, b[j] if j < len(b) else None)
        )
    n = len(baseline)
    return ((n - len(divergences)) / n if n else 1.0), divergences


def request_acceptance(rounds: Sequence[Round]) -> tuple[float | None, ...] | None:
    """Per prompt, the mean acceptance length 1 + accepted / verify steps over ``rounds``
    (vLLM's definition: 1.0 for a prompt that never drafted); None for a prompt the engine
    reported nothing for, and None altogether when it reported no prompt (per-request metrics
    off, an older vLLM, a server without them)."""
    if not rounds:
        return None
    steps = [0] * len(rounds[0].requests)
    accepted = [0] * len(steps)
    reported = [False] * len(steps)
    for round_ in rounds:
        for i, q in enumerate(round_.requests):
            if q.spec_steps is not None and q.accepted_tokens is not None:
                steps[i] += q.spec_steps
                accepted[i] += q.accepted_tokens
                reported[i] = True
    if not any(reported):
        return None
    return tuple(
        (1.0 + a / n if n else 1.0) if seen else None
        for a, n, seen in zip(accepted, steps, reported, strict=True)
    )


def alpha_from_rounds(rounds: Sequence[Round]) -> float | None:
    """Per-token acceptance from the per-step draft lengths the engine reported (vLLM's
    detailed per-request metrics), None when it reported none."""
    from .theory import alpha_from_steps

    accepted: list[int] = []
    drafted: list[int] = []
    for round_ in rounds:
        for q in round_.requests:
            if q.per_step_accepted is not None and q.per_step_drafted is not None:
                accepted.extend(q.per_step_accepted)
                drafted.extend(q.per_step_drafted)
    return alpha_from_steps(accepted, drafted) if drafted else None


#: Most prompts named as gaining least.
LEAST_GAIN = 3


def least_gain(per_prompt: Sequence[float | None] | None) -> tuple[int, ...]:
    """Indexes of the prompts with the lowest acceptance length: at most :data:`LEAST_GAIN`
    and half of the prompts with a value, only those below the best one (equal prompts have
    none that gains least), lowest first (ties by index)."""
    valued = [(v, i) for i, v in enumerate(per_prompt or ()) if v is not None]
    if not valued:
        return ()
    best = max(v for v, _ in valued)
    below = sorted((v, i) for v, i in valued if v < best - 1e-9)
    return tuple(i for _, i in below[: min(LEAST_GAIN, len(valued) // 2)])


def least_gain_note(per_prompt: Sequence[float | None], indexes: Sequence[int]) -> str:
    """``prompts 3, 7 (acceptance length 1.20, 1.40)``: prompt indexes count from 0."""
    which = "prompt" if len(indexes) == 1 else "prompts"
    lengths = ", ".join(f"{per_prompt[i]:.2f}" for i in indexes)
    return f"{which} {', '.join(str(i) for i in indexes)} (acceptance length {lengths})"


def proposer(
    info: Mapping[str, Any], counters: Counters, speculative: EngineConfig
) -> tuple[str, str, int]:
    """Target, method and k: from the configuration, or, for a served engine whose
    configuration is the server's, from what the server reports (``info``) or its counters."""
    k = speculative.num_speculative_tokens or int(info.get("num_speculative_tokens") or 0)
    k = k or len(counters.accepted_per_position)
    target = speculative.target or str(info.get("served_model") or "")
    return target, str(info.get("method") or speculative.method), k


def build_result(
    raw: PairedRounds,
    *,
    nodeid: str,
    category: str,
    speculative: EngineConfig,
    num_prompts: int,
    sampling: Sampling,
    concurrency: int | None,
    label: str = "",
) -> Result:
    """The measured figures of ``raw``; refuses a run in which speculation never ran."""
    counters = raw.counters
    target, method, k = proposer(raw.engine_info, raw.counters, speculative)
    if counters.num_drafts == 0:
        raise NoSpeculationError(
            f"{nodeid}: speculation never ran: the speculative engine ({method}, k={k}) "
            f"proposed no draft in {len(raw.speculative)} rounds "
            "(vllm:spec_decode_num_drafts did not move). Check the speculative config; for "
            "ngram, the prompts need repeated n-grams."
        )
    ratios = raw.ratios
    speedup, ci = repeated_interval(ratios, raw.looks) if raw.looks else ratio_interval(ratios)
    mem, kv = raw.memory_gib, raw.kv_cache_tokens
    base = engine_figures(
        raw.baseline, mem.get("baseline"), kv.get("baseline"), raw.baseline_counters
    )
    spec = engine_figures(raw.speculative, mem.get("speculative"), kv.get("speculative"), counters)
    match_rate, divergences = compare_outputs(base.token_ids, spec.token_ids)
    per_position = counters.acceptance_per_position
    per_position += [0.0] * (k - len(per_position))
    samples = {
        "acceptance_rate": [c.acceptance_rate for c in raw.round_counters],
        "mean_acceptance_length": [c.mean_acceptance_length for c in raw.round_counters],
        "baseline_tokens_per_second": round_rates(raw.baseline),
        "speculative_tokens_per_second": round_rates(raw.speculative),
    }
    for side, per_round in (
        ("baseline", raw.baseline_round_counters),
        ("speculative", raw.round_counters),
    ):
        rates = hit_rates(per_round)
        if rates and all(v is not None for v in rates):
            samples[f"{side}_prefix_cache_hit_rate"] = [float(v or 0.0) for v in rates]
    gap, gap_ci = cache_gap(raw.baseline_round_counters, raw.round_counters)
    footprint = ProposerMemory.of(raw.engine_info.get("draft_memory"), kv.get("speculative"))
    extra = footprint.gib
    per_prompt = request_acceptance(raw.speculative)
    least = least_gain(per_prompt)
    result = Result(
        nodeid=nodeid, category=category, target=target, method=method,
        num_speculative_tokens=k, draft=speculative.draft,
        speculative_config=speculative.speculative_config or {},
        engine_kwargs=speculative.engine_kwargs, num_prompts=num_prompts,
        max_tokens=int(sampling.max_tokens), temperature=float(sampling.temperature),
        concurrency=concurrency, trials=len(ratios), mode=raw.mode, memory=raw.memory,
        speedup=speedup, speedup_ci=ci, ratios=ratios,
        acceptance_rate=counters.acceptance_rate,
        mean_acceptance_length=counters.mean_acceptance_length,
        acceptance_per_position=per_position, num_drafts=counters.num_drafts,
        num_draft_tokens=counters.num_draft_tokens,
        num_accepted_tokens=counters.num_accepted_tokens, match_rate=match_rate,
        divergences=divergences, baseline=base, speculative=spec, label=label,
        samples=samples, extra_memory_gib=extra, request_acceptance=per_prompt,
        alpha=alpha_from_rounds(raw.speculative),
        least_gain=least,
        phases=summarize(
            raw.baseline, raw.speculative, counters, raw.round_counters,
            concurrency or num_prompts,
        ),
        phases_unavailable=unavailable(raw.baseline, raw.speculative),
        prefix_cache_gap=gap, prefix_cache_gap_ci=gap_ci,
    )  # fmt: skip
    why_lossy = lossy(speculative.speculative_config)
    if why_lossy is not None:
        result = with_notes(result, lossy=why_lossy)
    if raw.engine_info.get("draft_memory") is not None:
        result = with_notes(result, memory=footprint.note())
    if per_prompt is not None and least:
        result = with_notes(result, **{"least gain": least_gain_note(per_prompt, least)})
    return result


def unavailable(baseline: Sequence[Round], speculative: Sequence[Round]) -> str:
    """Why the rounds have no phase profile, from the engines' own words (each side's first
    note, both where they differ); "" where every round has one or none says why."""
    notes = []
    for side, rounds in (("baseline", baseline), ("speculative", speculative)):
        note = next((r.profile_note for r in rounds if r.profile is None and r.profile_note), "")
        if note:
            notes.append((side, note))
    if len({note for _, note in notes}) > 1:
        return "; ".join(f"{side}: {note}" for side, note in notes)
    return notes[0][1] if notes else ""


def with_theory(result: Result, cost_ratio: float | None) -> Result:
    """``result`` with alpha (from the real draft lengths when the engine reported them per
    step, else from the counters with short drafts accounted for by the draft-token count), the
    cost ratio, the predicted speedup and the efficiency (measured speedup over what the
    measured tokens per step allow at this cost ratio)."""
    from .theory import alpha_from_counts, predicted_speedup, speedup_from_tokens_per_step

    k = result.num_speculative_tokens
    counts = [round(p * result.num_drafts) for p in result.acceptance_per_position]
    alpha = result.alpha
    if alpha is None:
        alpha = alpha_from_counts(result.num_drafts, counts, result.num_draft_tokens)
    predicted = efficiency = None
    if cost_ratio is not None and k > 0:
        if alpha is not None:
            predicted = predicted_speedup(alpha, k, cost_ratio)
        if result.num_drafts > 0:
            allowed = speedup_from_tokens_per_step(result.mean_acceptance_length, k, cost_ratio)
            efficiency = result.speedup / allowed
    return replace(
        result,
        alpha=alpha,
        cost_ratio=cost_ratio,
        predicted_speedup=predicted,
        efficiency=efficiency,
    )


def with_verdict(result: Result, max_extra_memory_gib: float | None) -> Result:
    """``result`` with its worth-it verdict and the reasons."""
    from .judge import judge

    verdict, reasons = judge(result, max_extra_memory_gib=max_extra_memory_gib)
    return replace(result, verdict=verdict, verdict_reasons=reasons)


def with_notes(result: Result, **notes: Any) -> Result:
    """``result`` with more notes (a new dict: results are never changed in place)."""
    return replace(result, notes={**result.notes, **notes})
