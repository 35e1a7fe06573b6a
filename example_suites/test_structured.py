"""Structured output (JSON extraction), greedy: where speculation pays off most.

Nearly every output token follows from the prompt (keys in a fixed order, values copied from
the request), so the draft agrees with the target on most tokens.
"""

import pytest
from support import count_valid, prompts

from pytest_specdecode import (
    assert_acceptance_rate,
    assert_outputs_equivalent,
    assert_speedup,
)

PROMPTS = prompts("structured")


def _note_validity(result):  # type: ignore[no-untyped-def]
    parsed, valid = count_valid(result.speculative.texts, PROMPTS)
    result.notes["json"] = f"{parsed}/{len(PROMPTS)} parse, {valid} valid"
    return valid


@pytest.mark.specdecode("structured")
def test_json_extraction(specdecode, gates):  # type: ignore[no-untyped-def]
    result = specdecode.run([p.prompt for p in PROMPTS], max_tokens=64, label="unguided")
    _note_validity(result)
    assert_speedup(result, min=gates["min_speedup"])
    assert_acceptance_rate(result, min=gates["min_acceptance_rate"])
    assert_outputs_equivalent(result, min_match_rate=gates["min_match_rate"])


@pytest.mark.specdecode("structured")
def test_json_extraction_with_structured_outputs(specdecode, gates):  # type: ignore[no-untyped-def]
    """vLLM structured outputs constrain every output to the record's JSON Schema.

    The grammar is applied at every verified position, so on a CPU its cost eats what
    speculation saves: the speedup is gated loosely. Validity is reported in the notes column
    (with ``ignore_eos`` a string value may run past ``max_tokens`` and be cut off).
    """
    result = specdecode.run(
        [p.prompt for p in PROMPTS],
        max_tokens=64,
        structured_outputs=[
            {"json": p.output_schema, "disable_any_whitespace": True} for p in PROMPTS
        ],
        label="json_schema",
    )
    _note_validity(result)
    assert_speedup(result, min=gates["guided_min_speedup"])
    assert_acceptance_rate(result, min=gates["min_acceptance_rate"])
    assert_outputs_equivalent(result, min_match_rate=gates["min_match_rate"])
