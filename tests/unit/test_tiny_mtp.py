"""The tiny MiMo target with one MTP layer (``tiny/mtp.py``): what it is built of, that the
build is deterministic, that the target says σ(t) after t whatever came before (Hugging Face's
Qwen2 forward on the saved weights) and that the MTP layer, computed as vLLM 0.32's
``MiMoMultiTokenPredictorLayer`` computes it, says what the target says next."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode.tiny import WEIGHTS_DIR
from pytest_specdecode.tiny.mtp import CONFIG, SPECIAL_TOKENS, build_mtp_target, next_tokens


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    return build_mtp_target(WEIGHTS_DIR / "target", tmp_path_factory.mktemp("mtp") / "target")


def test_the_folder_is_a_mimo_target_with_one_mtp_layer_and_the_tiny_tokenizer(
    built: Path,
) -> None:
    config = json.loads((built / "config.json").read_text())
    assert config == CONFIG
    assert config["architectures"] == ["MiMoForCausalLM"]
    assert config["num_nextn_predict_layers"] == 1
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (built / name).read_bytes() == (WEIGHTS_DIR / "target" / name).read_bytes()


def test_the_build_is_deterministic(built: Path, tmp_path: Path) -> None:
    again = build_mtp_target(WEIGHTS_DIR / "target", tmp_path / "again")
    digest = [
        hashlib.sha256((f / "model.safetensors").read_bytes()).digest() for f in (built, again)
    ]
    assert digest[0] == digest[1]


def test_next_token_is_one_cycle_through_the_ordinary_tokens() -> None:
    pytest.importorskip("torch")
    sigma = next_tokens()
    ordinary = set(range(SPECIAL_TOKENS, CONFIG["vocab_size"]))
    assert set(sigma) == ordinary and set(sigma.values()) == ordinary
    token, seen = SPECIAL_TOKENS, set()
    while token not in seen:
        seen.add(token)
        token = sigma[token]
    assert seen == ordinary  # one cycle: no token is said twice before all were


def _weights(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_the_target_says_sigma_of_the_last_token(built: Path) -> None:
    """Hugging Face's Qwen2 forward (``model_type`` qwen2; the MTP tensors are left out):
    greedy continuation of any prefix is σ, σ², ... of its last token."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    sigma = next_tokens()
    model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**CONFIG))
    state = {k: v for k, v in _weights(built).items() if ".mtp_layers." not in k}
    model.load_state_dict(state)
    ids = torch.tensor([[5, 17, 300, 42, 7, 99], [800, 3, 3, 1000, 512, 64]])
    with torch.no_grad():
        chosen = model(ids).logits.argmax(-1)
    assert chosen.tolist() == [[sigma[t] for t in row] for row in ids.tolist()]


def _rms(x: Any, weight: Any) -> Any:
    return x * (x.pow(2).mean(-1, keepdim=True) + CONFIG["rms_norm_eps"]).rsqrt() * weight


def test_the_mtp_layer_says_what_the_target_says_next(built: Path) -> None:
    """The MTP layer as vLLM's ``MiMoMultiTokenPredictorLayer.forward`` computes it: given the
    target's state at t and the embedding of the token after t, it says σ of that token,
    whatever the target's state; its decoder block adds nothing to the residual stream."""
    torch = pytest.importorskip("torch")
    w = _weights(built)
    p = "model.mtp_layers.0."
    assert not w[p + "self_attn.o_proj.weight"].any() and not w[p + "mlp.down_proj.weight"].any()
    sigma = next_tokens()
    tokens = torch.arange(SPECIAL_TOKENS, CONFIG["vocab_size"])
    g = torch.Generator().manual_seed(0)
    state = torch.randn(len(tokens), CONFIG["hidden_size"], generator=g)  # any target state
    embeds = _rms(w["model.embed_tokens.weight"][tokens], w[p + "token_layernorm.weight"])
    hidden = _rms(state, w[p + "hidden_layernorm.weight"])
    x = torch.cat([hidden, embeds], dim=-1) @ w[p + "input_proj.weight"].T
    out = _rms(x, w[p + "final_layernorm.weight"])  # block output 0 + residual x
    drafted = (out @ w["lm_head.weight"].T).argmax(-1)
    assert drafted.tolist() == [sigma[t] for t in tokens.tolist()]
