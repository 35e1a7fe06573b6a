"""A draft or head is checked against its target from the model files, before any engine
starts: tokenizers, context window, size, EAGLE/MTP head fit; hub names from the HF cache; and
a package the method's proposer imports (suffix: arctic_inference) is installed."""

from __future__ import annotations

import json
import struct
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pytest_specdecode.engines import compat
from pytest_specdecode.engines.config import EngineConfig, engine_pair
from pytest_specdecode.engines.methods import ARCTIC_INFERENCE, METHODS
from pytest_specdecode.engines.vllm_schema import installed_schema
from pytest_specdecode.errors import ConfigError, SpecDecodeWarning, UncheckedCompatibilityWarning
from pytest_specdecode.tiny import WEIGHTS_DIR

from ..e2e_support import needs_vllm
from ..heads import (
    eagle1_weights,
    eagle3_weights,
    head_folder,
    llama_head_config,
    llm_weights,
    speculators_config,
    write_safetensors,
)
from ..helpers import fake_find_spec

SOURCE = "t.py::test_a: speculative_config (from marker)"

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 2048,
    "vocab_size": 8,
    "bos_token_id": 0,
    "eos_token_id": 1,
}
_AUX = "eagle_aux_hidden_state_layer_ids"
VOCAB = {"<s>": 0, "</s>": 1, "<unk>": 2, "a": 3, "b": 4, "c": 5, "ab": 6, "bc": 7}


def tokenizer_json(vocab: dict[str, int]) -> dict[str, Any]:
    specials = [{"id": vocab[t], "content": t, "special": True} for t in ("<s>", "</s>", "<unk>")]
    return {"added_tokens": specials, "model": {"type": "BPE", "vocab": vocab, "merges": []}}


def model(
    root: Path,
    name: str,
    vocab: dict[str, int] | None = None,
    tokens: dict[str, str] | None = None,
    **config: Any,
) -> str:
    """A fake model folder: config.json (LLAMA updated by ``config``; None values removed),
    tokenizer.json and tokenizer_config.json."""
    folder = root / name
    folder.mkdir(parents=True)
    data = {k: v for k, v in {**LLAMA, **config}.items() if v is not None}
    (folder / "config.json").write_text(json.dumps(data))
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json(vocab or VOCAB)))
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", **(tokens or {})}
    (folder / "tokenizer_config.json").write_text(json.dumps(special))
    return str(folder)


def check(
    target: str, draft: str, engine_kwargs: dict[str, Any] | None = None, **spec: Any
) -> None:
    method = spec.pop("method", "draft_model")
    config = {"method": method, "model": draft, "num_speculative_tokens": 2, **spec}
    EngineConfig.create(target, config, engine_kwargs or {}).check_speculative_config(SOURCE)


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """An empty HF cache of our own; warnings once per model start afresh."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    compat._warned.clear()
    yield
    compat._warned.clear()


# -- the tiny pair ----------------------------------------------------------------------------


def test_tiny_pair_passes_quickly() -> None:
    compat._vocabulary_at.cache_clear()
    compat._json_at.cache_clear()
    target, draft = str(WEIGHTS_DIR / "target"), str(WEIGHTS_DIR / "draft")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        start = time.perf_counter()
        check(target, draft, {"max_model_len": 512})
        check(target, draft)  # the target's own context: equal to the draft's
        elapsed = time.perf_counter() - start
    assert elapsed < 1.0, elapsed  # generous: the check reads a few small JSON files
    assert compat._vocabulary_at.cache_info().misses == 2  # each tokenizer.json read once


def test_large_vocabulary_is_read_once(tmp_path: Path) -> None:
    """A 150k-token tokenizer (the size of real ones) is hashed once per file and cached."""
    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2} | {f"tok{i}": i for i in range(3, 150_000)}
    target = model(tmp_path, "target", vocab, vocab_size=150_000)
    draft = model(tmp_path, "draft", vocab, vocab_size=150_000, num_hidden_layers=1)
    compat._vocabulary_at.cache_clear()
    start = time.process_time()  # this process's CPU time: what other processes take is not in it
    check(target, draft)
    assert time.process_time() - start < 2.0  # "within a second or two", with a wide margin
    check(target, draft)
    info = compat._vocabulary_at.cache_info()
    assert (info.misses, info.hits) == (2, 2)


# -- tokenizers -------------------------------------------------------------------------------


def test_vocabulary_size_differs(tmp_path: Path) -> None:
    target = model(tmp_path, "target")
    draft = model(tmp_path, "draft", vocab_size=16)
    with pytest.raises(ConfigError) as info:
        check(target, draft)
    message = str(info.value)
    assert message.startswith(f"{SOURCE}: the draft {draft!r} has vocab_size 16 but the target")
    assert f"{target!r} has 8" in message
    assert "use_heterogeneous_vocab" in message  # the fix


def test_heterogeneous_vocabulary_is_not_refused(tmp_path: Path) -> None:
    target = model(tmp_path, "target")
    draft = model(tmp_path, "draft", {**VOCAB, "a": 4, "b": 3}, vocab_size=16, num_hidden_layers=1)
    check(target, draft, use_heterogeneous_vocab=True)


def test_token_to_id_mapping_differs(tmp_path: Path) -> None:
    target = model(tmp_path, "target")
    draft = model(tmp_path, "draft", {**VOCAB, "a": 4, "b": 3})
    with pytest.raises(ConfigError) as info:
        check(target, draft)
    message = str(info.value)
    assert f"the draft {draft!r} has another tokenizer than the target {target!r}" in message
    assert "token 'b' is id 3 in the draft but 4 in the target" in message
    assert "choose a draft trained with the target's tokenizer" in message


def test_target_tokenizer_from_engine_kwargs(tmp_path: Path) -> None:
    """The target engine's tokenizer is the one engine_kwargs name, when they do."""
    target = model(tmp_path, "target", {**VOCAB, "a": 4, "b": 3})
    tokenizer = model(tmp_path, "tokenizer")
    draft = model(tmp_path, "draft")
    check(target, draft, {"tokenizer": tokenizer})
    with pytest.raises(ConfigError, match="token 'a' is id 3 in the draft but 4"):
        check(target, draft)


def test_special_token_bos_differs(tmp_path: Path) -> None:
    target = model(tmp_path, "target")
    draft = model(tmp_path, "draft", bos_token_id=5)
    with pytest.raises(ConfigError) as info:
        check(target, draft)
    assert "bos_token_id 5 (config.json) but the target has 0 (config.json)" in str(info.value)
    other = model(tmp_path, "other", tokens={"unk_token": "c"})
    with pytest.raises(ConfigError, match="unk_token 'c' .*but the target has '<unk>'"):
        check(target, other)


def test_special_token_eos_differs_is_a_warning(tmp_path: Path) -> None:
    """A base model and its instruct variant differ in eos only: warned, not refused."""
    target = model(tmp_path, "target", tokens={"eos_token": "ab"}, eos_token_id=[1, 6])
    draft = model(tmp_path, "draft")
    with pytest.warns(SpecDecodeWarning) as record:
        check(target, draft)
    message = str(record[0].message)
    assert "eos_token '</s>' (tokenizer_config.json) but the target has 'ab'" in message
    assert "eos_token_id 1 (config.json) but the target has [1, 6]" in message


# -- context window ---------------------------------------------------------------------------


def test_draft_context_shorter_than_max_model_len(tmp_path: Path) -> None:
    target = model(tmp_path, "target")
    draft = model(tmp_path, "draft", max_position_embeddings=512)
    with pytest.raises(ConfigError) as info:
        check(target, draft, {"max_model_len": 1024})
    message = str(info.value)
    assert f"the draft {draft!r} has a context window of 512 (max_position_embeddings" in message
    assert "max_model_len 1024 (max_model_len in engine_kwargs)" in message
    assert "give engine_kwargs max_model_len <= 512" in message
    check(target, draft, {"max_model_len": 512})


def test_draft_context_shorter_than_target(tmp_path: Path) -> None:
    target = model(tmp_path, "target", max_position_embeddings=4096)
    draft = model(tmp_path, "draft", max_position_embeddings=2048, n_positions=1024)
    with pytest.raises(ConfigError, match="context window of 1024 .*max_model_len 4096 \\(the "):
        check(target, draft)


def test_speculative_max_model_len_caps_the_draft(tmp_path: Path) -> None:
    target = model(tmp_path, "target", max_position_embeddings=4096)
    draft = model(tmp_path, "draft", max_position_embeddings=1024)
    check(target, draft, max_model_len=1024)
    with pytest.raises(ConfigError, match="speculative_config max_model_len is 2048; set it to"):
        check(target, draft, max_model_len=2048)


# -- size -------------------------------------------------------------------------------------


def test_draft_larger_than_target_is_a_warning(tmp_path: Path) -> None:
    target = model(tmp_path, "target", num_hidden_layers=1)
    draft = model(tmp_path, "draft", num_hidden_layers=4)
    with pytest.warns(SpecDecodeWarning) as record:
        check(target, draft)
    message = str(record[0].message)
    assert f"the draft {draft!r} (164.9k parameters, estimated from its config.json)" in message
    assert f"is larger than the target {target!r} (42.0k parameters" in message


def safetensors(folder: str, shapes: dict[str, list[int]]) -> None:
    header = json.dumps({"__metadata__": {}} | {
        name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}
        for name, shape in shapes.items()
    }).encode()  # fmt: skip
    (Path(folder) / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)


def test_size_from_safetensors_headers(tmp_path: Path) -> None:
    """The headers' shapes count when both have them (config.json says otherwise here)."""
    target = model(tmp_path, "target", num_hidden_layers=8)
    draft = model(tmp_path, "draft", num_hidden_layers=1)
    safetensors(target, {"a": [1000, 1000]})
    safetensors(draft, {"a": [1000, 1000], "b": [2000, 1000]})
    with pytest.warns(SpecDecodeWarning, match=r"\(3.0M parameters, its \*.safetensors headers"):
        check(target, draft)


# -- EAGLE / MTP heads ------------------------------------------------------------------------


def test_eagle_head_hidden_size_differs(tmp_path: Path) -> None:
    target = model(tmp_path, "target")
    head = model(tmp_path, "head", hidden_size=32, num_hidden_layers=1)
    with pytest.raises(ConfigError) as info:
        check(target, head, method="eagle")
    message = str(info.value)
    assert f"the draft {head!r} is a 'eagle' head for hidden size 32 (hidden_size in" in message
    assert f"the target {target!r} has hidden_size 64" in message
    fits = model(tmp_path, "eagle3", hidden_size=32, target_hidden_size=64)
    check(target, fits, method="eagle3")
    with pytest.raises(ConfigError, match="'mtp' head for hidden size 32"):
        check(target, head, method="mtp")


def speculators_head(root: Path, name: str, verifier: str, arch: str = "LlamaForCausalLM") -> str:
    folder = root / name
    folder.mkdir(parents=True)
    config = {
        "speculators_model_type": "eagle3",
        "transformer_layer_config": {**LLAMA, "num_hidden_layers": 1},
        "speculators_config": {"verifier": {"name_or_path": verifier, "architectures": [arch]}},
    }
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def cache_model(name: str, files: dict[str, Any], root: Path) -> Path:
    """``name`` as huggingface_hub caches it under ``root``: refs/main and a snapshot."""
    repo = root / f"models--{name.replace('/', '--')}"
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    for file, data in files.items():
        (snapshot / file).write_text(json.dumps(data))
    return snapshot


def test_head_base_model_differs(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    cache_model("org/target", {"config.json": LLAMA}, hub)
    head = speculators_head(tmp_path, "head", "org/other-model")
    with pytest.raises(ConfigError) as info:
        check("org/target", head, method="eagle3")
    message = str(info.value)
    assert "records base model 'org/other-model' (speculators_config.verifier" in message
    assert "but the target is 'org/target': choose the head trained for this target" in message
    check("org/target", speculators_head(tmp_path, "good", "org/target"), method="eagle3")
    # a local target may be the recorded model under another name: a warning
    target = model(tmp_path, "my-target")
    with pytest.warns(SpecDecodeWarning, match="records base model 'org/other-model'"):
        check(target, head, method="eagle3")
    # the folder's name is the recorded model's name: no warning
    named = speculators_head(tmp_path, "named", "someone/target")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check(model(tmp_path, "target"), named, method="eagle3")


def test_head_for_another_architecture(tmp_path: Path) -> None:
    target = model(tmp_path, "target")
    head = speculators_head(tmp_path, "head", "org/target", arch="Qwen3ForCausalLM")
    with pytest.raises(ConfigError, match="trained for a Qwen3ForCausalLM model .* is a Llama"):
        check(target, head, method="eagle3")


# -- heads: vocabulary, aux layers, a head of the named method ----------------------------


def eagle3(root: Path, name: str, weights: bool = True, **fields: Any) -> str:
    """An EAGLE-3 head for LLAMA (vLLM's plain format), with ``fields`` in its config."""
    config = llama_head_config(LLAMA, **{"architectures": ["LlamaForCausalLMEagle3"], **fields})
    return head_folder(root, name, config, eagle3_weights(config) if weights else None)


def test_valid_heads_pass(tmp_path: Path) -> None:
    """The formats vLLM loads: EAGLE's own (midlayer, d2t, no embed_tokens), speculators
    (nested layer config, norm_before_fc, top-level fields), EAGLE-1, an EAGLE-3 head without
    aux hidden states (no fc), aux ids up to the target's layer count, no weights at all."""
    target = model(tmp_path, "target")
    plain = eagle3(
        tmp_path, "plain", draft_vocab_size=4, eagle_aux_hidden_state_layer_ids=[0, 1, 2]
    )
    layer = llama_head_config(LLAMA)
    config = speculators_config(
        layer, target, draft_vocab_size=4, norm_before_fc=True, target_hidden_size=64,
        eagle_aux_hidden_state_layer_ids=[1, 2, 0],
    )  # fmt: skip
    weights = eagle3_weights(layer | {"draft_vocab_size": 4}, layer="layers.0")
    speculators = head_folder(
        tmp_path, "speculators", config, weights | {"input_norm.weight": [192]}
    )
    plain_config = llama_head_config(LLAMA, architectures=["LlamaForCausalLM"])
    eagle1 = head_folder(tmp_path, "eagle1", plain_config, eagle1_weights(LLAMA))
    no_aux = {
        "eagle_config": {"use_aux_hidden_state": False, "eagle_aux_hidden_state_layer_ids": [9]}
    }
    weights = {k: v for k, v in eagle3_weights(layer).items() if not k.startswith("fc.")}
    without_aux = head_folder(tmp_path, "no_aux", llama_head_config(LLAMA, **no_aux), weights)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for head in (plain, speculators, without_aux, eagle3(tmp_path, "bare", weights=False)):
            check(target, head, method="eagle3")
        check(target, eagle1, method="eagle")
        check(target, target, method="mtp")  # the target's own MTP layers: nothing to check


def test_head_vocabulary_differs(tmp_path: Path) -> None:
    target = model(tmp_path, "target")
    head = eagle3(tmp_path, "head", vocab_size=16)
    with pytest.raises(ConfigError) as info:
        check(target, head, method="eagle3")
    message = str(info.value)
    assert message.startswith(f"{SOURCE}: the draft {head!r} is a 'eagle3' head with vocab_size 16")
    assert (
        f"(vocab_size in {head}/config.json) but the target {target!r} has vocab_size 8 ("
        in message
    )
    assert "choose the head trained for this target" in message
    layer = llama_head_config(LLAMA, vocab_size=16)
    nested = head_folder(tmp_path, "nested", speculators_config(layer, target), None)
    with pytest.raises(ConfigError, match=r"vocab_size 16 \(transformer_layer_config.vocab_size"):
        check(target, nested, method="eagle3")
    mtp = model(tmp_path, "mtp", vocab_size=16)
    with pytest.raises(ConfigError, match="'mtp' head with vocab_size 16"):
        check(target, mtp, method="mtp")
    # the target's hf_overrides may change its vocabulary: not compared then
    check(target, head, {"hf_overrides": {"vocab_size": 16}}, method="eagle3")


def test_draft_vocabulary_larger_than_the_target(tmp_path: Path) -> None:
    target = model(tmp_path, "target")
    head = eagle3(tmp_path, "head", weights=False, draft_vocab_size=12)
    with pytest.raises(ConfigError) as info:
        check(target, head, method="eagle3")
    message = str(info.value)
    assert f"has draft_vocab_size 12 (draft_vocab_size in {head}/config.json) but" in message
    assert f"the target {target!r} has vocab_size 8" in message


def test_d2t_table_does_not_match_draft_vocab_size(tmp_path: Path) -> None:
    target = model(tmp_path, "target")
    config = llama_head_config(LLAMA, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=4)
    head = head_folder(tmp_path, "head", config, eagle3_weights(config, d2t=6))
    with pytest.raises(ConfigError) as info:
        check(target, head, method="eagle3")
    message = str(info.value)
    assert f"has a d2t table of 6 entries (tensor 'd2t' in {head}/model.safetensors)" in message
    assert f"but draft_vocab_size 4 (draft_vocab_size in {head}/config.json)" in message
    assert "set draft_vocab_size to 6 in config.json" in message
    # no draft_vocab_size: vLLM takes vocab_size (8), which a d2t of 4 does not fit
    config.pop("draft_vocab_size")
    bare = head_folder(tmp_path, "bare", config, eagle3_weights(config, d2t=4))
    with pytest.raises(ConfigError, match=r"draft_vocab_size 8 \(vocab_size, as there is no"):
        check(target, bare, method="eagle3")


def test_aux_layer_ids_beyond_the_target(tmp_path: Path) -> None:
    target = model(tmp_path, "target")  # 2 layers: hidden states 0 to 2 are collected
    head = eagle3(tmp_path, "head", eagle_aux_hidden_state_layer_ids=[0, 1, 3])
    with pytest.raises(ConfigError) as info:
        check(target, head, method="eagle3")
    message = str(info.value)
    assert f"reading the target's hidden states at layers [0, 1, 3] ({_AUX} in {head}/" in message
    assert f"the target {target!r} has num_hidden_layers 2 ({target}/config.json)" in message
    assert "so [3] would never be collected" in message
    assert "give ids from 0 to 2" in message
    nested = eagle3(tmp_path, "nested", eagle_config={_AUX: [-1, 1, 2]})
    with pytest.raises(ConfigError, match=rf"at layers \[-1, 1, 2\] \(eagle_config.{_AUX} in"):
        check(target, nested, method="eagle3")
    layer = llama_head_config(LLAMA, **{_AUX: [0, 1, 2]})  # vLLM reads the top-level ids
    top = head_folder(tmp_path, "top", speculators_config(layer, target, **{_AUX: [5, 1, 2]}), None)
    with pytest.raises(ConfigError, match=rf"at layers \[5, 1, 2\] \({_AUX} in"):
        check(target, top, method="eagle3")
    eagle1 = eagle3(tmp_path, "eagle1", False, architectures=None, **{_AUX: [0, 1, 3]})
    check(target, eagle1, method="eagle")  # EAGLE-1 reads no aux layers


def test_complete_model_is_not_a_head(tmp_path: Path) -> None:
    target = model(tmp_path, "target")
    draft = model(tmp_path, "draft", num_hidden_layers=1)
    write_safetensors(Path(draft), llm_weights({**LLAMA, "num_hidden_layers": 1}))
    for method, label in (("eagle3", "an EAGLE-3"), ("eagle", "an EAGLE-1")):
        with pytest.raises(ConfigError) as info:
            check(target, draft, method=method)
        message = str(info.value)
        assert f"the draft {draft!r} is not {label} head but a complete LlamaForCausalLM" in message
        assert f"(model.safetensors in {draft}) have no fusion layer fc" in message
        assert "such as lm_head.weight, model.embed_tokens.weight" in message
        assert 'as a draft with "method": "draft_model"' in message
    check(target, draft)  # as a draft model it is fine


def test_head_of_the_other_eagle_method(tmp_path: Path) -> None:
    target = model(tmp_path, "target")
    config = llama_head_config(LLAMA, architectures=["EagleLlamaForCausalLM"])
    eagle1 = head_folder(tmp_path, "eagle1", config, eagle1_weights(LLAMA))
    with pytest.raises(ConfigError) as info:
        check(target, eagle1, method="eagle3")
    message = str(info.value)
    assert f"is an EAGLE-1 head (architectures ['EagleLlamaForCausalLM'] in {eagle1}/" in message
    assert "but the method is 'eagle3'" in message
    assert 'use "method": "eagle" for it, or give an EAGLE-3 head trained for the target' in message
    # plain architectures: fc's inputs tell (2 x hidden_size: EAGLE-1; 3 x 64: EAGLE-3)
    config = llama_head_config(LLAMA, architectures=["LlamaForCausalLM"])
    plain = head_folder(tmp_path, "plain", config, eagle1_weights(LLAMA))
    with pytest.raises(ConfigError, match=r"EAGLE-1 head \(fc.weight of shape \[64, 128\] in .*"
                       r"128 inputs, 2 x hidden_size 64\)"):  # fmt: skip
        check(target, plain, method="eagle3")
    three = eagle3(tmp_path, "three", architectures=["LlamaForCausalLM"])
    with pytest.raises(ConfigError, match=r"is an EAGLE-3 head \(fc.weight .*3 hidden states of"):
        check(target, three, method="eagle")
    named = eagle3(tmp_path, "named", weights=False)
    with pytest.raises(
        ConfigError, match=r"EAGLE-3 head \(architectures \['LlamaForCausalLMEagle3'"
    ):
        check(target, named, method="eagle")
    config = speculators_config(llama_head_config(LLAMA), target) | {
        "speculators_model_type": "eagle"
    }
    speculators = head_folder(tmp_path, "speculators", config, None)
    with pytest.raises(ConfigError, match="EAGLE-1 head \\(speculators_model_type 'eagle' in"):
        check(target, speculators, method="eagle3")


# -- hub names --------------------------------------------------------------------------------


def test_hub_names_checked_from_the_cache(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    cache_model("org/target", {"config.json": LLAMA}, hub)
    cache_model("org/draft", {"config.json": {**LLAMA, "vocab_size": 16}}, hub)
    with pytest.raises(ConfigError, match="the draft 'org/draft' has vocab_size 16 but"):
        check("org/target", "org/draft")


def test_hub_cache_from_hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert compat.hub_cache() == tmp_path / "home" / "hub"
    snapshot = cache_model("org/m", {"config.json": LLAMA}, tmp_path / "home" / "hub")
    assert compat.locate("org/m") == snapshot
    assert compat.locate("org/m", "abc123") == snapshot
    assert compat.locate("org/m", "v2") is None  # another revision is not cached


def test_uncached_hub_names_are_unchecked(tmp_path: Path) -> None:
    target = model(tmp_path, "target")
    with pytest.warns(UncheckedCompatibilityWarning) as record:
        check(target, "org/draft")
        check(target, "org/draft")  # said once
    assert len(record) == 1
    message = str(record[0].message)
    assert message.startswith(f"{SOURCE}: the draft 'org/draft' is not in the Hugging Face")
    assert "download it first (`hf download org/draft`)" in message


def test_refused_through_engine_pair(tmp_path: Path) -> None:
    """Bench and the marker build engines through engine_pair: the check runs there."""
    target = model(tmp_path, "target")
    draft = model(tmp_path, "draft", vocab_size=16)
    spec = {"method": "draft_model", "model": draft, "num_speculative_tokens": 2}
    with pytest.raises(ConfigError, match="^Bench: speculative_config: the draft .* vocab_size"):
        engine_pair(target, spec, {}, served=False, where=lambda n: f"Bench: {n}", hint="")


# -- packages a method's proposer imports ------------------------------------------------------

SUFFIX = {"method": "suffix", "num_speculative_tokens": 4}


def test_suffix_without_arctic_inference_is_refused_before_any_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM raises only once an engine starts; the plugin says it first, with the cost."""
    imported = "vllm" in sys.modules
    asked = fake_find_spec(monkeypatch, arctic_inference=False)
    with pytest.raises(ConfigError) as info:
        EngineConfig.create("org/target", SUFFIX, {}).check_speculative_config(SOURCE)
    message = str(info.value)
    assert message.startswith(f"{SOURCE}: method \"suffix\" needs the module 'arctic_inference'")
    for said in (
        "not installed for this Python",
        "`pip install arctic-inference==0.1.1`, the command vLLM asks for",
        "source distribution whose isolated build downloads about 3 GB (torch 2.7.0 and CUDA",
        "took 5 minutes on a 2-core machine",
        "see docs/writing-tests.md#suffix-decoding",
    ):
        assert said in message
    assert "arctic_inference" in asked
    assert ("vllm" in sys.modules) == imported  # looked up, not imported
    with pytest.raises(ConfigError, match='^Bench: speculative_config: method "suffix" needs'):
        engine_pair("org/target", SUFFIX, {}, served=False, where=lambda n: f"Bench: {n}", hint="")


def test_suffix_with_arctic_inference_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_find_spec(monkeypatch, arctic_inference=True)
    EngineConfig.create("org/target", SUFFIX, {}).check_speculative_config(SOURCE)
    assert "arctic_inference" in asked


def test_served_suffix_is_the_servers_business(monkeypatch: pytest.MonkeyPatch) -> None:
    """A served pair's configuration is its server's: nothing is looked up here."""
    asked = fake_find_spec(monkeypatch, arctic_inference=False)
    engine_pair("", SUFFIX, {}, served=True, where=lambda n: n, hint="")
    assert "arctic_inference" not in asked


@pytest.mark.parametrize("method", sorted(set(METHODS) - {"suffix"} | {"deepseek_mtp", "new"}))
def test_other_methods_never_look(monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    asked = fake_find_spec(monkeypatch, arctic_inference=False)
    compat.check_requirement(method, SOURCE)
    assert asked == []
    if method in ("ngram", "ngram_gpu"):  # through the whole pre-start check too
        spec = {"method": method, "num_speculative_tokens": 4}
        EngineConfig.create("org/target", spec, {}).check_speculative_config(SOURCE)
        assert "arctic_inference" not in asked


def test_a_module_already_imported_without_a_spec_counts_as_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """find_spec raises ValueError for a module in sys.modules whose __spec__ is None."""
    module = ModuleType(ARCTIC_INFERENCE.module)
    module.__spec__ = None
    monkeypatch.setitem(sys.modules, ARCTIC_INFERENCE.module, module)
    compat.check_requirement("suffix", SOURCE)


@needs_vllm
def test_the_install_command_is_the_one_the_installed_vllm_asks_for() -> None:
    schema = installed_schema()
    assert schema is not None
    text = Path(schema.source).read_text(encoding="utf-8")
    assert f"Install via `{ARCTIC_INFERENCE.install}`" in text, schema.source


# -- MTP: the target's own layers ---------------------------------------------------------------


def mtp(target: str, engine_kwargs: dict[str, Any] | None = None, **spec: Any) -> None:
    config = {"method": "mtp", "num_speculative_tokens": 3, **spec}
    EngineConfig.create(target, config, engine_kwargs or {}).check_speculative_config(SOURCE)


MIMO = {"architectures": ["MiMoForCausalLM"], "model_type": "qwen2"}


def test_mtp_target_with_mtp_layers_is_not_refused(tmp_path: Path) -> None:
    mtp(model(tmp_path, "mimo", **MIMO, num_nextn_predict_layers=1))
    mtp(model(tmp_path, "qwen3_5", model_type="qwen3_5_text", mtp_num_hidden_layers=1))
    mtp(model(tmp_path, "kimi", model_type="kimi_k3", text_config={"num_nextn_predict_layers": 1}))
    nested = {"num_nextn_predict_layers": 2}
    mtp(model(tmp_path, "inkling", model_type="inkling", mtp_config=nested))
    # vLLM counts these without a key: longcat_flash and step3p5 one layer, MiMo-V2 its own
    mtp(model(tmp_path, "longcat", model_type="longcat_flash"))
    mtp(model(tmp_path, "step", architectures=["Step3p5ForCausalLM"], model_type="step3p5"))
    mtp(model(tmp_path, "mimo_v2", architectures=["MiMoV2FlashForCausalLM"]))


def test_mtp_target_without_mtp_layers_is_refused(tmp_path: Path) -> None:
    """vLLM 0.32 refuses MTP for a Llama target ("Unsupported speculative method") and fails
    building the draft of a MiMo target without the key, in the engine worker."""
    llama = model(tmp_path, "llama")
    with pytest.raises(ConfigError, match="declares none") as info:
        mtp(llama)
    message = str(info.value)
    assert "(LlamaForCausalLM)" in message and f"{llama}/config.json" in message
    assert "no num_nextn_predict_layers, mtp_num_hidden_layers, num_mtp_modules" in message
    mimo = model(tmp_path, "mimo", **MIMO)
    with pytest.raises(ConfigError, match=r"MiMoForCausalLM\) declares none"):
        mtp(mimo)
    zero = model(tmp_path, "nemotron", model_type="nemotron_h", num_nextn_predict_layers=0)
    with pytest.raises(ConfigError, match="has num_nextn_predict_layers 0"):
        mtp(zero)
    with pytest.raises(ConfigError, match="declares none"):  # a model-specific name too
        mtp(llama, method="deepseek_mtp")


def test_mtp_check_leaves_what_it_cannot_tell(tmp_path: Path) -> None:
    llama = model(tmp_path, "llama")
    mtp(llama, {"hf_overrides": {"num_nextn_predict_layers": 1}})  # may add the layers
    mtp(llama, model=model(tmp_path, "mtp_weights"))  # MTP weights named by "model"
    mtp("org/not-cached")  # no files at hand
    ngram = {"method": "ngram", "num_speculative_tokens": 3}
    EngineConfig.create(llama, ngram, {}).check_speculative_config(SOURCE)  # not MTP
