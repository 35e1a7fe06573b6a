"""A tiny MiMo target with one MTP layer, for vLLM's ``"method": "mtp"`` on a CPU.

``tiny_models().mtp_target`` is built on first use by :func:`build_mtp_target`, from a seed and
the committed target's tokenizer: no download and no committed weights. vLLM 0.32 runs MTP
for a ``MiMoForCausalLM`` target (a Qwen2-shaped decoder; vLLM's ``SpeculativeConfig`` turns
it into a ``MiMoMTPModel`` draft reading the ``model.mtp_layers.*`` weights of the same
checkpoint), so the speculative config names no ``model``::

    {"method": "mtp", "num_speculative_tokens": 3}

**How the weights are constructed** (not trained, and not fitted to any acceptance figure):

- The target is a lookup table. Its embedding rows are seeded Gaussian vectors; the ordinary
  tokens (all but ``<s>``, ``</s>``, ``<unk>``) are put in one random cycle σ, and the
  ``lm_head`` row of σ(t) is twice token t's embedding direction (the special tokens' rows are
  zero, so they are never chosen). After token t the target's greedy choice is σ(t): in 128
  dimensions another token's embedding direction is far from t's.
- Its :data:`LAYERS` decoder layers have seeded random attention and MLP weights (real work
  per step) but zero ``o_proj`` and ``down_proj``: they write nothing into the residual stream,
  as the padding layers of the tiny target do (:func:`~.build.pad_llama`). The target's final
  state is token t's normalised embedding, whatever came before it.
- The MTP layer is built the same way, and its ``input_proj`` passes the token embedding it is
  given and drops the target's hidden state (``[0 | I]``). Given the next token t' it says
  σ(t'), which is what the target says next. So the MTP layer agrees with the target by
  construction, at every draft position, in greedy decoding.

It is a mechanism check, not a language model: its text is one fixed random sequence of the
vocabulary. Transformers 5.19 has no MiMo configuration, so ``model_type`` is ``qwen2``; vLLM
picks the MTP draft by ``architectures[0]``.

This module imports torch only inside :func:`build_mtp_target`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

__all__ = ["CONFIG", "LAYERS", "SEED", "build_mtp_target", "mtp_hash"]

#: Seed of the ``torch.Generator`` that draws every weight.
SEED = 5

#: Decoder layers of the target (the MTP layer comes on top of them).
LAYERS = 8

#: Tokens ``<s>``, ``</s>`` and ``<unk>`` of the tiny tokenizer (ids 0-2): never the target's
#: choice.
SPECIAL_TOKENS = 3

#: Scale of the ``lm_head`` rows: the chosen token's logit is ``2 * sqrt(hidden_size)``.
LOGIT_SCALE = 2.0

#: ``config.json`` of the tiny MiMo target.
CONFIG: dict[str, Any] = {
    "architectures": ["MiMoForCausalLM"],
    "model_type": "qwen2",
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "dtype": "float32",
    "num_nextn_predict_layers": 1,
}

#: Files copied from the committed target (the shared tokenizer).
_COPIED = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def mtp_hash(tokenizer_dir: Path) -> str:
    """A short hash of this builder's source and the tokenizer files (names the cache folder)."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for name in _COPIED:
        h.update(name.encode())
        h.update((tokenizer_dir / name).read_bytes())
    return h.hexdigest()[:12]


def _weights() -> dict[str, Any]:
    """The state dict, as the module docstring says."""
    import torch

    c = CONFIG
    hidden, inter, vocab = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    width = c["num_attention_heads"] * c["head_dim"]
    kv_width = c["num_key_value_heads"] * c["head_dim"]
    g = torch.Generator().manual_seed(SEED)

    def randn(*shape: int, std: float = 1.0) -> Any:
        return torch.randn(*shape, generator=g, dtype=torch.float32) * std

    embed = randn(vocab, hidden)
    order = torch.randperm(vocab - SPECIAL_TOKENS, generator=g) + SPECIAL_TOKENS
    lm_head = torch.zeros(vocab, hidden)
    direction = embed / embed.norm(dim=1, keepdim=True)
    # σ(order[i]) = order[i + 1]: the row of the token said next is the embedding direction
    # of the token before it
    lm_head[order.roll(-1)] = LOGIT_SCALE * direction[order]
    state = {
        "model.embed_tokens.weight": embed,
        "lm_head.weight": lm_head,
        "model.norm.weight": torch.ones(hidden),
    }
    std = hidden**-0.5

    def block(prefix: str) -> None:
        for name, out in (("q", width), ("k", kv_width), ("v", kv_width)):
            state[f"{prefix}self_attn.{name}_proj.weight"] = randn(out, hidden, std=std)
            state[f"{prefix}self_attn.{name}_proj.bias"] = torch.zeros(out)
        state[f"{prefix}self_attn.o_proj.weight"] = torch.zeros(hidden, width)
        state[f"{prefix}mlp.gate_proj.weight"] = randn(inter, hidden, std=std)
        state[f"{prefix}mlp.up_proj.weight"] = randn(inter, hidden, std=std)
        state[f"{prefix}mlp.down_proj.weight"] = torch.zeros(hidden, inter)
        state[f"{prefix}input_layernorm.weight"] = torch.ones(hidden)
        state[f"{prefix}post_attention_layernorm.weight"] = torch.ones(hidden)

    for i in range(c["num_hidden_layers"]):
        block(f"model.layers.{i}.")
    for i in range(c["num_nextn_predict_layers"]):
        prefix = f"model.mtp_layers.{i}."
        block(prefix)
        for norm in ("token_layernorm", "hidden_layernorm", "final_layernorm"):
            state[f"{prefix}{norm}.weight"] = torch.ones(hidden)
        # input_proj reads [hidden_layernorm(target state) | token_layernorm(embedding)]
        state[f"{prefix}input_proj.weight"] = torch.cat(
            [torch.zeros(hidden, hidden), torch.eye(hidden)], dim=1
        )
    return {k: v.contiguous() for k, v in state.items()}


def next_tokens() -> dict[int, int]:
    """σ: the token the target says after each ordinary token (for tests; imports torch)."""
    import torch

    state = _weights()
    embed, lm_head = state["model.embed_tokens.weight"], state["lm_head.weight"]
    normed = embed / embed.pow(2).mean(dim=1, keepdim=True).add(CONFIG["rms_norm_eps"]).sqrt()
    chosen = torch.argmax(normed @ lm_head.T, dim=1)
    return {t: int(chosen[t]) for t in range(SPECIAL_TOKENS, CONFIG["vocab_size"])}


def build_mtp_target(tokenizer_dir: Path, dst: Path) -> Path:
    """Write the tiny MiMo target to ``dst``: ``config.json``, ``model.safetensors`` and the
    tokenizer files of ``tokenizer_dir``. Deterministic; returns ``dst``."""
    from safetensors.torch import save_file

    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n", encoding="utf-8")
    for name in _COPIED:
        shutil.copy2(Path(tokenizer_dir) / name, dst / name)
    save_file(_weights(), str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst
