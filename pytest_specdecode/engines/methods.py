"""The proposer table: what the plugin knows about each of vLLM's speculative methods.

One row per method of vLLM 0.32's ``SpeculativeConfig.method``; every question about a method
(has it a model, is it a head inside the target, which checks apply, what its ``model``
holds, does it act on a k schedule) asks this module. A new method is one row. Which methods
the installed vLLM accepts, and which need ``model``, is read from its source
(:mod:`.vllm_schema`), not from here.

A method not in the table (one of vLLM's model-specific ``*_mtp`` names, or a newer one) gets
:func:`method_facts`' defaults: a model, and for a name ending in ``_mtp`` (vLLM 0.32 runs each
as ``mtp``) the ``mtp`` row's facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Requirement:
    """A package a method's proposer imports that vLLM does not install with itself: without
    it vLLM refuses the method only once an engine starts, so the plugin looks first."""

    #: the module looked for (``importlib.util.find_spec``, which imports nothing)
    module: str
    #: the install command vLLM's own error asks for
    install: str
    #: what that install costs, as measured (docs/writing-tests.md#suffix-decoding)
    cost: str
    #: the page that explains
    docs: str


#: Suffix decoding's package. vLLM 0.32 ``SpeculativeConfig._validate_suffix_decoding`` raises
#: "Arctic Inference is required for suffix decoding. Install via `pip install
#: arctic-inference==0.1.1`." on ``method="suffix"`` when ``arctic_inference`` is missing.
ARCTIC_INFERENCE = Requirement(
    module="arctic_inference",
    install="pip install arctic-inference==0.1.1",
    cost=(
        "a source distribution whose isolated build downloads about 3 GB (torch 2.7.0 and "
        "CUDA wheels) and took 5 minutes on a 2-core machine"
    ),
    docs="docs/writing-tests.md#suffix-decoding",
)


@dataclass(frozen=True)
class Method:
    """What the plugin knows of one speculative method."""

    name: str
    #: runs a model: holds weights and its proposal costs forward passes (False: drafts come
    #: from lookups, n-grams of the prompt and output or a suffix tree, so no weights and a
    #: cost ratio of 0)
    model: bool = True
    #: a head reading the target's hidden states (EAGLE, EAGLE-3, MTP): checked against the
    #: target's hidden size and vocabulary and the base model it records
    head: bool = False
    #: an EAGLE head: vLLM's loader fuses its inputs through an ``fc`` layer (EAGLE-1: the token
    #: embedding and the target's last hidden state; EAGLE-3: hidden states of several target
    #: layers), so a folder without one, or a head of the other EAGLE method, is refused
    eagle: bool = False
    #: reads the hidden states of the target layers ``eagle_aux_hidden_state_layer_ids`` names
    #: (EAGLE-3; vLLM 0.32 ``GPUModelRunner._setup_eagle3_aux_hidden_state_outputs``)
    aux_layers: bool = False
    #: a complete language model sharing the target's tokenizer: checked for tokenizer,
    #: context window and size; the method vLLM takes for a config with ``model`` and no
    #: ``method``, and refused without ``model`` even where vLLM's own rules cannot be read
    standalone: bool = False
    #: without ``model`` vLLM reads the proposer's layers from the target's own checkpoint
    #: (vLLM 0.32 ``SpeculativeConfig.__post_init__`` makes ``model`` the target for mtp and
    #: dspark): no folder of its own to check, its weights inside the target's files
    in_target: bool = False
    #: what ``model`` holds, in a message asking for one
    placeholder: str | None = None
    #: why the method takes a k schedule and then drafts as if it were not there (vLLM 0.32)
    ignores_schedule: str | None = None
    #: a package the proposer imports that vLLM does not install (checked before a start)
    requires: Requirement | None = None


_ROWS = (
    Method(
        "draft_model",
        standalone=True,
        placeholder="<path or hub id of a draft model sharing the target's tokenizer>",
    ),
    Method(
        "eagle",
        head=True,
        eagle=True,
        placeholder="<path or hub id of an EAGLE head trained for the target>",
    ),
    Method(
        "eagle3",
        head=True,
        eagle=True,
        aux_layers=True,
        placeholder="<path or hub id of an EAGLE-3 head trained for the target>",
    ),
    Method("mtp", head=True, in_target=True),  # the target's MTP layers unless ``model`` says
    Method("dflash", placeholder="<path or hub id of a DFlash draft trained for the target>"),
    Method("dspark", in_target=True),  # layers shipped inside the target unless ``model`` says
    Method("medusa", placeholder="<path or hub id of Medusa heads trained for the target>"),
    Method(
        "mlp_speculator",
        placeholder="<path or hub id of an MLP speculator trained for the target>",
    ),
    Method(
        "custom_class",
        placeholder="<dotted import path of the proposer class, e.g. my_pkg.MyProposer>",
        ignores_schedule=(
            "vLLM calls a custom_class proposer without the scheduled k "
            "(GPUModelRunner.propose_draft_token_ids, which the CPU runner inherits), so it "
            "drafts its own number of tokens at every batch size"
        ),
    ),
    Method("ngram", model=False),
    Method("ngram_gpu", model=False),
    Method("suffix", model=False, requires=ARCTIC_INFERENCE),
)

#: The table, by method name.
METHODS: Mapping[str, Method] = {row.name: row for row in _ROWS}

#: Proposers that run no model (ngram, ngram_gpu, suffix).
NO_MODEL = frozenset(name for name, row in METHODS.items() if not row.model)

#: What ``model`` held for the n-gram proposer before vLLM had ``method`` (not a model).
_NGRAM_MODEL = "ngram"


def method_facts(method: str) -> Method:
    """The table's row for ``method``; for a method not in it, a model (the ``mtp`` row's
    facts when vLLM's name for it ends in ``_mtp``)."""
    row = METHODS.get(method)
    if row is not None:
        return row
    return replace(METHODS["mtp"], name=method) if method.endswith("_mtp") else Method(method)


def is_mtp(method: str) -> bool:
    """Whether ``method`` is vLLM's MTP (``mtp`` or a model-specific ``*_mtp`` name): a head
    made of layers of the target's own checkpoint."""
    row = method_facts(method)
    return row.head and row.in_target


def has_model(method: str) -> bool:
    """Whether ``method``'s proposer runs a model (False for ngram, ngram_gpu, suffix)."""
    return method_facts(method).model


def is_head(method: str) -> bool:
    """Whether ``method`` names a head that reads the target's hidden states (EAGLE, EAGLE3,
    MTP and the model-specific ``*_mtp`` names of vLLM's method list)."""
    return method_facts(method).head


def model_placeholder(method: str) -> str:
    """What ``model`` holds for ``method``, as a placeholder in messages."""
    row = method_facts(method)
    return row.placeholder or f"<path or hub id of the {method} proposer's weights>"


def implied_method(speculative_config: Mapping[str, Any]) -> str:
    """The method of a speculative config that names none, as vLLM reads it: the n-gram
    proposer for ``model`` "ngram", a draft model otherwise."""
    return "ngram" if speculative_config.get("model") == _NGRAM_MODEL else "draft_model"


def draft_model(speculative_config: Mapping[str, Any] | None) -> str | None:
    """The draft model or head a speculative config loads (None for n-gram and the like)."""
    model = (speculative_config or {}).get("model")
    return None if model in (None, _NGRAM_MODEL) else str(model)
