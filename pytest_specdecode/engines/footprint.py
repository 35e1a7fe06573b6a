"""The one extra-memory figure: what the speculative engine holds for its proposer that the
baseline engine does not.

It counts two things, both told by vLLM's own configuration of the speculative engine:

* the draft's weights: the tensors of its checkpoint (``*.safetensors``), floating ones at the
  engine's dtype and quantized ones as stored; 0 for a proposer without a model (ngram,
  ngram_gpu, suffix);
* the draft's KV cache: the bytes per token of its attention layers (vLLM's
  ``uses_draft_kv_cache()``: draft_model, EAGLE, MTP, ...) times the KV cache tokens the
  speculative engine holds (vLLM gives every layer, target and draft, the same number of
  token slots); 0 for a proposer without attention layers.

It does not count process memory (the Python heap, the allocator's caches, the proposer's
small buffers such as n-gram's token arrays): measured as a process RSS difference, that is
noise of a tenth of a GiB either way on a CPU, larger than a small draft. Nor does it say what
the draft costs in KV capacity on a fixed KV budget (``kv_cache_memory_bytes``, the CPU
default): there the draft's KV cache comes out of the same budget, which the KV cache tokens of
the two engines show.

An MTP draft with no ``model`` is layers of the target's own checkpoint, which the target
engine skips on load: its weights are the tensors of those layers (:func:`mtp_layer_bytes`),
less the embedding and output head vLLM shares with the target. Another draft whose layers ship
inside the target (dspark with no ``model``) is not told apart from the target's files: its
figure is unknown (None).

:func:`proposer_footprint` runs in the engine worker, on the ``VllmConfig`` of the started
engine (duck-typed: this module imports no vLLM); :class:`ProposerMemory` turns what it
reported into the figure, in the measuring process.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .methods import has_model, is_mtp

#: Bytes per element of the safetensors dtypes.
_SAFETENSORS_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I64": 8, "U64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip

#: Floating dtypes, which vLLM casts to the engine's dtype on load.
_FLOATING = frozenset({"F64", "F32", "F16", "BF16"})


def _header(path: Path) -> dict[str, Any]:
    """The JSON header of a ``.safetensors`` file (8-byte little-endian length, then JSON)."""
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        data = json.loads(f.read(length))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a safetensors header")
    return data


def _tensor_bytes(tensor: Mapping[str, Any], dtype_bytes: int) -> int:
    """Bytes one tensor of a safetensors header takes once loaded (see
    :func:`checkpoint_bytes`)."""
    numel = 1
    for dim in tensor["shape"]:
        numel *= int(dim)
    if str(tensor["dtype"]) in _FLOATING:
        return numel * dtype_bytes
    start, end = tensor["data_offsets"]
    return int(end) - int(start)


def _tensors_bytes(
    folder: str | os.PathLike[str], dtype_bytes: int, keep: Any = None
) -> int | None:
    """Bytes of the tensors of ``folder``'s ``*.safetensors`` files whose name ``keep``
    accepts (all when None); None when there is no file or one cannot be read."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    try:
        for path in files:
            for name, tensor in _header(path).items():
                if name != "__metadata__" and (keep is None or keep(name)):
                    total += _tensor_bytes(tensor, dtype_bytes)
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
    return total


def checkpoint_bytes(folder: str | os.PathLike[str], dtype_bytes: int) -> int | None:
    """Bytes the tensors of ``folder``'s ``*.safetensors`` files take once loaded: floating
    tensors at ``dtype_bytes`` per element (the engine's dtype), others as stored. ``None``
    when the folder holds no safetensors file or one cannot be read."""
    return _tensors_bytes(folder, dtype_bytes)


#: A decoder layer's number in a tensor name (``model.layers.61.mlp...``).
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")

#: Parts of an MTP layer that vLLM's proposer replaces with the target's own
#: (``_maybe_share_embeddings``, ``_maybe_share_lm_head`` of v1/spec_decode/llm_base_proposer.py
#: in vLLM 0.32: an MTP draft always shares them).
_SHARED = ("embed_tokens.weight", "shared_head.head.weight", "lm_head.weight")


def is_mtp_tensor(name: str, target_layers: int) -> bool:
    """Whether tensor ``name`` of a target checkpoint belongs to its MTP layers, as the
    checkpoints vLLM 0.32 loads them name them: a part named ``mtp*`` (MiMo's
    ``model.mtp_layers.0.*``, Qwen3-Next's ``mtp.*``) or a decoder layer numbered from the
    target's ``target_layers`` on (DeepSeek-V3's ``model.layers.61.*``, GLM-4.5, ERNIE)."""
    if name.endswith(_SHARED):
        return False
    if any(part.startswith("mtp") for part in name.split(".")):
        return True
    found = _LAYER.search(name)
    return found is not None and int(found.group(1)) >= target_layers


def mtp_layer_bytes(
    folder: str | os.PathLike[str], target_layers: int, dtype_bytes: int
) -> int | None:
    """Bytes of the MTP layers in the target checkpoint ``folder`` (:func:`is_mtp_tensor`),
    cast as :func:`checkpoint_bytes` casts; None when there are none or the files cannot be
    read."""
    total = _tensors_bytes(folder, dtype_bytes, lambda name: is_mtp_tensor(name, target_layers))
    return total or None


def _local_folder(model: str, revision: str | None) -> Path | None:
    """The folder of a local model, or of a hub model already in the Hugging Face cache."""
    path = Path(os.path.expanduser(model))
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        found = snapshot_download(
            model, revision=revision, allow_patterns=["*.safetensors"], local_files_only=True
        )
    except Exception:  # noqa: BLE001 - not cached, no hub package: the figure is unknown
        return None
    return Path(found)


def _dtype_bytes(dtype: Any) -> int:
    """Bytes per element of a torch dtype (``itemsize``) or a KV cache dtype name."""
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int):
        return size
    name = str(dtype)
    return 1 if "fp8" in name or "int8" in name else 4 if "32" in name else 2


def kv_bytes_per_token(model_config: Any, parallel_config: Any, cache_dtype: str) -> int:
    """KV cache bytes one token takes in the attention layers of ``model_config`` (vLLM's
    ``ModelConfig``): keys and values per layer (one latent vector with MLA)."""
    layers = int(model_config.get_num_layers(parallel_config))
    heads = int(model_config.get_num_kv_heads(parallel_config))
    size = int(model_config.get_head_size())
    dtype = model_config.dtype if cache_dtype in ("auto", "", None) else cache_dtype
    per_layer = heads * size * (1 if getattr(model_config, "use_mla", False) else 2)
    return layers * per_layer * _dtype_bytes(dtype)


def proposer_footprint(vllm_config: Any) -> dict[str, Any]:
    """What the speculative engine configured by ``vllm_config`` holds for its proposer, as
    plain values for the worker to report: ``weights_bytes`` (None when unknown),
    ``kv_bytes_per_token`` and ``why`` (how they were told)."""
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is None:
        return {"weights_bytes": 0, "kv_bytes_per_token": 0, "why": "no speculation"}
    draft = getattr(spec, "draft_model_config", None)
    target = vllm_config.model_config
    kv = 0
    if spec.uses_draft_kv_cache() and draft is not None:
        kv = kv_bytes_per_token(
            draft, spec.draft_parallel_config, str(vllm_config.cache_config.cache_dtype)
        )
    if draft is None or draft is target or not has_model(spec.method):
        return {"weights_bytes": 0, "kv_bytes_per_token": kv, "why": f"{spec.method}: no model"}
    if draft.model == target.model and is_mtp(spec.method):
        return _mtp_footprint(target, draft, kv)
    if draft.model == target.model:
        return {
            "weights_bytes": None,
            "kv_bytes_per_token": kv,
            "why": f"{spec.method}: the draft layers ship inside the target's checkpoint",
        }
    folder = _local_folder(str(draft.model), getattr(draft, "revision", None))
    weights = checkpoint_bytes(folder, _dtype_bytes(draft.dtype)) if folder else None
    why = f"{spec.method}: weights of {draft.model}"
    if weights is None:
        why += " unknown (no safetensors files found)"
    return {"weights_bytes": weights, "kv_bytes_per_token": kv, "why": why}


def _mtp_footprint(target: Any, draft: Any, kv: int) -> dict[str, Any]:
    """An MTP draft read from the target's own checkpoint: its MTP layers' tensors."""
    text = getattr(target, "hf_text_config", None) or getattr(target, "hf_config", None)
    layers = getattr(text, "num_hidden_layers", None)
    folder = _local_folder(str(target.model), getattr(target, "revision", None))
    weights = None
    if isinstance(layers, int) and folder is not None:
        weights = mtp_layer_bytes(folder, layers, _dtype_bytes(draft.dtype))
    why = "mtp: the MTP layers of the target's checkpoint"
    if weights is None:
        why += " unknown (no MTP tensors found in its safetensors files)"
    return {"weights_bytes": weights, "kv_bytes_per_token": kv, "why": why}


@dataclass(frozen=True)
class ProposerMemory:
    """The extra-memory figure of one speculative engine: its draft's weights plus its
    draft's KV cache (see the module docstring for what is and is not counted)."""

    weights_bytes: int | None
    kv_bytes_per_token: int | None
    kv_cache_tokens: int | None  # the speculative engine's KV cache capacity

    @classmethod
    def of(cls, reported: Mapping[str, Any] | None, kv_cache_tokens: int | None) -> ProposerMemory:
        """From what the worker reported (:func:`proposer_footprint`); all unknown when it
        reported nothing (a served engine, an older worker)."""
        reported = reported or {}
        weights, per_token = reported.get("weights_bytes"), reported.get("kv_bytes_per_token")
        return cls(
            None if weights is None else int(weights),
            None if per_token is None else int(per_token),
            kv_cache_tokens,
        )

    @property
    def kv_bytes(self) -> int | None:
        """The draft's KV cache: 0 without draft attention layers, else per token times the
        engine's tokens (None when either is unknown)."""
        if self.kv_bytes_per_token == 0:
            return 0
        if self.kv_bytes_per_token is None or self.kv_cache_tokens is None:
            return None
        return self.kv_bytes_per_token * self.kv_cache_tokens

    @property
    def gib(self) -> float | None:
        """The figure, in GiB: weights plus KV cache; None when either is unknown."""
        kv = self.kv_bytes
        if self.weights_bytes is None or kv is None:
            return None
        return (self.weights_bytes + kv) / 2**30

    def note(self) -> str:
        """What the figure counts, in words with the parts."""
        weights = "unknown" if self.weights_bytes is None else f"{self.weights_bytes / 2**30:.4f}"
        kv = self.kv_bytes
        if kv is None:
            kv_text = "draft KV cache unknown"
        elif kv == 0:
            kv_text = "draft KV cache 0 (no draft attention layers)"
        else:
            kv_text = (
                f"draft KV cache {kv / 2**30:.4f} GiB ({self.kv_cache_tokens:,} tokens x "
                f"{self.kv_bytes_per_token:,} B)"
            )
        return f"draft weights {weights} GiB + {kv_text}; process memory (RSS) is not counted"
