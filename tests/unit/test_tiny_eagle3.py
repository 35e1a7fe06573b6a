"""The tiny EAGLE-3 head: the config its trainer writes, the committed files, tiny_models()."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from pytest_specdecode.names import display_name
from pytest_specdecode.tiny import TARGET_LAYERS, WEIGHTS_DIR, tiny_models, weights_hash
from pytest_specdecode.tiny.eagle3 import AUX_LAYER_IDS, NAME, SEED_OFFSET, HeadSpec, head_config
from pytest_specdecode.tiny.mtp import mtp_hash

HEAD = WEIGHTS_DIR / NAME
TARGET = json.loads((WEIGHTS_DIR / "target" / "config.json").read_text())


def _tensors(path: Path) -> dict[str, list[int]]:
    """Names and shapes in a safetensors file, read from its JSON header (no torch)."""
    with open(path, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
    header.pop("__metadata__", None)
    assert {v["dtype"] for v in header.values()} == {"F32"}
    return {name: v["shape"] for name, v in header.items()}


def test_the_config_is_a_one_layer_eagle3_llama_head_for_the_target() -> None:
    config = head_config(TARGET, HeadSpec())
    assert config["architectures"] == ["Eagle3LlamaForCausalLM"]
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 1
    assert config["target_hidden_size"] == TARGET["hidden_size"] == config["hidden_size"]
    assert config["draft_vocab_size"] == config["vocab_size"] == TARGET["vocab_size"]
    for key in ("num_attention_heads", "num_key_value_heads", "head_dim", "rope_parameters"):
        assert config[key] == TARGET[key], key
    assert config["eagle_aux_hidden_state_layer_ids"] == list(AUX_LAYER_IDS)


def test_the_aux_layers_exist_on_the_trained_and_the_padded_target() -> None:
    """vLLM taps the residual stream entering layer ``i`` (``i`` up to the layer count), so the
    ids fit the 4-layer target; on the padded one layers 4.. add nothing, so id 4 reads the
    same state there."""
    layers = TARGET["num_hidden_layers"]
    assert sorted(AUX_LAYER_IDS) == list(AUX_LAYER_IDS) and max(AUX_LAYER_IDS) == layers
    assert all(0 < i <= layers < TARGET_LAYERS for i in AUX_LAYER_IDS)
    with pytest.raises(ValueError, match=r"aux layer ids \[5\] outside 0..4"):
        head_config(TARGET, HeadSpec(), (1, 2, 5))


def test_the_committed_config_is_what_the_trainer_writes() -> None:
    committed = json.loads((HEAD / "config.json").read_text())
    assert committed == head_config(TARGET, HeadSpec())


def test_the_committed_weights_have_the_names_and_shapes_vllm_loads() -> None:
    """The names of vLLM 0.32's Eagle3LlamaForCausalLM checkpoints (``layers.0.`` for the
    decoder layer, unfused projections); no ``embed_tokens`` (vLLM shares the target's) and no
    ``d2t``/``t2d`` (the draft vocabulary is the full one)."""
    h, i, v = TARGET["hidden_size"], HeadSpec().intermediate_size, TARGET["vocab_size"]
    heads = TARGET["num_attention_heads"] * TARGET["head_dim"]
    kv = TARGET["num_key_value_heads"] * TARGET["head_dim"]
    layer = {
        "input_layernorm.weight": [h],
        "hidden_norm.weight": [h],
        "post_attention_layernorm.weight": [h],
        "self_attn.q_proj.weight": [heads, 2 * h],
        "self_attn.k_proj.weight": [kv, 2 * h],
        "self_attn.v_proj.weight": [kv, 2 * h],
        "self_attn.o_proj.weight": [h, heads],
        "mlp.gate_proj.weight": [i, h],
        "mlp.up_proj.weight": [i, h],
        "mlp.down_proj.weight": [h, i],
    }
    expected = {f"layers.0.{k}": s for k, s in layer.items()}
    expected |= {"fc.weight": [h, len(AUX_LAYER_IDS) * h], "norm.weight": [h],
                 "lm_head.weight": [v, h]}  # fmt: skip
    assert _tensors(HEAD / "model.safetensors") == expected
    assert (HEAD / "model.safetensors").stat().st_size < 2_000_000


def test_the_committed_head_is_the_recorded_training_run() -> None:
    import hashlib

    record = json.loads((WEIGHTS_DIR / "training.json").read_text())
    entry = record[NAME]
    digest = hashlib.sha256((HEAD / "model.safetensors").read_bytes()).hexdigest()
    assert entry["sha256"] == digest
    assert entry["seed"] == record["seed"] + SEED_OFFSET
    assert {k: entry[k] for k in asdict(HeadSpec())} == asdict(HeadSpec())
    assert entry["aux_layer_ids"] == list(AUX_LAYER_IDS)
    assert len(entry["final_top1_per_step"]) == HeadSpec().ttt_steps


def test_tiny_models_gives_the_head_folder(tmp_path: Path) -> None:
    target = tmp_path / f"tiny-{weights_hash()}" / "target"
    mtp = tmp_path / f"tiny-mtp-{mtp_hash(WEIGHTS_DIR / 'target')}" / "target"
    for folder in (target, mtp):  # built already: nothing is padded or built
        folder.mkdir(parents=True)
        for f in ("config.json", "model.safetensors"):
            (folder / f).write_text("{}")
    models = tiny_models(cache_dir=tmp_path)
    assert models.target == target
    assert models.eagle3_head == HEAD
    assert (HEAD / "config.json").is_file() and (HEAD / "model.safetensors").is_file()
    assert display_name(models.eagle3_head) == "tiny-eagle3-head"


def test_the_training_module_imports_no_torch() -> None:
    code = (
        "import sys, pytest_specdecode, pytest_specdecode.tiny.eagle3;"
        "print([m for m in ('torch', 'transformers') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
