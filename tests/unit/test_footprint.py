"""The one extra-memory figure: the draft's weights plus its KV cache, the same in the result,
the checklist, the ranking and the table."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_specdecode.baselines.report import Report, ReportEntry
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.footprint import (
    ProposerMemory,
    checkpoint_bytes,
    mtp_layer_bytes,
    proposer_footprint,
)
from pytest_specdecode.engines.protocol import Counters, Sampling
from pytest_specdecode.measure.choice import Ranking
from pytest_specdecode.measure.figures import build_result
from pytest_specdecode.measure.paired import PairedRounds
from pytest_specdecode.measure.result import Result
from pytest_specdecode.reporting.checklist import SPARE_MEMORY, checklists
from pytest_specdecode.reporting.table import ranking_rows

from ..helpers import fake_round


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A safetensors file whose header describes ``tensors`` (name -> dtype, shape)."""
    sizes = {"F32": 4, "BF16": 2, "I8": 1}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for dim in shape:
            n *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"\0" * offset)


def test_checkpoint_bytes_cast_floating_tensors_to_the_engine_dtype(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "a.safetensors", {"w": ("F32", [4, 8]), "q": ("I8", [16])})
    write_safetensors(tmp_path / "b.safetensors", {"v": ("BF16", [10])})
    assert checkpoint_bytes(tmp_path, 2) == (32 + 10) * 2 + 16  # int8 stays as stored
    assert checkpoint_bytes(tmp_path, 4) == (32 + 10) * 4 + 16
    assert checkpoint_bytes(tmp_path / "missing", 4) is None
    (tmp_path / "c.safetensors").write_bytes(b"\x05")
    assert checkpoint_bytes(tmp_path, 4) is None  # unreadable: unknown, not a guess


class FakeModelConfig:
    """The parts of vLLM's ModelConfig the figure reads."""

    def __init__(self, model: str, layers: int, heads: int = 2, size: int = 64) -> None:
        self.model, self.layers, self.heads, self.size = model, layers, heads, size
        self.dtype, self.use_mla, self.revision = "torch.float32", False, None
        self.hf_text_config = SimpleNamespace(num_hidden_layers=layers)

    def get_num_layers(self, parallel: Any) -> int:
        return self.layers

    def get_num_kv_heads(self, parallel: Any) -> int:
        return self.heads

    def get_head_size(self) -> int:
        return self.size


def vllm_config(method: str, draft: Any, target: Any, cache_dtype: str = "auto") -> Any:
    uses_kv = method in ("draft_model", "eagle", "mtp")
    spec = SimpleNamespace(
        method=method, draft_model_config=draft, draft_parallel_config=None,
        uses_draft_kv_cache=lambda: uses_kv,
    )  # fmt: skip
    return SimpleNamespace(
        speculative_config=spec,
        model_config=target,
        cache_config=SimpleNamespace(cache_dtype=cache_dtype),
    )


def test_what_the_worker_reports_per_proposer(tmp_path: Path) -> None:
    target = FakeModelConfig(str(tmp_path / "target"), layers=24)
    write_safetensors(tmp_path / "model.safetensors", {"w": ("F32", [100])})
    draft = FakeModelConfig(str(tmp_path), layers=1)
    found = proposer_footprint(vllm_config("draft_model", draft, target))
    assert (found["weights_bytes"], found["kv_bytes_per_token"]) == (400, 1 * 2 * 2 * 64 * 4)
    ngram = proposer_footprint(vllm_config("ngram", target, target))  # vLLM reuses the target
    assert (ngram["weights_bytes"], ngram["kv_bytes_per_token"]) == (0, 0)
    mtp = proposer_footprint(vllm_config("mtp", FakeModelConfig(target.model, 1), target))
    assert mtp["weights_bytes"] is None and "no MTP tensors found" in mtp["why"]  # no files
    dspark = proposer_footprint(vllm_config("dspark", FakeModelConfig(target.model, 1), target))
    assert dspark["weights_bytes"] is None and "inside the target" in dspark["why"]
    fp8 = proposer_footprint(vllm_config("draft_model", draft, target, "fp8_e4m3"))
    assert fp8["kv_bytes_per_token"] == 1 * 2 * 2 * 64 * 1
    draft.use_mla = True
    mla = proposer_footprint(vllm_config("draft_model", draft, target))
    assert mla["kv_bytes_per_token"] == 1 * 1 * 2 * 64 * 4  # one latent vector, no K and V
    assert proposer_footprint(SimpleNamespace(speculative_config=None))["weights_bytes"] == 0


def test_an_mtp_draft_weighs_the_mtp_layers_of_the_target_checkpoint(tmp_path: Path) -> None:
    """vLLM reads an MTP draft from the target's own checkpoint and shares the target's
    embedding and output head with it: its weights are its MTP layers' tensors, named ``mtp*``
    (MiMo, Qwen3-Next) or numbered from the target's layer count on (DeepSeek-V3)."""
    write_safetensors(
        tmp_path / "model.safetensors",
        {
            "model.embed_tokens.weight": ("F32", [64, 8]),
            "lm_head.weight": ("F32", [64, 8]),
            "model.layers.0.mlp.down_proj.weight": ("F32", [8, 16]),
            "model.layers.1.mlp.down_proj.weight": ("F32", [8, 16]),
            "model.mtp_layers.0.input_proj.weight": ("F32", [8, 16]),  # MiMo
            "mtp.fc.weight": ("BF16", [8, 16]),  # Qwen3-Next
            "model.layers.2.mlp.down_proj.weight": ("F32", [8, 16]),  # DeepSeek-V3
            "model.layers.2.embed_tokens.weight": ("F32", [64, 8]),  # shared with the target
            "model.layers.2.shared_head.head.weight": ("F32", [64, 8]),  # shared
            "model.layers.2.shared_head.norm.weight": ("F32", [8]),
        },
    )
    target = FakeModelConfig(str(tmp_path), layers=2)
    mtp = proposer_footprint(vllm_config("mtp", FakeModelConfig(str(tmp_path), 1), target))
    assert mtp["weights_bytes"] == (3 * 128 + 8) * 4  # cast to the engine's float32
    assert mtp["kv_bytes_per_token"] == 1 * 2 * 2 * 64 * 4
    assert mtp["why"] == "mtp: the MTP layers of the target's checkpoint"
    target.hf_text_config.num_hidden_layers = 3  # layer 2 is the target's own then
    mtp = proposer_footprint(vllm_config("mtp", FakeModelConfig(str(tmp_path), 1), target))
    assert mtp["weights_bytes"] == 2 * 128 * 4
    plain = tmp_path / "plain"  # a target without MTP layers: unknown, not 0
    plain.mkdir()
    write_safetensors(plain / "model.safetensors", {"model.layers.0.w": ("F32", [8])})
    assert mtp_layer_bytes(plain, 1, 4) is None


def test_the_figure_is_weights_plus_draft_kv_cache() -> None:
    draft = ProposerMemory.of({"weights_bytes": 2**29, "kv_bytes_per_token": 1024}, 2**19)
    assert draft.kv_bytes == 2**29 and draft.gib == 1.0
    assert "draft weights 0.5000 GiB + draft KV cache 0.5000 GiB (524,288 tokens x 1,024 B)" in (
        draft.note()
    )
    ngram = ProposerMemory.of({"weights_bytes": 0, "kv_bytes_per_token": 0}, None)
    assert ngram.gib == 0.0 and "no draft attention layers" in ngram.note()
    assert ProposerMemory.of({"weights_bytes": 0, "kv_bytes_per_token": 8}, None).gib is None
    assert ProposerMemory.of({"weights_bytes": None, "kv_bytes_per_token": 0}, 10).gib is None
    assert ProposerMemory.of(None, 10).gib is None  # a served engine reports nothing


NGRAM = {"method": "ngram", "num_speculative_tokens": 3}
DRAFT = {"method": "draft_model", "model": "/models/draft", "num_speculative_tokens": 3}


def measured(spec: dict[str, Any], reported: dict[str, Any], tokens: int, label: str) -> Result:
    """A result whose engines' process memory (RSS) differs by 0.13 GiB, noise the figure
    must not take in."""
    outputs = [[1, 2, 3]]
    raw = PairedRounds(
        baseline=tuple(fake_round(t, outputs) for t in (1.0, 1.1, 0.9)),
        speculative=tuple(fake_round(t, outputs) for t in (0.5, 0.55, 0.45)),
        counters=Counters(10, 30, 20, (8, 7, 5)),
        round_counters=(Counters(3, 9, 6, (3, 2, 1)),) * 3,
        mode="interleaved",
        memory="test",
        engine_info={"draft_memory": reported},
        memory_gib={"baseline": 1.50, "speculative": 1.63},
        kv_cache_tokens={"baseline": 21840, "speculative": tokens},
    )
    return build_result(
        raw, nodeid="t.py::test_choose", category="c",
        speculative=EngineConfig.create("/models/target", spec, {}), num_prompts=1,
        sampling=Sampling(max_tokens=3, temperature=0.0), concurrency=None, label=label,
    )  # fmt: skip


def test_ngram_costs_nothing_whatever_the_process_memory_says() -> None:
    result = measured(NGRAM, {"weights_bytes": 0, "kv_bytes_per_token": 0}, 21840, "ngram")
    assert result.extra_memory_gib == 0.0
    assert result.speculative.memory_gib == 1.63  # the raw figures stay as measured
    assert "process memory (RSS) is not counted" in result.notes["memory"]


def test_checklist_ranking_and_table_show_the_one_figure() -> None:
    reported = {"weights_bytes": 1_903_104, "kv_bytes_per_token": 1024}
    draft = measured(DRAFT, reported, 20960, "draft")
    ngram = measured(NGRAM, {"weights_bytes": 0, "kv_bytes_per_token": 0}, 21840, "ngram")
    expected = (1_903_104 + 20960 * 1024) / 2**30
    assert draft.extra_memory_gib == pytest.approx(expected)
    ranking = Ranking.of("t.py::test_choose", {"draft": draft, "ngram": ngram})
    report = Report((ReportEntry(draft), ReportEntry(ngram)), {}, rankings=(ranking,))
    shown = {c["name"]: c["extra_memory_gib"] for c in ranking.to_dict()["candidates"]}
    assert shown == {"draft": draft.extra_memory_gib, "ngram": 0.0}
    cells = {row[1]: row[8] for row in ranking_rows(ranking)}
    assert cells == {"draft": f"{expected:.2f}", "ngram": "0.00"}
    lines = {
        c.method: next(x.figure for x in c.lines if x.question == SPARE_MEMORY)
        for c in checklists(report)
    }
    assert lines["draft_model"].startswith(f"the draft costs {expected:.2f} GiB")
    assert lines["ngram"].startswith("the proposer costs 0.00 GiB")
    again = Result.from_dict(json.loads(json.dumps(draft.to_dict())))
    assert again.extra_memory_gib == draft.extra_memory_gib  # the JSON holds the same figure


def test_a_result_saved_before_the_figure_changed_still_loads() -> None:
    data = replace(
        measured(NGRAM, {"weights_bytes": 0, "kv_bytes_per_token": 0}, 21840, "x"),
        extra_memory_gib=0.13,
        notes={},
    ).to_dict()
    assert Result.from_dict(data).extra_memory_gib == 0.13
