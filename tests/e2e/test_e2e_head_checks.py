"""Each misfit head is refused before any engine starts, on the installed vLLM: ``Bench`` on
the built-in tiny target (24 layers, hidden size 128, 1024 tokens) with a head folder that
does not fit it. The engine-starts log (``PYTEST_SPECDECODE_STARTS_LOG``, which
tests/conftest.py sets) shows that no engine started, though each test asks for a run."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode import Bench
from pytest_specdecode.engines.pool import STARTS_LOG_ENV
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.tiny import tiny_models

from ..e2e_support import ENGINE_KWARGS, needs_vllm
from ..heads import (
    eagle1_weights,
    eagle3_weights,
    head_folder,
    llama_head_config,
    speculators_config,
)

pytestmark = needs_vllm

AUX = "eagle_aux_hidden_state_layer_ids"


@pytest.fixture(scope="module")
def target() -> str:
    return str(tiny_models().target)


@pytest.fixture(scope="module")
def target_config(target: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((Path(target) / "config.json").read_text())
    return config


def starts() -> int:
    """Engine starts logged so far in this session."""
    path = os.environ.get(STARTS_LOG_ENV)
    assert path, f"{STARTS_LOG_ENV} is not set (tests/conftest.py sets it)"
    try:
        return len(Path(path).read_text(encoding="utf-8").splitlines())
    except FileNotFoundError:
        return 0


def refused(target: str, head: str, method: str, match: str) -> str:
    """The ConfigError ``Bench`` raises for ``head``; asserts that no engine started."""
    spec = {"method": method, "model": head, "num_speculative_tokens": 3}
    before = starts()
    with pytest.raises(ConfigError, match=match) as info:
        with Bench(target, spec, ENGINE_KWARGS, progress=None) as bench:
            bench.run(["The first line"], max_tokens=8, warmup=0)
    assert starts() == before
    return str(info.value)


def eagle3_head(root: Path, target: Mapping[str, Any], **fields: Any) -> str:
    config = llama_head_config(target, architectures=["Eagle3LlamaForCausalLM"], **fields)
    return head_folder(root, "head", config, eagle3_weights(config))


def test_head_with_another_vocabulary(
    tmp_path: Path, target: str, target_config: dict[str, Any]
) -> None:
    head = eagle3_head(tmp_path, target_config, vocab_size=2048)
    message = refused(target, head, "eagle3", "is a 'eagle3' head with vocab_size 2048")
    assert f"but the target {target!r} has vocab_size 1024" in message


def test_d2t_table_of_another_size(
    tmp_path: Path, target: str, target_config: dict[str, Any]
) -> None:
    config = llama_head_config(
        target_config, architectures=["Eagle3LlamaForCausalLM"], draft_vocab_size=256
    )
    head = head_folder(tmp_path, "head", config, eagle3_weights(config, d2t=512))
    refused(target, head, "eagle3", r"has a d2t table of 512 entries .* draft_vocab_size 256")


def test_aux_layers_beyond_the_target(
    tmp_path: Path, target: str, target_config: dict[str, Any]
) -> None:
    layer = llama_head_config(target_config)
    config = speculators_config(layer, target, **{AUX: [2, 12, 30]})
    head = head_folder(tmp_path, "head", config, eagle3_weights(layer, layer="layers.0"))
    message = refused(target, head, "eagle3", r"at layers \[2, 12, 30\]")
    assert "has num_hidden_layers 24" in message and "so [30] would never be collected" in message


def test_complete_model_given_as_a_head(target: str) -> None:
    draft = str(tiny_models().draft)
    refused(target, draft, "eagle3", "is not an EAGLE-3 head but a complete LlamaForCausalLM")


def test_eagle1_head_given_as_eagle3(
    tmp_path: Path, target: str, target_config: dict[str, Any]
) -> None:
    config = llama_head_config(target_config, architectures=["EagleLlamaForCausalLM"])
    head = head_folder(tmp_path, "head", config, eagle1_weights(target_config))
    refused(target, head, "eagle3", r"is an EAGLE-1 head .* but the method is 'eagle3'")


def test_fitting_head_is_not_refused(
    tmp_path: Path, target: str, target_config: dict[str, Any]
) -> None:
    """The same checks pass a head that fits (nothing run: no engine starts either)."""
    head = eagle3_head(tmp_path, target_config, draft_vocab_size=256, **{AUX: [2, 12, 24]})
    spec = {"method": "eagle3", "model": head, "num_speculative_tokens": 3}
    before = starts()
    with Bench(target, spec, ENGINE_KWARGS, progress=None):
        pass
    assert starts() == before
