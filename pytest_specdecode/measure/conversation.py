"""Multi-turn conversations (``Bench.conversation``): the conversations checked before any
engine starts, each turn's prompts through the model's chat template with the answers to the
turns before it, and how much of a turn's first sending each engine's prefix cache held.

Turn n + 1 carries the answers the *baseline* engine gave in turn n (its last measured round),
on both sides: the same history makes turn n + 1 a paired comparison of the same prompts, and
the baseline's output is the reference output (the speculative engine's is the same where
speculation is lossless: the match rate says so).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ..engines.config import EngineConfig
from ..engines.protocol import Counters, EngineBackend
from ..errors import ConfigError
from .cache import rates_text
from .paired import counting
from .warmup import warm_up

#: The note a turn's result carries: each side's prefix-cache hit rate over the turn's first
#: sending (its warm-up round), what the turns before it left in the cache.
FIRST_SEND_NOTE = "first-send cache hit"


def check_conversations(
    conversations: Any, turns: Any, run_kwargs: Collection[str] = ()
) -> tuple[list[tuple[str, ...]], int]:
    """The conversations as tuples of user messages, and the turns to run (``turns``, or
    every conversation's turns when they all have as many); errors name the conversation and
    the fix. ``run_kwargs``: the other keywords, which may not hold ``warmup`` or
    ``prompts``."""
    for bad, why in (
        ("warmup", "each turn is sent once, unmeasured, before its rounds (its first sending, "
         "whose cache hit rate the result notes); leave warmup out"),
        ("prompts", "the prompts are the conversations' turns; pass conversations="),
    ):  # fmt: skip
        if bad in run_kwargs:
            raise ConfigError(f"conversation({bad}=...): {why}")
    where = "conversation(conversations=...)"
    shape = (
        "a list of conversations, each a list of user messages (e.g. prompts.standard_"
        'conversations("mt-bench", n=4) or prompts.conversations_from_file(path))'
    )
    if isinstance(conversations, str | bytes | Mapping) or not isinstance(conversations, Sequence):
        raise ConfigError(f"{where}: expected {shape}, got {conversations!r:.80}")
    if not conversations:
        raise ConfigError(f"{where}: the list of conversations is empty; expected {shape}")
    checked: list[tuple[str, ...]] = []
    for i, conversation in enumerate(conversations):
        if isinstance(conversation, str):
            raise ConfigError(
                f"{where}: conversation {i} is a single text; give each conversation as a list "
                f"of its user messages, e.g. [[{conversation!r:.40}]] for one turn"
            )
        if not isinstance(conversation, Sequence) or not conversation:
            raise ConfigError(
                f"{where}: conversation {i} must be a non-empty list of user messages, got "
                f"{conversation!r:.80}"
            )
        for j, message in enumerate(conversation):
            if not isinstance(message, str) or not message:
                raise ConfigError(
                    f"{where}: conversation {i}, turn {j + 1} must be a non-empty text (the "
                    f"user's message; the answers are the baseline engine's), got {message!r:.80}"
                )
        checked.append(tuple(conversation))
    fewest = min(len(c) for c in checked)
    if turns is None:
        if any(len(c) != fewest for c in checked):
            counts = sorted({len(c) for c in checked})
            raise ConfigError(
                f"{where}: the conversations have {', '.join(map(str, counts))} turns; pass "
                f"turns= (at most {fewest}, the shortest's) to run that many turns of each"
            )
        return checked, fewest
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        raise ConfigError(f"conversation(turns=...): expected a positive integer, got {turns!r}")
    short = [i for i, c in enumerate(checked) if len(c) < turns]
    if short:
        raise ConfigError(
            f"conversation(turns={turns}): conversation {short[0]} has "
            f"{len(checked[short[0]])} turn(s); lower turns to at most {fewest}, or leave out "
            f"the conversations with fewer turns ({len(short)} of {len(checked)})"
        )
    return checked, turns


def template_model(
    tokenizer: str | os.PathLike[str] | None, baseline: EngineConfig, served: bool
) -> str:
    """Whose chat template renders the turns: ``tokenizer``, else the engines' tokenizer
    (``engine_kwargs["tokenizer"]``, else the target); a served pair without a target must
    name it."""
    if tokenizer is not None:
        return os.fspath(tokenizer)
    named = (baseline.engine_kwargs or {}).get("tokenizer")
    if isinstance(named, str | os.PathLike) and os.fspath(named):
        return os.fspath(named)
    if baseline.target:
        return baseline.target
    assert served  # a local pair always has a target
    raise ConfigError(
        "conversation(): each turn is rendered here through the model's chat template, so "
        "that both servers get the same prompt; two servers without a target name no template. "
        "Pass tokenizer= (the served model's folder, or its name in the local Hugging Face "
        "cache), or the target (--specdecode-target, Bench(target=...))"
    )


def turn_messages(
    conversation: Sequence[str], answers: Sequence[str], turn: int
) -> list[dict[str, str]]:
    """The messages of ``turn`` (1-based): each earlier user message followed by its answer,
    then the turn's user message."""
    messages: list[dict[str, str]] = []
    for user, answer in zip(conversation[: turn - 1], answers, strict=True):
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    return [*messages, {"role": "user", "content": conversation[turn - 1]}]


def render(
    model: str,
    conversations: Sequence[Sequence[str]],
    answers: Sequence[Sequence[str]],
    turn: int,
    *,
    system: str | None,
    tokenize: bool,
    template_kwargs: Mapping[str, Any],
) -> list[Any]:
    """Each conversation's prompt for ``turn`` through ``model``'s chat template
    (:func:`~pytest_specdecode.workloads.chat`): token prompts (``tokenize``; the template's
    special tokens are not added again; a server gets the token ids too) or texts."""
    from ..workloads import chat

    if not isinstance(template_kwargs, Mapping):
        raise ConfigError(
            "conversation(chat_template_kwargs=...): expected a dict of template variables, "
            f"e.g. {{'enable_thinking': False}}, got {template_kwargs!r:.80}"
        )
    items = [turn_messages(c, a, turn) for c, a in zip(conversations, answers, strict=True)]
    return chat(model, items, system=system, tokenize=tokenize, **template_kwargs)


def first_send(
    base: EngineBackend,
    spec: EngineBackend,
    prompts: Sequence[Any],
    sampling: Mapping[str, Any],
    concurrency: int | None,
) -> dict[str, Counters]:
    """Each engine's counters over its warm-up round of ``prompts`` (the turn's first sending:
    its prefix cache holds what the earlier turns left, not yet this turn's prompts)."""
    seen: dict[str, Counters] = {}
    for role, engine in (("baseline", base), ("speculative", spec)):
        before = engine.counters()
        warm_up(engine, prompts, sampling, concurrency)
        seen[role] = engine.counters().since(before, counting(engine, role))
    return seen


def first_send_note(seen: Mapping[str, Counters]) -> str:
    """``0.62 baseline, 0.61 speculative``: each side's hit rate over the first sending."""
    return rates_text(
        seen["baseline"].prefix_cache_hit_rate, seen["speculative"].prefix_cache_hit_rate
    )
