"""Synthetic EAGLE head folders for the checks made of a head before any engine starts
(``engines/compat.py``): a ``config.json`` and a valid ``model.safetensors`` of zeros whose
tensor names and shapes are those vLLM 0.32's loaders take (``llama_eagle.py``,
``llama_eagle3.py``)."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: bytes per element of the dtypes written
_SIZES = {"F16": 2, "I64": 8, "BOOL": 1}


def write_safetensors(folder: Path, shapes: Mapping[str, Sequence[int]]) -> None:
    """``folder/model.safetensors``: zeros of ``shapes`` (F16; ``d2t`` I64, ``t2d`` BOOL as
    real heads store them)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        dtype = {"d2t": "I64", "t2d": "BOOL"}.get(name, "F16")
        size = _SIZES[dtype] * math.prod(shape)
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def _layer(
    prefix: str, hidden: int, inputs: int, heads: int, kv: int, inter: int
) -> dict[str, list[int]]:
    head_dim = hidden // heads
    return {
        f"{prefix}.self_attn.q_proj.weight": [heads * head_dim, inputs],
        f"{prefix}.self_attn.k_proj.weight": [kv * head_dim, inputs],
        f"{prefix}.self_attn.v_proj.weight": [kv * head_dim, inputs],
        f"{prefix}.self_attn.o_proj.weight": [hidden, heads * head_dim],
        f"{prefix}.mlp.gate_proj.weight": [inter, hidden],
        f"{prefix}.mlp.up_proj.weight": [inter, hidden],
        f"{prefix}.mlp.down_proj.weight": [hidden, inter],
        f"{prefix}.input_layernorm.weight": [hidden],
        f"{prefix}.post_attention_layernorm.weight": [hidden],
    }


def eagle3_weights(
    config: Mapping[str, Any],
    *,
    target_hidden: int | None = None,
    aux: int = 3,
    layer: str = "midlayer",
    d2t: int | None = None,
) -> dict[str, list[int]]:
    """An EAGLE-3 head's tensors (llama_eagle3.py): ``fc`` from ``aux`` target hidden states,
    one decoder layer named ``layer`` (``midlayer`` as EAGLE's trainer saves it, ``layers.0``
    as speculators does) reading the embedding and the fused state, no ``embed_tokens`` (vLLM
    shares the target's), and ``d2t``/``t2d`` when the draft vocabulary is smaller."""
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    draft_vocab = config.get("draft_vocab_size") or vocab
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    shapes = {"fc.weight": [hidden, aux * (target_hidden or hidden)]}
    shapes |= _layer(layer, hidden, 2 * hidden, heads, kv, config["intermediate_size"])
    shapes |= {f"{layer}.hidden_norm.weight": [hidden], "norm.weight": [hidden]}
    shapes["lm_head.weight"] = [draft_vocab, hidden]
    if draft_vocab != vocab or d2t is not None:
        shapes |= {"d2t": [d2t or draft_vocab], "t2d": [vocab]}
    return shapes


def eagle1_weights(config: Mapping[str, Any]) -> dict[str, list[int]]:
    """An EAGLE-1 head's tensors (llama_eagle.py): ``fc`` from the token embedding and one
    hidden state (2 x hidden_size), one decoder layer, its own ``embed_tokens``."""
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    shapes = {"embed_tokens.weight": [config["vocab_size"], hidden]}
    shapes["fc.weight"] = [hidden, 2 * hidden]
    shapes |= _layer("layers.0", hidden, hidden, heads, kv, config["intermediate_size"])
    return shapes


def llm_weights(config: Mapping[str, Any]) -> dict[str, list[int]]:
    """A complete causal LM's tensors (``model.*`` and ``lm_head``): no ``fc``."""
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "model.norm.weight": [hidden]}
    for i in range(config["num_hidden_layers"]):
        shapes |= _layer(
            f"model.layers.{i}", hidden, hidden, heads, kv, config["intermediate_size"]
        )
    shapes["lm_head.weight"] = [vocab, hidden]
    return shapes


def head_folder(
    root: Path, name: str, config: Mapping[str, Any], weights: Mapping[str, Sequence[int]] | None
) -> str:
    """``root/name`` with ``config.json`` and, unless ``weights`` is None, model.safetensors."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    if weights is not None:
        write_safetensors(folder, weights)
    return str(folder)


def llama_head_config(target: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    """A one-layer Llama head config for ``target`` (its attention shape and vocabulary),
    updated by ``fields`` (None values removed)."""
    keep = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "vocab_size", "rms_norm_eps", "max_position_embeddings", "model_type")  # fmt: skip
    config = {k: target[k] for k in keep if k in target} | {"num_hidden_layers": 1}
    return {k: v for k, v in (config | fields).items() if v is not None}


def speculators_config(
    layer: Mapping[str, Any], verifier: str, arch: str = "LlamaForCausalLM", **top: Any
) -> dict[str, Any]:
    """A speculators-format head config: ``layer`` nested as ``transformer_layer_config``,
    ``top`` at the top level (draft_vocab_size, target_hidden_size, aux layer ids, ...)."""
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "transformer_layer_config": dict(layer),
        "speculators_config": {
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
            "verifier": {"name_or_path": verifier, "architectures": [arch]},
        },
        **top,
    }
