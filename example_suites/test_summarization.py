"""Copy-heavy answers (summaries that reuse the prompt): n-gram prompt lookup against the draft.

n-gram lookup needs no draft model (no extra memory) and shines when the answer copies the
prompt; the draft model also proposes tokens the prompt does not contain.
"""

import pytest
from support import prompts

from pytest_specdecode import assert_acceptance_rate, assert_speedup

PROMPTS = prompts("summarization")
NGRAM = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
}


@pytest.mark.specdecode("summarization")
def test_summary_draft_model(specdecode, gates):  # type: ignore[no-untyped-def]
    result = specdecode.run([p.prompt for p in PROMPTS], max_tokens=64)
    assert_speedup(result, min=gates["min_speedup"])
    assert_acceptance_rate(result, min=gates["min_acceptance_rate"])


@pytest.mark.specdecode("summarization", speculative_config=NGRAM)
def test_summary_ngram(specdecode, gates):  # type: ignore[no-untyped-def]
    result = specdecode.run([p.prompt for p in PROMPTS], max_tokens=64)
    assert_speedup(result, min=gates["ngram_min_speedup"])
    assert_acceptance_rate(result, min=gates["ngram_min_acceptance_rate"])
