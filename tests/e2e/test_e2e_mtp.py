"""MTP on a real engine (issue 46): the tiny MiMo target (``tiny_models().mtp_target``), whose
one MTP layer vLLM reads from the target's own checkpoint (``{"method": "mtp"}``, no
``model``), measured by ``Bench`` like any proposer: drafts accepted at every position, the
head's weights and KV cache, phases, cost ratio and verdict. No timing is asserted."""

from __future__ import annotations

import json
import struct

import pytest

from pytest_specdecode import Bench
from pytest_specdecode.baselines.report import Report, ReportEntry
from pytest_specdecode.reporting.checklist import checklists
from pytest_specdecode.tiny import ENGINE_KWARGS, tiny_models
from pytest_specdecode.tiny.corpus import prompts

from ..e2e_support import needs_vllm

pytestmark = [pytest.mark.slow, needs_vllm]

K = 3


def test_mtp_layer_of_the_target_drafts_and_is_reported() -> None:
    folder = tiny_models().mtp_target
    spec = {"method": "mtp", "num_speculative_tokens": K}
    with Bench(str(folder), spec, ENGINE_KWARGS, trials=3) as bench:
        r = bench.run(prompts("structured", 2, seed=1), max_tokens=24)
    print(
        f"mtp: accepted per position {r.acceptance_per_position}, rate {r.acceptance_rate}, "
        f"AL {r.mean_acceptance_length}, drafts {r.num_drafts}, draft tokens "
        f"{r.num_draft_tokens}, accepted {r.num_accepted_tokens}, cost ratio {r.cost_ratio}, "
        f"extra {r.extra_memory_gib} GiB ({r.notes.get('memory')}), {r.speedup:.2f}x, "
        f"{r.verdict} ({'; '.join(r.verdict_reasons)})"
    )
    assert (r.method, r.draft, r.num_speculative_tokens) == ("mtp", None, K)
    # the MTP layer drafts, and its drafts are accepted at every position
    assert r.num_drafts > 0 and r.num_draft_tokens == K * r.num_drafts
    assert len(r.acceptance_per_position) == K
    assert all(a > 0 for a in r.acceptance_per_position), r.acceptance_per_position
    assert r.acceptance_rate is not None and r.acceptance_rate > 0
    assert r.mean_acceptance_length is not None and r.mean_acceptance_length > 1
    assert r.match_rate == 1.0  # greedy: the same tokens as the baseline engine
    # the head's own figures: its weights (the MTP layer's tensors, the embedding and output
    # head being the target's) plus its KV cache; its phase; its cost ratio; the verdict
    mtp_bytes = sum(
        4 * _numel(tensor["shape"])  # float32, as the engine runs
        for name, tensor in _header(folder / "model.safetensors").items()
        if name.startswith("model.mtp_layers.")
    )
    config = json.loads((folder / "config.json").read_text())
    kv_per_token = config["num_key_value_heads"] * config["head_dim"] * 2 * 4  # one layer
    tokens = r.speculative.kv_cache_tokens
    assert tokens and r.baseline.kv_cache_tokens and tokens < r.baseline.kv_cache_tokens
    assert r.extra_memory_gib == pytest.approx((mtp_bytes + tokens * kv_per_token) / 2**30)
    assert r.phases is not None and r.phases.draft_share is not None
    assert r.phases.draft_share > 0
    assert r.cost_ratio is not None and r.cost_ratio > 0
    assert r.verdict in ("worth it", "not worth it", "inconclusive") and r.verdict_reasons
    lines = checklists(Report((ReportEntry(r),), {}))[0].lines
    assert lines[0].figure.startswith(f"the head costs {r.extra_memory_gib:.2f} GiB"), lines[0]


def _numel(shape: list[int]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def _header(path: object) -> dict[str, dict[str, list[int]]]:
    with open(str(path), "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header: dict[str, dict[str, list[int]]] = json.loads(f.read(length))
    header.pop("__metadata__", None)
    return header
