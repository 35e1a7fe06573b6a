"""Warm-up rounds: a full round on an engine's first use, a short one after that.

A warm-up round sends the measured prompts, unmeasured, so that vLLM's prefix cache holds
them for every measured round alike and every path (prefill, decode, drafting, verification)
has run. An engine's first round after its start pays first-use costs as well, so it gets the
full round; on an engine that has served a warm-up before, :data:`SHORT_TOKENS` new tokens per
prompt do the same job: on the tiny pair, speedups after a short warm-up differed from those
after a full one by +0.6% (95% CI -0.9% to +2.2%; ``benchmarks/warmup.py``, docs/validation.md
"Warm-up"), at a fifth of its time.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from ..engines.protocol import EngineBackend, Round

#: New tokens per prompt of a warm-up round on an engine that has been warmed up before.
SHORT_TOKENS = 8

#: Engines that have served a warm-up round (a restarted engine is a new object).
_warmed: weakref.WeakSet[Any] = weakref.WeakSet()


def short(sampling: Mapping[str, Any]) -> dict[str, Any]:
    """``sampling`` with at most :data:`SHORT_TOKENS` new tokens (and no more minimum)."""
    out = dict(sampling)
    for key in ("max_tokens", "min_tokens"):
        if isinstance(out.get(key), int):
            out[key] = min(out[key], SHORT_TOKENS)
    if "max_tokens" not in out:
        out["max_tokens"] = SHORT_TOKENS
    return out


def warm_up(
    engine: EngineBackend,
    prompts: Sequence[Any],
    sampling: Mapping[str, Any],
    concurrency: int | None = None,
) -> Round:
    """One unmeasured round of ``prompts``: full on the engine's first warm-up, short after."""
    __tracebackhide__ = True
    try:
        first = engine not in _warmed
    except TypeError:  # an engine that cannot be weakly referenced: always a full round
        first = True
    done = engine.generate_round(prompts, sampling if first else short(sampling), concurrency)
    try:
        _warmed.add(engine)
    except TypeError:
        pass
    return done
