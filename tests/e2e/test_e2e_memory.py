"""The extra-memory figure on real engines: n-gram holds nothing, the tiny draft and the tiny
EAGLE-3 head their weights plus their share of the KV cache, as vLLM allocated it. The same
ranking gives the head's per-position acceptance, phases, cost ratio and verdict (issue 46)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specdecode import Bench
from pytest_specdecode.baselines.report import Report, ReportEntry
from pytest_specdecode.engines.placement import CPU_KV_CACHE_BYTES
from pytest_specdecode.measure.result import Result
from pytest_specdecode.reporting.checklist import checklists
from pytest_specdecode.tiny import ENGINE_KWARGS, tiny_models
from pytest_specdecode.tiny.corpus import prompts

from ..e2e_support import needs_vllm

pytestmark = [pytest.mark.slow, needs_vllm]


def test_ngram_holds_nothing_and_the_draft_its_weights_and_kv_cache() -> None:
    models = tiny_models()
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
             "prompt_lookup_min": 2}  # fmt: skip
    draft = {"method": "draft_model", "model": str(models.draft), "num_speculative_tokens": 4}
    head = {"method": "eagle3", "model": str(models.eagle3_head), "num_speculative_tokens": 4}
    with Bench(str(models.target), ngram, ENGINE_KWARGS, trials=2) as bench:
        ranking = bench.choose_draft(
            prompts("structured", 2, seed=1),
            {"ngram": ngram, "draft": draft, "eagle3": head},
            max_tokens=32,
        )
    by_name = {c.name: c.result for c in ranking.candidates}
    for name, r in by_name.items():
        print(
            f"{name}: extra {r.extra_memory_gib!r} GiB ({r.notes.get('memory')}); KV tokens "
            f"{r.baseline.kv_cache_tokens} -> {r.speculative.kv_cache_tokens}; RSS "
            f"{r.baseline.memory_gib:.3f} -> {r.speculative.memory_gib:.3f} GiB"
        )
    assert by_name["ngram"].extra_memory_gib == 0.0
    assert by_name["ngram"].speculative.kv_cache_tokens == by_name["ngram"].baseline.kv_cache_tokens
    for name, folder in (("draft", models.draft), ("eagle3", models.eagle3_head)):
        check_weights_and_kv_cache(by_name[name], Path(folder))
    r = by_name["draft"]
    assert ranking.to_dict()["candidates"][ranking.names.index("draft")]["extra_memory_gib"] == (
        r.extra_memory_gib
    )
    report = Report(tuple(ReportEntry(x) for x in by_name.values()), {}, rankings=(ranking,))
    lines = {c.method: c.lines[0].figure for c in checklists(report)}  # spare memory first
    print(lines)
    assert lines["draft_model"].startswith(f"the draft costs {r.extra_memory_gib:.2f} GiB")
    assert lines["ngram"].startswith("the proposer costs 0.00 GiB")
    assert lines["eagle3"].startswith("the head costs")
    # the EAGLE-3 head: drafts accepted at every position, its own phase and cost ratio
    head_result = by_name["eagle3"]
    assert len(head_result.acceptance_per_position) == 4
    assert all(a > 0 for a in head_result.acceptance_per_position), (
        head_result.acceptance_per_position
    )
    phases = head_result.phases
    assert phases is not None and phases.draft_share is not None and phases.draft_share > 0
    assert head_result.cost_ratio is not None and head_result.cost_ratio > 0
    assert head_result.verdict is not None
    print(f"eagle3: accepted per position {head_result.acceptance_per_position}, draft share "
          f"{phases.draft_share:.3f}, cost ratio {head_result.cost_ratio:.3f}, "
          f"{head_result.speedup:.2f}x, {head_result.verdict}")  # fmt: skip


def check_weights_and_kv_cache(r: Result, folder: Path) -> None:
    """A draft's or head's extra memory is its weights plus its KV cache: its config's bytes per
    token (K and V of each layer, float32) for every token slot of the speculative engine."""
    base_tokens, spec_tokens = r.baseline.kv_cache_tokens, r.speculative.kv_cache_tokens
    assert base_tokens and spec_tokens and spec_tokens < base_tokens
    config = json.loads((folder / "config.json").read_text())
    per_token = (
        config["num_hidden_layers"] * config["num_key_value_heads"] * 2 * 4 * (config["head_dim"])
    )
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))  # float32
    assert r.extra_memory_gib is not None
    kv = r.extra_memory_gib * 2**30 - weights
    assert kv == pytest.approx(spec_tokens * per_token, abs=weights * 0.001)  # header bytes
    # Checked against what vLLM allocated: both engines get the same KV budget on a CPU, so
    # the draft's layers take the budget less what the target's layers keep at the baseline's
    # bytes per token, up to one block of whole-engine slots (vLLM allocates whole blocks).
    allocated = CPU_KV_CACHE_BYTES * (1 - spec_tokens / base_tokens)
    block = 128 * CPU_KV_CACHE_BYTES / spec_tokens
    print(f"{folder.name} KV {kv:,.0f} B; budget rule {allocated:,.0f} B; block {block:,.0f} B")
    assert abs(kv - allocated) < block
