"""Per-request acceptance on real engines: every prompt's acceptance length from the tiny pair
(what the engines report and how a result carries it, on fakes: tests/unit/test_per_request.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specdecode import Bench

from ..e2e_support import ENGINE_KWARGS, build_pair, needs_vllm


@needs_vllm
@pytest.mark.slow
def test_real_engines_report_every_prompts_acceptance_length(tmp_path: Path) -> None:
    """One short run on the tiny pair with the usual engine_kwargs: the speculative engine
    reports each prompt's acceptance (per-request metrics on by default), and every prompt's
    acceptance length lies in [1, k + 1]."""
    pair = build_pair()
    k = 4
    spec = {"method": "draft_model", "model": pair["draft"], "num_speculative_tokens": k}
    prompts = ["the hot word is", "water and people", "we can see him now", "long time no see"]
    with Bench(
        pair["target"], spec, ENGINE_KWARGS, progress=None, max_engines=2, cost_ratio="off"
    ) as b:
        result = b.run(prompts, max_tokens=32, trials=2)
    per_prompt = result.request_acceptance
    assert per_prompt is not None and len(per_prompt) == len(prompts), per_prompt
    assert all(v is not None and 1.0 <= v <= k + 1 for v in per_prompt), per_prompt
    # the draft computes the target's tokens: every prompt accepts as the run does
    assert per_prompt == pytest.approx((result.mean_acceptance_length,) * len(prompts), rel=0.02)
    assert result.acceptance_spread is not None and result.least_gain == ()
