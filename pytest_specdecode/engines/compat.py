"""Whether a speculative config fits its target, told from the model files before any engine
starts (no vLLM, torch or transformers import: ``config.json``, the tokenizer files and the
``*.safetensors`` headers are read with :mod:`json`).

Checked: a draft model's tokenizer (vocabulary size, token-to-id mapping, special tokens) and
context window against the target's, its size (a warning when it is the larger model); an
EAGLE/MTP head's hidden size, vocabulary (``vocab_size``, ``draft_vocab_size``, its ``d2t``
table) and recorded base model, an EAGLE-3 head's aux layer ids against the target's layers,
that an EAGLE method's folder holds a head of that method, and that a target run with MTP and no
``model`` has MTP layers (:func:`check_mtp_target`). Local folders are read directly; hub
names where their files are in the Hugging Face cache, otherwise the check is said to be
skipped (:class:`~pytest_specdecode.errors.UncheckedCompatibilityWarning`). Also checked: that a
package the method's proposer imports is installed (suffix: ``arctic_inference``), looked up
with :func:`importlib.util.find_spec`, which imports neither it nor vLLM.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import struct
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from ..errors import ConfigError, SpecDecodeWarning, UncheckedCompatibilityWarning
from .methods import draft_model, is_mtp, method_facts
from .model_folder import config_context, looks_local

#: Special-token roles compared between draft and target. A different ``bos``/``unk`` means
#: another tokenizer; a different ``eos``/``pad`` is also what separates a base model from its
#: instruct variant (same vocabulary), so it is a warning.
_STRICT_ROLES = ("bos", "unk")
_LOOSE_ROLES = ("eos", "pad")

#: Where checkpoints record the model an EAGLE/MTP head was trained on.
_BASE_MODEL_KEYS = ("base_model_name_or_path", "base_model", "target_model", "verifier")


def hub_cache() -> Path:
    """The Hugging Face hub cache folder, as ``huggingface_hub`` finds it."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.path.expanduser(os.environ[variable]))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"])) / "hub"
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(os.path.expanduser(cache)) / "huggingface" / "hub"


def cached_snapshot(name: str, revision: str | None = None) -> Path | None:
    """The cached snapshot folder of hub model ``name`` (``org/name``) at ``revision`` (a
    branch, tag or commit; default the newest ``main``), or ``None`` when not cached."""
    repo = hub_cache() / f"models--{name.replace('/', '--')}"
    ref = repo / "refs" / (revision or "main")
    try:
        commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
    except OSError:
        commit = revision
    if commit and (repo / "snapshots" / commit / "config.json").is_file():
        return repo / "snapshots" / commit
    if revision is not None:
        return None
    try:
        candidates = [p for p in (repo / "snapshots").iterdir() if (p / "config.json").is_file()]
    except OSError:
        return None
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


def locate(model: str, revision: Any = None) -> Path | None:
    """The folder holding ``model``'s files: a local folder, or a hub name's cached snapshot
    (at ``revision``, when a string)."""
    if looks_local(model):
        path = Path(os.path.expanduser(model))
        return path if path.is_dir() else None
    return cached_snapshot(model, revision if isinstance(revision, str) else None)


def _stamp(path: Path) -> tuple[str, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return str(path), stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=256)
def _json_at(path: str, _mtime: int, _size: int) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file, ``{}`` when missing or not an object (cached while unchanged)."""
    stamp = _stamp(path)
    data = _json_at(*stamp) if stamp else None
    return data if isinstance(data, dict) else {}


def token_ids(tokenizer: Mapping[str, Any]) -> dict[str, int]:
    """The token-to-id mapping of a parsed ``tokenizer.json``: the model's vocabulary (a dict,
    or a Unigram list of ``[token, score]``) and the added tokens."""
    model = tokenizer.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    mapping: dict[str, int] = {}
    if isinstance(vocab, dict):
        mapping = {str(k): v for k, v in vocab.items() if isinstance(v, int)}
    elif isinstance(vocab, list):
        mapping = {str(e[0]): i for i, e in enumerate(vocab) if isinstance(e, list) and e}
    for added in tokenizer.get("added_tokens") or ():
        if isinstance(added, dict) and isinstance(added.get("id"), int):
            mapping[str(added.get("content"))] = added["id"]
    return mapping


@dataclass(frozen=True)
class Vocabulary:
    """What is compared of a ``tokenizer.json``: its size and a digest of its mapping."""

    size: int
    digest: str


@lru_cache(maxsize=64)
def _vocabulary_at(path: str, _mtime: int, _size: int) -> Vocabulary | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    mapping = token_ids(data) if isinstance(data, dict) else {}
    if not mapping:
        return None
    text = json.dumps(sorted(mapping.items()), ensure_ascii=False, separators=(",", ":"))
    return Vocabulary(len(mapping), hashlib.sha256(text.encode("utf-8")).hexdigest())


def _special_tokens(folder: Path, config: Mapping[str, Any]) -> dict[str, tuple[Any, str]]:
    """Role -> (value, where) for the bos/eos/pad/unk token strings (tokenizer_config.json,
    else special_tokens_map.json) and ids (generation_config.json, else config.json)."""
    found: dict[str, tuple[Any, str]] = {}
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        data = read_json(folder / name)
        for role in (*_STRICT_ROLES, *_LOOSE_ROLES):
            value = data.get(f"{role}_token")
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str) and f"{role}_token" not in found:
                found[f"{role}_token"] = (value, name)
    generation = read_json(folder / "generation_config.json")
    for role in (*_STRICT_ROLES, *_LOOSE_ROLES):
        key = f"{role}_token_id"
        sources: tuple[tuple[Mapping[str, Any], str], ...] = (
            (generation, "generation_config.json"),
            (config, "config.json"),
        )
        for recorded, name in sources:
            value = recorded.get(key)
            if isinstance(value, list):
                value = sorted(v for v in value if isinstance(v, int))
            if isinstance(value, int | list) and not isinstance(value, bool):
                found[key] = (value, name)
                break
    return found


@dataclass(frozen=True)
class Tensor:
    """One tensor of a ``*.safetensors`` header: its shape and the file it is in."""

    shape: tuple[int, ...]
    file: str


@lru_cache(maxsize=64)
def _header_at(path: str, _mtime: int, _size: int) -> dict[str, Tensor] | None:
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > 100_000_000:
                return None
            header = json.loads(handle.read(length))
        file = Path(path).name
        return {
            name: Tensor(tuple(int(d) for d in tensor.get("shape") or ()), file)
            for name, tensor in header.items()
            if name != "__metadata__" and isinstance(tensor, dict)
        }
    except (OSError, ValueError, TypeError, AttributeError, struct.error):
        return None


def safetensors_tensors(folder: Path) -> dict[str, Tensor] | None:
    """The tensors of ``folder``'s ``*.safetensors`` headers (shapes only, no weights; cached
    while unchanged), or ``None`` when there are none or one cannot be read."""
    tensors: dict[str, Tensor] = {}
    files = sorted(folder.glob("*.safetensors"))
    for file in files:
        stamp = _stamp(file)
        header = _header_at(*stamp) if stamp else None
        if header is None:
            return None
        tensors.update(header)
    return tensors if files else None


def _safetensors_parameters(folder: Path) -> int | None:
    """The parameter count from the ``*.safetensors`` headers."""
    tensors = safetensors_tensors(folder)
    if tensors is None:
        return None
    return sum(math.prod(tensor.shape) for tensor in tensors.values())


def _count(value: Any) -> int | None:
    """``value`` if it is a positive int, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _int(data: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        if (value := _count(data.get(key))) is not None:
            return value
    return None


def estimate_parameters(config: Mapping[str, Any]) -> int | None:
    """A decoder's parameter count estimated from its ``config.json`` (embeddings, attention
    with grouped KV heads, gated MLP or experts), or ``None`` when its sizes are not given."""
    nested = config.get("text_config")
    text: Mapping[str, Any] = nested if isinstance(nested, dict) else config
    hidden = _int(text, "hidden_size", "n_embd", "d_model")
    layers = _int(text, "num_hidden_layers", "n_layer", "num_layers")
    vocab = _int(text, "vocab_size")
    if hidden is None or layers is None or vocab is None:
        return None
    heads = _int(text, "num_attention_heads", "n_head") or 1
    kv_heads = _int(text, "num_key_value_heads") or heads
    head_dim = _int(text, "head_dim") or hidden // heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    experts = _int(text, "num_local_experts", "num_experts", "n_routed_experts") or 1
    inner = _int(text, "moe_intermediate_size") if experts > 1 else None
    mlp = 3 * hidden * (inner or _int(text, "intermediate_size", "n_inner") or 4 * hidden)
    embeddings = vocab * hidden * (1 if text.get("tie_word_embeddings") else 2)
    return embeddings + layers * (attention + experts * mlp)


def _billions(count: int) -> str:
    if count >= 1e9:
        return f"{count / 1e9:.1f}B"
    return f"{count / 1e6:.1f}M" if count >= 1e6 else f"{count / 1e3:.1f}k"


@dataclass
class ModelFiles:
    """The files of one model as given (``name``), found in ``folder``."""

    name: str
    folder: Path

    @cached_property
    def config(self) -> dict[str, Any]:
        return read_json(self.folder / "config.json")

    @property
    def text_config(self) -> Mapping[str, Any]:
        nested = self.config.get("text_config")
        return nested if isinstance(nested, dict) else self.config

    def where(self, file: str = "config.json") -> str:
        return str(self.folder / file)

    @cached_property
    def tensors(self) -> dict[str, Tensor] | None:
        return safetensors_tensors(self.folder)

    @cached_property
    def vocabulary(self) -> Vocabulary | None:
        stamp = _stamp(self.folder / "tokenizer.json")
        return _vocabulary_at(*stamp) if stamp else None

    @cached_property
    def special_tokens(self) -> dict[str, tuple[Any, str]]:
        return _special_tokens(self.folder, self.config)

    def parameters(self, prefer_files: bool) -> tuple[int, str] | None:
        if prefer_files:
            count = _safetensors_parameters(self.folder)
            return None if count is None else (count, "its *.safetensors headers")
        count = estimate_parameters(self.config)
        return None if count is None else (count, "estimated from its config.json")


_warned: set[tuple[str, ...]] = set()


def _warn_once(message: str, category: type[Warning], *key: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, category, stacklevel=4)


def _installed(module: str) -> bool:
    """Whether top-level ``module`` can be imported here (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: in sys.modules without a __spec__
        return module in sys.modules


def check_requirement(method: str, source: str) -> None:
    """Raise :class:`ConfigError` when ``method``'s proposer imports a package that is not
    installed (suffix: ``arctic_inference``); methods that import none never look."""
    need = method_facts(method).requires
    if need is None or _installed(need.module):
        return
    raise ConfigError(
        f'{source}: method "{method}" needs the module {need.module!r}, which is not installed '
        f"for this Python ({sys.executable}); vLLM starts no {method} engine without it. "
        f"Install it with `{need.install}`, the command vLLM asks for; that is {need.cost}. "
        f"Or choose another method (ngram needs no model either); see {need.docs}"
    )


def check_compatibility(
    target: str,
    spec: Mapping[str, Any],
    engine_kwargs: Mapping[str, Any],
    method: str,
    source: str,
) -> list[str]:
    """Raise :class:`ConfigError` when the draft or head in ``spec`` cannot work with
    ``target``, warn (:class:`SpecDecodeWarning`) when it works but is likely a mistake, and
    return notes on what could not be checked (also warned, once per model)."""
    draft_name = spec.get("model")
    if not isinstance(draft_name, str) or draft_model(spec) in (None, target):
        return []
    facts = method_facts(method)
    if not facts.standalone and not facts.head:
        return []
    found = {
        "draft": locate(draft_name, spec.get("revision")),
        "target": locate(target, engine_kwargs.get("revision")) if target else None,
    }
    notes = [
        f"the {role} {name!r} is not in the Hugging Face cache ({hub_cache()}), so its "
        f"compatibility was not checked before the engine starts; download it first "
        f"(`hf download {name}`) to have it checked"
        for role, name in (("draft", draft_name), ("target", target))
        if found[role] is None and name and not looks_local(name)
    ]
    for note in notes:
        _warn_once(f"{source}: {note}", UncheckedCompatibilityWarning, note)
    draft_folder, target_folder = found["draft"], found["target"]
    if draft_folder is None or target_folder is None:
        return notes
    draft, model = ModelFiles(draft_name, draft_folder), ModelFiles(target, target_folder)
    where = f"{source}: the draft {draft_name!r}"
    if facts.head:
        _check_head(draft, model, method, where, "hf_overrides" in engine_kwargs)
        return notes
    if not spec.get("use_heterogeneous_vocab"):
        tokenizer = _target_tokenizer(target, engine_kwargs) or model
        _check_tokenizers(draft, model, tokenizer, where)
    _check_context(draft, model, spec, engine_kwargs, where)
    _check_size(draft, model, where)
    return notes


def _target_tokenizer(target: str, engine_kwargs: Mapping[str, Any]) -> ModelFiles | None:
    """The files of the tokenizer the target engine uses (``tokenizer=`` in engine_kwargs)."""
    name = engine_kwargs.get("tokenizer")
    if not isinstance(name, str) or name == target:
        return None
    folder = locate(name, engine_kwargs.get("tokenizer_revision"))
    return None if folder is None else ModelFiles(name, folder)


_HETEROGENEOUS = (
    ', or set "use_heterogeneous_vocab": true in speculative_config to have vLLM map tokens '
    "between the two vocabularies"
)


def _check_tokenizers(
    draft: ModelFiles, target: ModelFiles, tokenizer: ModelFiles, where: str
) -> None:
    fix = (
        "choose a draft trained with the target's tokenizer (a smaller model of the same "
        f"family){_HETEROGENEOUS}"
    )
    target_vocab, draft_vocab = (
        _int(target.text_config, "vocab_size"),
        _int(draft.text_config, "vocab_size"),
    )
    if target_vocab and draft_vocab and target_vocab != draft_vocab:
        raise ConfigError(
            f"{where} has vocab_size {draft_vocab} but the target {target.name!r} has "
            f"{target_vocab} (config.json); a draft model must share the target's vocabulary "
            f"(same tokenizer family): {fix}"
        )
    ours, theirs = draft.vocabulary, tokenizer.vocabulary
    if ours and theirs and ours != theirs:
        raise ConfigError(
            f"{where} has another tokenizer than the target {target.name!r}: "
            f"{_first_difference(draft, tokenizer)}; the draft's proposals would be "
            f"other tokens than the target's, so none would be accepted: {fix}"
        )
    strict: list[str] = []
    loose: list[str] = []
    ours_special, theirs_special = draft.special_tokens, tokenizer.special_tokens
    if tokenizer is not target:  # ids from the target's config, strings from its tokenizer
        theirs_special = {**target.special_tokens, **theirs_special}
    for key in sorted(ours_special.keys() & theirs_special.keys()):
        (mine, my_file), (other, other_file) = ours_special[key], theirs_special[key]
        if mine != other:
            what = f"{key} {mine!r} ({my_file}) but the target has {other!r} ({other_file})"
            (strict if key.split("_")[0] in _STRICT_ROLES else loose).append(what)
    if strict:
        raise ConfigError(
            f"{where} has another tokenizer than the target {target.name!r}: "
            f"{'; '.join(strict)}: {fix}"
        )
    if loose:
        warnings.warn(
            f"{where} has other special tokens than the target {target.name!r}: "
            f"{'; '.join(loose)}. A base model and its instruct variant differ so and work "
            "together; anything else means another tokenizer: check that the draft was "
            "trained with the target's tokenizer",
            SpecDecodeWarning,
            stacklevel=4,
        )


def _first_difference(draft: ModelFiles, target: ModelFiles) -> str:
    """Both vocabulary sizes and one token whose id differs (read again: a rare path)."""
    mine = token_ids(read_json(draft.folder / "tokenizer.json"))
    other = token_ids(read_json(target.folder / "tokenizer.json"))
    sizes = (
        f"{len(mine)} tokens in {draft.where('tokenizer.json')}, "
        f"{len(other)} in {target.where('tokenizer.json')}"
    )
    for token in sorted(mine.keys() | other.keys(), key=lambda t: (mine.get(t, -1), t)):
        if mine.get(token) != other.get(token):
            ids = f"id {mine.get(token)} in the draft but {other.get(token)} in the target"
            return f"token {token!r} is {ids} ({sizes})"
    return sizes


def _check_context(
    draft: ModelFiles,
    target: ModelFiles,
    spec: Mapping[str, Any],
    engine_kwargs: Mapping[str, Any],
    where: str,
) -> None:
    if "hf_overrides" in engine_kwargs:
        return
    window = config_context(draft.config)
    if window is None:
        return
    length, key = window
    limit = spec.get("max_model_len")
    if isinstance(limit, int) and not isinstance(limit, bool):
        if limit > length:
            raise ConfigError(
                f"{where} has a context window of {length} ({key} in {draft.where()}) but "
                f"speculative_config max_model_len is {limit}; set it to at most {length}"
            )
        return  # the user caps the draft's length on purpose
    run = engine_kwargs.get("max_model_len")
    if isinstance(run, int) and not isinstance(run, bool) and run > 0:
        run_length, origin = run, "max_model_len in engine_kwargs"
    else:
        found = config_context(target.config)
        if found is None:
            return
        run_length, origin = found[0], f"the target's {found[1]} in {target.where()}"
    if length < run_length:
        raise ConfigError(
            f"{where} has a context window of {length} ({key} in {draft.where()}), shorter "
            f"than the run's max_model_len {run_length} ({origin}); give engine_kwargs "
            f"max_model_len <= {length}, choose a draft with a longer context, or set "
            f'"max_model_len": {length} in speculative_config to speculate only within it'
        )


def _check_size(draft: ModelFiles, target: ModelFiles, where: str) -> None:
    for prefer_files in (True, False):
        mine, theirs = draft.parameters(prefer_files), target.parameters(prefer_files)
        if mine and theirs:
            break
    else:
        return
    if mine[0] > theirs[0]:
        warnings.warn(
            f"{where} ({_billions(mine[0])} parameters, {mine[1]}) is larger than the target "
            f"{target.name!r} ({_billions(theirs[0])} parameters, {theirs[1]}); a draft must "
            "be much cheaper than its target to gain: check that draft and target are not "
            "swapped, or choose a smaller draft",
            SpecDecodeWarning,
            stacklevel=4,
        )


# -- heads: what vLLM 0.32 reads of them (paths under the installed vllm/ package) ---------

#: Keys of a speculators-format head (``speculators_config`` in its config.json) that vLLM
#: takes from the top level of config.json, all others coming from ``transformer_layer_config``
#: (transformers_utils/configs/speculators/base.py ``extract_transformers_pre_trained_config``
#: and algos.py ``update_eagle3``, which sets draft_vocab_size from the top level even when
#: it is absent there).
_SPECULATORS_TOP = ("draft_vocab_size", "target_hidden_size", "eagle_aux_hidden_state_layer_ids")

#: The vLLM method that runs each speculators-format head type: algos.py registers eagle3,
#: peagle, dflash, dflash2 and dspark, and base.py ``build_vllm_speculative_config`` runs peagle
#: as eagle3 and dflash2 as dflash; "eagle" is the speculators library's EAGLE-1 head.
_SPECULATORS_METHOD = {
    "eagle": "eagle", "eagle3": "eagle3", "peagle": "eagle3",
    "dflash": "dflash", "dflash2": "dflash", "dspark": "dspark",
}  # fmt: skip

#: Names of an EAGLE head's fusion layer in its weights: ``fc`` (``LlamaModel.fc`` of
#: model_executor/models/llama_eagle.py and llama_eagle3.py; likewise qwen3_eagle3.py,
#: deepseek_eagle3.py, llama4_eagle.py) or Mistral's ``eagle_linear`` (mistral_eagle.py maps it
#: to ``model.fc``). A complete causal LM has none.
_FUSION = frozenset({"fc", "eagle_linear"})

_AUX = "eagle_aux_hidden_state_layer_ids"
_LABELS = {"eagle": "an EAGLE-1", "eagle3": "an EAGLE-3"}


def head_field(config: Mapping[str, Any], key: str) -> tuple[Any, str]:
    """A field of a head's ``config.json`` as vLLM reads it, and its key there: a
    speculators-format head's from ``transformer_layer_config`` but for
    :data:`_SPECULATORS_TOP`."""
    layer = config.get("transformer_layer_config")
    if "speculators_config" in config and isinstance(layer, dict):
        if not (key == "draft_vocab_size" or (key in _SPECULATORS_TOP and config.get(key))):
            return layer.get(key), f"transformer_layer_config.{key}"
    return config.get(key), key


def _eagle_config(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    value, key = head_field(config, "eagle_config")
    return (value if isinstance(value, dict) else {}), key


def uses_aux_hidden_states(config: Mapping[str, Any]) -> bool:
    """Whether an EAGLE-3 head fuses the target's aux hidden states: unless its eagle_config
    says ``use_aux_hidden_state`` false (v1/spec_decode/llm_base_proposer.py
    ``_get_eagle3_use_aux_hidden_state_from_config``); such a head has no ``fc``
    (llama_eagle3.py ``load_weights``)."""
    return bool(_eagle_config(config)[0].get("use_aux_hidden_state", True))


def aux_layer_ids(config: Mapping[str, Any]) -> tuple[list[Any], str] | None:
    """The target layers whose hidden states an EAGLE-3 head reads, and the key they are read
    from, where v1/worker/gpu_model_runner.py ``_get_eagle3_aux_layers_from_config`` finds
    them: the config's eagle_aux_hidden_state_layer_ids, else its eagle_config's (None: the
    target model's default layers; a DFlash ``dflash_config`` read there is method dflash's)."""
    ids, key = head_field(config, _AUX)
    if not ids:
        eagle, where = _eagle_config(config)
        if eagle:
            ids, key = eagle.get(_AUX), f"{where}.{_AUX}"
    return (list(ids), key) if isinstance(ids, list | tuple) and ids else None


def _head_kind(draft: ModelFiles) -> tuple[str, str] | None:
    """The method whose head ``draft`` is, as its files tell, and what tells it."""
    config = draft.config
    if "speculators_config" in config:
        kind = config.get("speculators_model_type")
        if isinstance(kind, str) and kind in _SPECULATORS_METHOD:
            return _SPECULATORS_METHOD[kind], f"speculators_model_type {kind!r} in {draft.where()}"
        return None
    archs = [a for a in config.get("architectures") or () if isinstance(a, str)]
    for arch in archs:  # EAGLEConfig (transformers_utils/configs/eagle.py) keeps these names
        if arch.startswith("Eagle3") or arch.endswith("Eagle3"):
            return "eagle3", f"architectures {archs} in {draft.where()}"
        if arch.startswith("Eagle"):
            return "eagle", f"architectures {archs} in {draft.where()}"
    fc = (draft.tensors or {}).get("fc.weight")
    hidden = _int(config, "hidden_size")
    if fc is None or len(fc.shape) != 2 or hidden is None:
        return None
    # fc's inputs: 2 x hidden_size for EAGLE-1 (the token embedding and one hidden state,
    # llama_eagle.py), k x target_hidden_size for EAGLE-3 (k aux hidden states: 3 unless the
    # config says otherwise, llama_eagle3.py and qwen3_eagle3.py)
    width, eagle1 = fc.shape[1], 2 * hidden
    ids = (config.get(_AUX), _eagle_config(config)[0].get(_AUX))
    counts = {3, _int(config, "num_aux_hidden_states") or 3}
    counts.update(len(i) for i in ids if isinstance(i, list) and i)
    target_hidden = _int(config, "target_hidden_size") or hidden
    eagle3 = {k * target_hidden for k in counts}
    shape = f"fc.weight of shape {list(fc.shape)} in {draft.where(fc.file)}"
    if width == eagle1 and width not in eagle3:
        return "eagle", f"{shape}: {width} inputs, 2 x hidden_size {hidden}"
    if width in eagle3 and width != eagle1:
        k = width // target_hidden
        return "eagle3", f"{shape}: {width} inputs, {k} hidden states of size {target_hidden}"
    return None


def _check_head_kind(draft: ModelFiles, method: str, where: str) -> None:
    """An EAGLE method's ``model`` must be a head of that method, not a complete model nor a
    head of another method."""
    kind = _head_kind(draft)
    if kind is not None and kind[0] != method:
        label = _LABELS.get(kind[0], f"a {kind[0]}")
        raise ConfigError(
            f"{where} is {label} head ({kind[1]}) but the method is {method!r}; vLLM builds "
            f"other layers for each method, so its weights would not fit: use "
            f'"method": "{kind[0]}" for it, or give {_LABELS.get(method, method)} head '
            "trained for the target"
        )
    tensors = draft.tensors
    if not tensors or any(_FUSION.intersection(name.split(".")) for name in tensors):
        return
    if method_facts(method).aux_layers and not uses_aux_hidden_states(draft.config):
        return
    archs = draft.config.get("architectures")
    what = f"a complete {'/'.join(archs)} model" if archs else "a complete model"
    files = sorted({tensor.file for tensor in tensors.values()})
    raise ConfigError(
        f"{where} is not {_LABELS.get(method, method)} head but {what}: its weights "
        f"({', '.join(files)} in {draft.folder}) have no fusion layer fc (vLLM's EAGLE heads "
        f"fuse their inputs through one: llama_eagle.py, llama_eagle3.py) but "
        f"{len(tensors)} tensors such as {', '.join(sorted(tensors)[:3])}; give the folder "
        f"of {_LABELS.get(method, method)} head trained for the target, or run this model "
        'as a draft with "method": "draft_model"'
    )


def _check_head_vocabulary(draft: ModelFiles, target: ModelFiles, method: str, where: str) -> None:
    """The head's vocabulary is the target's; its draft vocabulary (and ``d2t`` map) a part."""
    expected = _int(target.text_config, "vocab_size")
    if expected is None:
        return
    theirs = f"the target {target.name!r} has vocab_size {expected} ({target.where()})"
    fix = "choose the head trained for this target"
    value, key = head_field(draft.config, "vocab_size")
    vocab = _count(value)
    if vocab is not None and vocab != expected:
        raise ConfigError(
            f"{where} is a {method!r} head with vocab_size {vocab} ({key} in {draft.where()}) "
            f"but {theirs}; the head embeds the target's token ids and proposes ids of its "
            f"vocabulary: {fix}"
        )
    value, size_key = head_field(draft.config, "draft_vocab_size")
    size = _count(value)
    if size is None:  # llama_eagle3.py: vocab_size then
        size, size_key = vocab, f"{key}, as there is no draft_vocab_size,"
    if size is not None and size > expected:
        raise ConfigError(
            f"{where} has draft_vocab_size {size} ({size_key} in {draft.where()}) but {theirs}; "
            "a draft vocabulary is part of the target's (the head's d2t table maps each "
            f"draft token to a target token id): {fix}"
        )
    d2t = next(
        ((name, t) for name, t in (draft.tensors or {}).items() if name.split(".")[-1] == "d2t"),
        None,
    )
    if size is None or d2t is None or len(d2t[1].shape) != 1 or d2t[1].shape[0] == size:
        return
    name, tensor = d2t
    raise ConfigError(
        f"{where} has a d2t table of {tensor.shape[0]} entries (tensor {name!r} in "
        f"{draft.where(tensor.file)}) but draft_vocab_size {size} ({size_key} in "
        f"{draft.where()}); vLLM sizes the head's lm_head and its draft-to-target map by "
        "draft_vocab_size (llama_eagle3.py), so these weights would not load: set "
        f"draft_vocab_size to {tensor.shape[0]} in config.json, or use the config.json that "
        "came with these weights"
    )


def _check_aux_layers(draft: ModelFiles, target: ModelFiles, method: str, where: str) -> None:
    """The target layers an EAGLE-3 head reads exist."""
    found = aux_layer_ids(draft.config)
    layers = _int(target.text_config, "num_hidden_layers", "n_layer", "num_layers")
    if found is None or layers is None or not uses_aux_hidden_states(draft.config):
        return
    ids, key = found
    bad = [i for i in ids if not (isinstance(i, int) and 0 <= i <= layers)]
    if bad:
        # llama.py, qwen2.py: hidden state i is collected after the target's first i layers
        # (``_maybe_add_hidden_state``), for i from 0 (the embeddings) to num_hidden_layers
        raise ConfigError(
            f"{where} is a {method!r} head reading the target's hidden states at layers "
            f"{ids} ({key} in {draft.where()}) but the target {target.name!r} has "
            f"num_hidden_layers {layers} ({target.where()}): vLLM collects the hidden states "
            f"after 0 (the embeddings) to {layers} of its layers, so {bad} would never be "
            "collected and the head would get fewer inputs than its fc layer takes: choose the "
            f"head trained for this target, or give ids from 0 to {layers}"
        )


def recorded_base(config: Mapping[str, Any]) -> tuple[str, str] | None:
    """The base model a head records it was trained on, and the key it is read from."""
    speculators = config.get("speculators_config")
    if isinstance(speculators, dict):
        verifier = speculators.get("verifier")
        if isinstance(verifier, dict) and isinstance(verifier.get("name_or_path"), str):
            return verifier["name_or_path"], "speculators_config.verifier.name_or_path"
    for key in _BASE_MODEL_KEYS:
        value = config.get(key)
        if isinstance(value, str) and value:
            return value, key
    return None


def _names_of(target: ModelFiles) -> set[str]:
    """The lower-cased names a target goes by: as given, its folder name, its cached hub name
    and the ``_name_or_path`` its config records."""
    names = {target.name.rstrip("/").lower(), target.folder.name.lower()}
    for part in target.folder.parts:
        if part.startswith("models--"):
            names.add(part[len("models--") :].replace("--", "/").lower())
    recorded = target.config.get("_name_or_path")
    if isinstance(recorded, str) and recorded:
        names.add(recorded.rstrip("/").lower())
    return names


def _check_head(
    draft: ModelFiles, target: ModelFiles, method: str, where: str, overridden: bool
) -> None:
    """A head of ``method`` that fits the target (``overridden``: the target's hf_overrides
    may change its vocabulary and layers, so those are not compared)."""
    facts = method_facts(method)
    if facts.eagle:
        _check_head_kind(draft, method, where)
    expected = _int(target.text_config, "hidden_size", "n_embd", "d_model")
    value, key = head_field(draft.config, "target_hidden_size")
    if _count(value) is None:
        value, key = head_field(draft.config, "hidden_size")
    reads = _count(value)
    if expected and reads and expected != reads:
        raise ConfigError(
            f"{where} is a {method!r} head for hidden size {reads} ({key} in "
            f"{draft.where()}) but the target {target.name!r} has hidden_size {expected}; the "
            "head reads the target's hidden states: choose the head trained for this target"
        )
    if not overridden:
        _check_head_vocabulary(draft, target, method, where)
        if facts.aux_layers:
            _check_aux_layers(draft, target, method, where)
    base = recorded_base(draft.config)
    if base is None:
        return
    name, key = base
    speculators = draft.config.get("speculators_config") or {}
    verifier = speculators.get("verifier") if isinstance(speculators, dict) else None
    archs = verifier.get("architectures") if isinstance(verifier, dict) else None
    target_archs = target.config.get("architectures")
    if archs and target_archs and set(archs).isdisjoint(target_archs):
        raise ConfigError(
            f"{where} was trained for a {'/'.join(archs)} model ({name}) but the target "
            f"{target.name!r} is a {'/'.join(target_archs)}: choose the head trained for "
            "this target"
        )
    names = _names_of(target)
    short = {n.rsplit("/", 1)[-1] for n in names}
    if name.rstrip("/").lower() in names or name.rstrip("/").rsplit("/", 1)[-1].lower() in short:
        return
    message = (
        f"{where} records base model {name!r} ({key} in {draft.where()}) but the target is "
        f"{target.name!r}: choose the head trained for this target"
    )
    if not looks_local(target.name):
        raise ConfigError(message)
    warnings.warn(  # a local folder may be the same model under another name
        f"{message}, or ignore this if {target.name!r} holds {name!r}",
        SpecDecodeWarning,
        stacklevel=4,
    )


# -- MTP: the draft is layers of the target's own checkpoint ------------------------------

#: Keys vLLM 0.32 reads a target's count of MTP layers from (config/speculative.py
#: ``SpeculativeConfig.hf_config_override``), in ``config.json``, its ``text_config`` (Kimi-K3,
#: GLM-5-Next) or its ``mtp_config`` (Inkling).
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")

#: Targets whose MTP layers vLLM 0.32 counts without such a key: a default of one layer
#: (longcat_flash, step3p5, step3p7) or a fixed count (MiMo-V2).
_MTP_WITHOUT_KEY = ("longcat_flash", "step3p5", "step3p7", "Step3p5", "Step3p7", "MiMoV2")


def mtp_layer_count(config: Mapping[str, Any]) -> tuple[int, str] | None:
    """The number of MTP layers a target's ``config.json`` declares and the key it is read
    from (:data:`MTP_LAYER_KEYS`), or None when it declares none."""
    places: list[tuple[Mapping[str, Any], str]] = [(config, "")]
    for nested in ("text_config", "mtp_config"):
        value = config.get(nested)
        if isinstance(value, dict):
            places.append((value, f"{nested}."))
    for place, prefix in places:
        for key in MTP_LAYER_KEYS:
            value = place.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value, prefix + key
    return None


def check_mtp_target(
    target: str, spec: Mapping[str, Any], engine_kwargs: Mapping[str, Any], method: str, source: str
) -> None:
    """Raise :class:`ConfigError` when MTP without ``model`` is asked of a target whose
    ``config.json`` declares no MTP layers. vLLM 0.32 refuses the method for a target it has
    no MTP draft for (a Llama: "Unsupported speculative method: 'mtp'", while configuring the
    engine) and fails building the draft of a MiMo target without the key (``AttributeError:
    'Qwen2Config' object has no attribute 'num_nextn_predict_layers'`` in the engine worker,
    a minute into the start on a 2-core CPU). Skipped where the files are not at hand, where
    ``hf_overrides`` may add the layers, and for the targets vLLM counts without a key."""
    if not is_mtp(method) or spec.get("model") or "hf_overrides" in engine_kwargs or not target:
        return
    folder = locate(target, engine_kwargs.get("revision"))
    if folder is None:
        return
    model = ModelFiles(target, folder)
    config = model.config
    if not config:
        return
    kinds = [config.get("model_type"), *(config.get("architectures") or ())]
    if any(isinstance(k, str) and k.startswith(_MTP_WITHOUT_KEY) for k in kinds):
        return
    found = mtp_layer_count(config)
    if found is not None and found[0] > 0:
        return
    archs = config.get("architectures") or [config.get("model_type")]
    said = f"{found[1]} {found[0]}" if found is not None else f"no {', '.join(MTP_LAYER_KEYS)}"
    raise ConfigError(
        f'{source}: "method": "{method}" with no "model" drafts with the MTP layers of the '
        f"target's own checkpoint, but the target {target!r} "
        f"({'/'.join(str(a) for a in archs)}) declares none: its config.json "
        f"({model.where()}) has {said}, the keys vLLM reads the count of MTP layers from. "
        "Use a target that ships MTP layers (such as MiMo, DeepSeek-V3, Qwen3-Next or GLM-4.5), "
        'name the MTP weights with "model", or choose another method'
    )
