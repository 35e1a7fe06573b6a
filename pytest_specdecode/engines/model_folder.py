"""What a local model folder tells without vLLM: whether a reference is a local folder, whether
that folder holds a model, its context length and its tokenizer file (``config.json`` and
``tokenizer.json`` read with :mod:`json`). Shared by the engine configuration's checks
(:mod:`.config`) and the draft-to-target checks (:mod:`.compat`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError


def looks_local(model: str) -> bool:
    """Whether a model reference is meant as a local folder (not a hub name like org/name)."""
    return model.startswith(("/", "./", "../", "~")) or os.path.exists(os.path.expanduser(model))


def _model_config(model: str) -> dict[str, Any]:
    """The ``config.json`` of a local model folder, or ``{}`` when unreadable."""
    config = Path(os.path.expanduser(model)) / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


#: The files that make a folder a model vLLM can load: a Hugging Face ``config.json``, or a
#: Mistral-format ``params.json``.
_MODEL_CONFIG_FILES = ("config.json", "params.json")


def check_model_path(model: str, source: str) -> None:
    """A local model reference must be an existing folder holding a ``config.json`` (or a
    GGUF file, which vLLM loads by path)."""
    if not looks_local(model):
        return
    path = Path(os.path.expanduser(model))
    if not path.exists():
        raise ConfigError(
            f"{source}: model folder {model!r} does not exist; give an existing local folder "
            "or a model name vLLM can load"
        )
    if not path.is_dir():
        if path.suffix == ".gguf":
            return
        raise ConfigError(
            f"{source}: model folder {model!r} is a file, not a folder; give the folder that "
            "holds the model's config.json, weights and tokenizer files"
        )
    if not any((path / name).is_file() for name in _MODEL_CONFIG_FILES):
        raise ConfigError(
            f"{source}: model folder {model!r} holds no config.json; a model folder holds "
            "config.json, the weights (*.safetensors) and the tokenizer files, as saved by "
            "save_pretrained() or downloaded from the Hugging Face hub"
        )


#: Keys of a Hugging Face config from which vLLM derives the context length (the smallest).
_CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


#: RoPE types whose ``max_position_embeddings`` vLLM takes as the length as it stands.
_UNSCALED = (None, "default", "llama3", "yarn", "deepseek_yarn")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def max_model_len(target: str, engine_kwargs: dict[str, Any]) -> tuple[int, str] | None:
    """The engine's context length and where it comes from, when known without vLLM:
    ``max_model_len`` in ``engine_kwargs``, else what vLLM derives from a local target's
    ``config.json``. ``None`` when it cannot be told (hub model, RoPE scaling, overrides)."""
    given = engine_kwargs.get("max_model_len")
    if given is not None:
        if _is_int(given) and given > 0:
            return given, "max_model_len in engine_kwargs"
        return None  # -1 (fit to memory), "4k": vLLM's to interpret
    if not looks_local(target) or "hf_overrides" in engine_kwargs:
        return None
    found = config_context(_model_config(target))
    if found is None:
        return None
    return found[0], f"{found[1]} in {os.path.join(target, 'config.json')}"


def config_context(data: Mapping[str, Any]) -> tuple[int, str] | None:
    """The context length vLLM derives from a ``config.json`` and the key it comes from;
    ``None`` when none is given or RoPE scaling may change it."""
    nested = data.get("text_config")
    text: Mapping[str, Any] = nested if isinstance(nested, dict) else data
    for rope_key in ("rope_scaling", "rope_parameters"):
        rope = text.get(rope_key)
        if isinstance(rope, dict) and rope.get("rope_type", rope.get("type")) not in _UNSCALED:
            return None  # vLLM may scale the length by the RoPE factor: leave that to it
    found = {k: text[k] for k in _CONTEXT_KEYS if _is_int(text.get(k)) and text[k] > 0}
    if not found:
        return None
    key = "model_max_length" if "model_max_length" in found else min(found, key=found.__getitem__)
    return found[key], key


def tokenizer_file(target: str, engine_kwargs: dict[str, Any]) -> Path | None:
    """The ``tokenizer.json`` vLLM's tokenizer is built from, when it is a local file that the
    ``tokenizers`` package reads as vLLM would (no Mistral tokenizer, no skipped init)."""
    if engine_kwargs.get("skip_tokenizer_init") or engine_kwargs.get("tokenizer_mode") not in (
        None,
        "auto",
        "hf",
    ):
        return None
    folder = str(engine_kwargs.get("tokenizer") or target)
    if not looks_local(folder):
        return None
    path = Path(os.path.expanduser(folder)) / "tokenizer.json"
    return path if path.is_file() else None
