"""Checks on what a run is given, made before any engine starts."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..engines.config import EngineConfig
from ..engines.model_folder import max_model_len, tokenizer_file
from ..errors import ConfigError


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


def structured_outputs(json_schema: Any, num_prompts: int) -> Any:
    """vLLM's ``structured_outputs`` for ``run(json_schema=...)``: one JSON Schema (a dict)
    for every prompt, or a list of them, one per prompt."""
    if json_schema is None:
        return None
    if isinstance(json_schema, Mapping):
        return {"json": dict(json_schema)}
    if isinstance(json_schema, list | tuple):
        if len(json_schema) != num_prompts:
            raise ConfigError(
                f"run(json_schema=...): {len(json_schema)} schemas for {num_prompts} "
                "prompts; give one schema, or one per prompt"
            )
        for i, schema in enumerate(json_schema):
            if not isinstance(schema, Mapping):
                raise ConfigError(
                    f"run(json_schema=...): schema {i} must be a JSON Schema (a dict), got "
                    f"{type(schema).__name__} {schema!r:.60}"
                )
        return [{"json": dict(schema)} for schema in json_schema]
    hint = " (parse a JSON text with json.loads first)" if isinstance(json_schema, str) else ""
    raise ConfigError(
        f"run(json_schema=...): expected a JSON Schema (a dict) or a list of them, one per "
        f"prompt; got {type(json_schema).__name__} {json_schema!r:.60}{hint}"
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_run_args(max_tokens: Any, temperature: Any, concurrency: Any) -> None:
    """The numbers ``run()`` takes: a positive ``max_tokens``, a finite ``temperature`` >= 0
    and a positive ``concurrency`` (or None)."""
    if not _is_int(max_tokens) or max_tokens < 1:
        raise ConfigError(f"run(max_tokens=...): expected a positive integer, got {max_tokens!r}")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not 0 <= temperature < math.inf
    ):
        raise ConfigError(
            f"run(temperature=...): expected a finite number >= 0 (0: greedy), got "
            f"{temperature!r:.40}"
        )
    if concurrency is not None and (not _is_int(concurrency) or concurrency < 1):
        raise ConfigError(f"run(concurrency=...): expected a positive integer, got {concurrency!r}")


def check_sampling_temperature(temperature: Any) -> None:
    """``sample_equivalence()``'s temperature: a number > 0."""
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or temperature <= 0
    ):
        raise ConfigError(
            f"sample_equivalence(temperature=...): expected a number > 0, got {temperature!r};"
            " at temperature 0 use run() and exact matching"
        )


def check_axes(call: str, **axes: list[Any]) -> None:
    """A grid's axes (``sweep``'s k and concurrency): distinct positive integers each."""
    for name, values in axes.items():
        if not values or any(not _is_int(v) or v < 1 for v in values):
            raise ConfigError(f"{call}({name}=...): expected positive integers, got {values!r}")
        if len(set(values)) != len(values):
            raise ConfigError(f"{call}({name}=...): a value is listed twice in {values!r}")


def label_prefix(call: str, label: Any) -> str:
    """``label`` (a non-empty string) and a space, put before each of ``call``'s own
    labels; ``""`` without one."""
    if label is None:
        return ""
    if not isinstance(label, str) or not label.strip():
        raise ConfigError(
            f'{call}(label=...): expected a non-empty string, e.g. label="long", got {label!r:.80}'
        )
    return f"{label} "


def cycled(prompts: Sequence[Any], n: int) -> list[Any]:
    """``n`` prompts: ``prompts`` repeated in order (request i carries ``prompts[i % len]``)."""
    return [prompts[i % len(prompts)] for i in range(n)]
