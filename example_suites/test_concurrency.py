"""The same structured workload at batch 1 and at a large batch: the speedup shrinks.

Verifying k+1 tokens costs about one step only while decode is memory-bound; at high
concurrency the verify pass competes for compute and rejected tokens are wasted work.
"""

import pytest
from support import prompts

from pytest_specdecode import assert_acceptance_rate, assert_speedup

PROMPTS = [p.prompt for p in prompts("structured")]
BIG_BATCH = 32


@pytest.mark.specdecode("concurrency")
def test_speedup_shrinks_with_concurrency(specdecode, gates):  # type: ignore[no-untyped-def]
    single = specdecode.run(PROMPTS[:4], max_tokens=48, concurrency=1, label="batch 1")
    batched = specdecode.run(
        (PROMPTS * BIG_BATCH)[:BIG_BATCH], max_tokens=48, label=f"batch {BIG_BATCH}"
    )
    for result in (single, batched):
        assert_speedup(result, min=gates["min_speedup"])
        assert_acceptance_rate(result, min=gates["min_acceptance_rate"])
    assert batched.speedup < single.speedup, (
        f"expected a smaller speedup at batch {BIG_BATCH} ({batched.speedup:.2f}x) than at "
        f"batch 1 ({single.speedup:.2f}x)"
    )
