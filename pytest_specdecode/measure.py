"""Paired measurement: warm-up, then alternating baseline/speculative rounds, then figures."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .engine import Engine, EnginePool, Progress
from .engine_config import EngineConfig, max_model_len, tokenizer_file
from .errors import ConfigError, GateError
from .result import Divergence, EngineFigures, Result, SpecCounters
from .stats import mean, ratio_interval

#: Fewest paired rounds before adaptive trials may stop.
MIN_ADAPTIVE_TRIALS = 3


def adaptive_stop(thresholds: Sequence[float], precision: float) -> Callable[[list[float]], bool]:
    """The adaptive rule: stop once the speedup's 95% interval is decisive against every
    threshold in play (lies wholly above or below it) and, with no threshold, once its
    half-width is within ``precision`` (relative)."""

    def stop(ratios: list[float]) -> bool:
        speedup, (low, high) = ratio_interval(ratios)
        if thresholds:
            return all(not (low < t <= high) for t in thresholds)
        return (high - low) / 2 <= precision * speedup

    return stop


def _memory(pool: EnginePool, engine: Engine) -> float | None:
    pid = getattr(engine, "pid", None)
    if not pid:
        return None  # a served deployment: not ours to measure
    from .memory import engine_memory_gib

    return engine_memory_gib(pid, pool.device.kind)


def _figures(rounds: list[dict[str, Any]]) -> EngineFigures:
    seconds = [r["elapsed"] for r in rounds]
    tokens = [sum(len(q["token_ids"]) for q in r["requests"]) for r in rounds]
    requests = [q for r in rounds for q in r["requests"]]
    last = rounds[-1]["requests"]
    return EngineFigures(
        tokens_per_second=sum(tokens) / sum(seconds) if sum(seconds) > 0 else 0.0,
        tpot=mean([q["tpot"] for q in requests]),
        ttft=mean([q["ttft"] for q in requests]),
        seconds=seconds,
        generated_tokens=tokens[-1],
        token_ids=[q["token_ids"] for q in last],
        texts=[q["text"] for q in last],
    )


def _round_rates(rounds: list[dict[str, Any]]) -> list[float]:
    return [
        sum(len(q["token_ids"]) for q in r["requests"]) / r["elapsed"]
        for r in rounds
        if r["elapsed"] > 0
    ]


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


def validate_prompts(prompts: Any, call: str = "run") -> list[Any]:
    """The prompts as a list; each a non-empty string or a vLLM prompt dict."""
    where = f"{call}(prompts=...)"
    if isinstance(prompts, str | bytes):
        raise ConfigError(f"{where}: expected a list of prompts, got a single string")
    if isinstance(prompts, Mapping):
        raise ConfigError(f"{where}: expected a list of prompts, got a single dict; wrap it: [p]")
    if not isinstance(prompts, Iterable):
        raise ConfigError(
            f"{where}: expected a list of prompts (strings or vLLM prompt dicts), "
            f"got {type(prompts).__name__} {prompts!r:.80}"
        )
    checked: list[Any] = list(prompts)
    if not checked:
        raise ConfigError(f"{where}: the prompt list is empty")
    for i, p in enumerate(checked):
        if not isinstance(p, str | dict) or (isinstance(p, str) and not p):
            raise ConfigError(
                f"{where}: prompt {i} must be a non-empty string or a vLLM prompt "
                f"dict, got {p!r:.80}"
            )
    return checked


def _load_tokenizer(path: Path) -> Any:
    """A ``tokenizers.Tokenizer`` from ``tokenizer.json``, or ``None`` when the package is
    missing or cannot read the file (then lengths are left to vLLM)."""
    if importlib.util.find_spec("tokenizers") is None:
        return None
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(path))
    except Exception:  # noqa: BLE001 - a check we can skip, never a reason to fail
        return None


_tokenizers: dict[Path, Any] = {}


def prompt_lengths(prompts: Sequence[Any], tokenizer_json: Path) -> list[int | None]:
    """Tokens per prompt as vLLM counts them (special tokens included): from the
    target's ``tokenizer.json`` for text, the length of ``prompt_token_ids`` for token ids;
    ``None`` where it cannot be told."""
    if tokenizer_json not in _tokenizers:
        _tokenizers[tokenizer_json] = _load_tokenizer(tokenizer_json)
    tokenizer = _tokenizers[tokenizer_json]
    texts = [p if isinstance(p, str) else p.get("prompt") for p in prompts]
    counts: dict[int, int] = {}
    wanted = [i for i, t in enumerate(texts) if isinstance(t, str)]
    if tokenizer is not None and wanted:
        encoded = tokenizer.encode_batch([texts[i] for i in wanted])
        counts = {i: len(e.ids) for i, e in zip(wanted, encoded, strict=True)}
    lengths: list[int | None] = []
    for i, p in enumerate(prompts):
        ids = p.get("prompt_token_ids") if isinstance(p, dict) else None
        lengths.append(len(ids) if isinstance(ids, list) else counts.get(i))
    return lengths


def check_lengths(
    prompts: Sequence[Any], max_tokens: int, target: EngineConfig, nodeid: str
) -> None:
    """Refuse, before any engine starts, a prompt whose tokens plus ``max_tokens`` exceed the
    target's ``max_model_len`` (vLLM would fail it after the engine starts, or cap
    ``max_tokens`` silently). Checked where the limit is known without vLLM; prompt tokens are
    counted with a local target's ``tokenizer.json``."""
    found = max_model_len(target.target, target.engine_kwargs)
    if found is None:
        return
    limit, source = found
    fix = "shorten the prompt, lower max_tokens, or raise max_model_len in engine_kwargs"
    if max_tokens >= limit:
        raise ConfigError(
            f"{nodeid}: run(max_tokens={max_tokens}): does not fit the context: max_model_len "
            f"is {limit} ({source}) and every prompt takes at least one token; {fix}"
        )
    path = tokenizer_file(target.target, target.engine_kwargs)
    if path is None:
        return
    for i, length in enumerate(prompt_lengths(prompts, path)):
        if length is not None and length + max_tokens > limit:
            raise ConfigError(
                f"{nodeid}: run(prompts=...): prompt {i} is {length} tokens (by {path}); with "
                f"max_tokens={max_tokens} it needs {length + max_tokens} positions but "
                f"max_model_len is {limit} ({source}); {fix}"
            )


def run_paired(
    pool: EnginePool,
    baseline: EngineConfig,
    speculative: EngineConfig,
    prompts: Sequence[Any],
    sampling: dict[str, Any],
    *,
    trials: int,
    warmup: int = 1,
    concurrency: int | None = None,
    timeout: float | None = None,
    progress: Progress = lambda _: None,
    stop: Callable[[list[float]], bool] | None = None,
) -> dict[str, Any]:
    """Run warm-up and ``trials`` paired rounds; returns raw rounds and counter deltas.

    With two engines resident the rounds alternate (A B A B ...) so machine drift cancels;
    with a pool of one they run one engine after the other ("sequential"). With ``stop``
    (adaptive trials), ``trials`` is the most rounds: after each round from the third on,
    ``stop(ratios)`` may end the measurement early.
    """
    __tracebackhide__ = True
    interleaved = pool.max_engines >= 2
    base_rounds: list[dict[str, Any]] = []
    spec_rounds: list[dict[str, Any]] = []
    per_round: list[SpecCounters] = []

    def gen(engine: Engine) -> dict[str, Any]:
        __tracebackhide__ = True
        return engine.generate(prompts, sampling, concurrency)

    if interleaved:
        base = pool.acquire(baseline, keep=[speculative], timeout=timeout)
        spec = pool.acquire(speculative, keep=[baseline], timeout=timeout)
        for _ in range(warmup):
            gen(base)
            gen(spec)
        memory = {"baseline": _memory(pool, base), "speculative": _memory(pool, spec)}
        before = previous = spec.spec_counters()
        for i in range(trials):
            base_rounds.append(gen(base))
            spec_rounds.append(gen(spec))
            current = spec.spec_counters()
            per_round.append(SpecCounters.delta(previous, current))
            previous = current
            progress(
                f"round {i + 1}/{trials}: baseline {base_rounds[-1]['elapsed']:.2f} s, "
                f"speculative {spec_rounds[-1]['elapsed']:.2f} s"
            )
            ratios = [
                b["elapsed"] / s["elapsed"] for b, s in zip(base_rounds, spec_rounds, strict=True)
            ]
            if stop is not None and len(ratios) >= MIN_ADAPTIVE_TRIALS and stop(ratios):
                progress(f"decided after {len(ratios)} rounds")
                break
        after = previous
        placement = spec.placement
    else:
        base = pool.acquire(baseline, timeout=timeout)
        for _ in range(warmup):
            gen(base)
        memory = {"baseline": _memory(pool, base)}
        base_rounds = [gen(base) for _ in range(trials)]
        spec = pool.acquire(speculative, timeout=timeout)
        for _ in range(warmup):
            gen(spec)
        memory["speculative"] = _memory(pool, spec)
        before = previous = spec.spec_counters()
        for _ in range(trials):
            spec_rounds.append(gen(spec))
            current = spec.spec_counters()
            per_round.append(SpecCounters.delta(previous, current))
            previous = current
        after = previous
        placement = spec.placement
        progress(f"{trials} rounds each, baseline then speculative")
    return {
        "baseline": base_rounds,
        "speculative": spec_rounds,
        "counters": SpecCounters.delta(before, after),
        "round_counters": per_round,
        "mode": "interleaved" if interleaved else "sequential",
        "memory": placement.memory,
        "engine_info": {**spec.info, "ld_preload": placement.env.get("LD_PRELOAD")},
        "memory_gib": memory,
        "kv_cache_tokens": {
            "baseline": base.info.get("kv_cache_tokens"),
            "speculative": spec.info.get("kv_cache_tokens"),
        },
        "other_traffic": getattr(base, "other_traffic", 0) + getattr(spec, "other_traffic", 0),
    }


def build_result(
    raw: dict[str, Any],
    *,
    nodeid: str,
    category: str,
    baseline: EngineConfig,
    speculative: EngineConfig,
    num_prompts: int,
    sampling: dict[str, Any],
    concurrency: int | None,
    label: str = "",
) -> Result:
    """Turn raw rounds into a :class:`Result`; fails if speculation never ran."""
    counters: SpecCounters = raw["counters"]
    if counters.num_drafts == 0:
        raise GateError(
            f"{nodeid}: speculation never ran: the speculative engine ({speculative.method}, "
            f"k={speculative.num_speculative_tokens}) proposed no draft in "
            f"{len(raw['speculative'])} rounds (vllm:spec_decode_num_drafts did not move). "
            "Check the speculative config; for ngram, the prompts need repeated n-grams."
        )
    ratios = [
        b["elapsed"] / s["elapsed"]
        for b, s in zip(raw["baseline"], raw["speculative"], strict=True)
    ]
    speedup, ci = ratio_interval(ratios)
    base = _figures(raw["baseline"])
    spec = _figures(raw["speculative"])
    memory = raw.get("memory_gib") or {}
    kv = raw.get("kv_cache_tokens") or {}
    base.memory_gib, spec.memory_gib = memory.get("baseline"), memory.get("speculative")
    base.kv_cache_tokens, spec.kv_cache_tokens = kv.get("baseline"), kv.get("speculative")
    match_rate, divergences = compare_outputs(base.token_ids, spec.token_ids)
    k = speculative.num_speculative_tokens
    per_position = counters.acceptance_per_position
    per_position += [0.0] * (k - len(per_position))
    per_round: list[SpecCounters] = raw.get("round_counters") or []
    samples = {
        "acceptance_rate": [c.acceptance_rate for c in per_round],
        "mean_acceptance_length": [c.mean_acceptance_length for c in per_round],
        "baseline_tokens_per_second": _round_rates(raw["baseline"]),
        "speculative_tokens_per_second": _round_rates(raw["speculative"]),
    }
    return Result(
        samples=samples,
        nodeid=nodeid,
        category=category,
        target=speculative.target,
        method=speculative.method,
        num_speculative_tokens=k,
        draft=speculative.draft,
        speculative_config=speculative.speculative_config or {},
        engine_kwargs=speculative.engine_kwargs,
        num_prompts=num_prompts,
        max_tokens=int(sampling["max_tokens"]),
        temperature=float(sampling["temperature"]),
        concurrency=concurrency,
        trials=len(ratios),
        mode=raw["mode"],
        memory=raw["memory"],
        speedup=speedup,
        speedup_ci=ci,
        ratios=ratios,
        acceptance_rate=counters.acceptance_rate,
        mean_acceptance_length=counters.mean_acceptance_length,
        acceptance_per_position=per_position,
        num_drafts=counters.num_drafts,
        num_draft_tokens=counters.num_draft_tokens,
        num_accepted_tokens=counters.num_accepted_tokens,
        match_rate=match_rate,
        divergences=divergences,
        baseline=base,
        speculative=spec,
        label=label,
        extra_memory_gib=(
            None
            if base.memory_gib is None or spec.memory_gib is None
            else spec.memory_gib - base.memory_gib
        ),
    )


def draft_alone(speculative: EngineConfig) -> EngineConfig | None:
    """The engine that runs the draft model by itself (to time one draft step)."""
    if speculative.method != "draft_model" or speculative.draft is None:
        return None
    return EngineConfig.create(speculative.draft, None, speculative.engine_kwargs)


def measure_draft_tpot(
    pool: EnginePool,
    speculative: EngineConfig,
    prompts: Sequence[Any],
    sampling: dict[str, Any],
    *,
    keep: Sequence[EngineConfig] = (),
    concurrency: int | None = None,
    timeout: float | None = None,
) -> float | None:
    """Time per output token of the draft model alone on the same workload (greedy)."""
    __tracebackhide__ = True
    config = draft_alone(speculative)
    if config is None:
        return None
    engine = pool.acquire(config, keep=keep, timeout=timeout)
    greedy = {**sampling, "temperature": 0.0}
    greedy.pop("structured_outputs", None)
    engine.generate(prompts, greedy, concurrency)  # warm-up
    rounds = [engine.generate(prompts, greedy, concurrency) for _ in range(2)]
    return mean([q["tpot"] for r in rounds for q in r["requests"]])


def add_theory(result: Result, cost_ratio: float | None) -> None:
    """Fill in alpha, the cost ratio, the predicted speedup and the efficiency."""
    from .theory import alpha_from_counts, predicted_speedup

    k = result.num_speculative_tokens
    counts = [round(p * result.num_drafts) for p in result.acceptance_per_position]
    result.alpha = alpha_from_counts(result.num_drafts, counts)
    result.cost_ratio = cost_ratio
    if result.alpha is not None and cost_ratio is not None and k > 0:
        result.predicted_speedup = predicted_speedup(result.alpha, k, cost_ratio)
        result.efficiency = result.speedup / result.predicted_speedup
