"""Long prompts: the same record requests asked alone and behind several paragraphs of prose.

Two forces pull apart: prefilling the long context (which speculation does not speed up) dilutes
the gain, while each verify step reads the long KV cache once for k+1 tokens instead of once
per token. Which wins depends on the hardware and the model: on big models on GPUs acceptance
and the speedup tend to fall with context; on the tiny CPU models attention over the context
dominates each step and speculation saves more. The two rows side by side show which it is.
"""

import pytest
from support import prompts

from pytest_specdecode import assert_acceptance_rate, assert_speedup

LONG = [p.prompt for p in prompts("long_context")]
SHORT = [p.rsplit("\n\n", 1)[1] for p in LONG]  # the record request alone


@pytest.mark.specdecode("long_context")
def test_long_prompt_extraction(specdecode, gates):  # type: ignore[no-untyped-def]
    short = specdecode.run(SHORT, max_tokens=24, label="short prompt")
    long = specdecode.run(LONG, max_tokens=24, label="long prompt")
    for result in (short, long):
        assert_speedup(result, min=gates["min_speedup"])
        assert_acceptance_rate(result, min=gates["min_acceptance_rate"])
    long.notes["vs short"] = f"{long.speedup / short.speedup:.2f}x the short-prompt speedup"
