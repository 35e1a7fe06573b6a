"""The draft/target cost ratio c: the draft model timed alone on the same workload."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..engines.config import EngineConfig
from ..engines.protocol import EngineSource
from .stats import mean

#: Time per token of each draft model alone, per engine source and draft configuration: timed
#: once for every run that shares the engines.
_timed: weakref.WeakKeyDictionary[EngineSource, dict[str, float | None]] = (
    weakref.WeakKeyDictionary()
)


def draft_alone(speculative: EngineConfig) -> EngineConfig | None:
    """The engine that runs the draft model by itself (to time one draft step)."""
    if speculative.method != "draft_model" or speculative.draft is None:
        return None
    return EngineConfig.create(
        speculative.draft, None, speculative.engine_kwargs, role="draft model alone"
    )


def measure_draft_tpot(
    source: EngineSource,
    speculative: EngineConfig,
    prompts: Sequence[Any],
    sampling: Mapping[str, Any],
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
    engine = source.acquire(config, keep=keep, timeout=timeout)
    greedy = {k: v for k, v in sampling.items() if k != "structured_outputs"}
    greedy["temperature"] = 0.0
    engine.generate_round(prompts, greedy, concurrency)  # warm-up
    rounds = [engine.generate_round(prompts, greedy, concurrency) for _ in range(2)]
    return mean([q.tpot for r in rounds for q in r.requests])


def draft_tpot(
    source: EngineSource,
    speculative: EngineConfig,
    prompts: Sequence[Any],
    sampling: Mapping[str, Any],
    progress: Callable[[str], None] = lambda _: None,
    **kwargs: Any,
) -> float | None:
    """:func:`measure_draft_tpot`, once per source and draft configuration."""
    __tracebackhide__ = True
    config = draft_alone(speculative)
    if config is None:
        return None
    cache = _timed.setdefault(source, {})
    if config.key not in cache:
        progress(f"timing the draft {speculative.draft} alone for the cost ratio")
        cache[config.key] = measure_draft_tpot(source, speculative, prompts, sampling, **kwargs)
    return cache[config.key]
