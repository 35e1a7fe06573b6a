"""The extra-memory figure on real engines: n-gram holds nothing, the tiny draft its weights
plus its share of the KV cache, as vLLM allocated it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specdecode import Bench
from pytest_specdecode.baselines.report import Report, ReportEntry
from pytest_specdecode.engines.placement import CPU_KV_CACHE_BYTES
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
    with Bench(str(models.target), ngram, ENGINE_KWARGS, trials=2, cost_ratio="off") as bench:
        ranking = bench.choose_draft(
            prompts("structured", 2, seed=1), {"ngram": ngram, "draft": draft}, max_tokens=32
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
    r = by_name["draft"]
    base_tokens, spec_tokens = r.baseline.kv_cache_tokens, r.speculative.kv_cache_tokens
    assert base_tokens and spec_tokens and spec_tokens < base_tokens
    # The draft's KV cache: its config's bytes per token (K and V of each layer, float32)
    # for every token slot of the speculative engine.
    config = json.loads((Path(models.draft) / "config.json").read_text())
    per_token = (
        config["num_hidden_layers"] * config["num_key_value_heads"] * 2 * 4 * (config["head_dim"])
    )
    weights = sum(p.stat().st_size for p in Path(models.draft).glob("*.safetensors"))  # float32
    assert r.extra_memory_gib is not None
    kv = r.extra_memory_gib * 2**30 - weights
    assert kv == pytest.approx(spec_tokens * per_token, abs=weights * 0.001)  # header bytes
    # Checked against what vLLM allocated: both engines get the same KV budget on a CPU, so
    # the draft's layers take the budget less what the target's layers keep at the baseline's
    # bytes per token, up to one block of whole-engine slots (vLLM allocates whole blocks).
    allocated = CPU_KV_CACHE_BYTES * (1 - spec_tokens / base_tokens)
    block = 128 * CPU_KV_CACHE_BYTES / spec_tokens
    print(f"draft KV {kv:,.0f} B; budget rule {allocated:,.0f} B; one block {block:,.0f} B")
    assert abs(kv - allocated) < block
    assert ranking.to_dict()["candidates"][ranking.names.index("draft")]["extra_memory_gib"] == (
        r.extra_memory_gib
    )
    report = Report(tuple(ReportEntry(x) for x in by_name.values()), {}, rankings=(ranking,))
    lines = {c.method: c.lines[0].figure for c in checklists(report)}  # spare memory first
    print(lines)
    assert lines["draft_model"].startswith(f"the draft costs {r.extra_memory_gib:.2f} GiB")
    assert lines["ngram"].startswith("the proposer costs 0.00 GiB")
