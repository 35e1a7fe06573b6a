"""Speculation under traffic: the same structured requests arriving at a low rate, a moderate
one and all at once (open loop, Poisson arrivals), on both engines.

At a low rate requests rarely overlap: each decodes almost alone, decode is memory-bound and
the draft's tokens come nearly free, so speculation lowers the time per output token. As the
rate rises, batches grow, the verify pass competes for compute and the gain shrinks; all at
once it is smallest (or gone). The test gates the gain at the low rate and fails when the gain
all at once is clearly larger (its interval above the low rate's); twelve requests on the tiny
engines do not always show the shrinking beyond the rounds' noise, so it is not asserted.
"""

import pytest
from support import prompts

from pytest_specdecode import assert_latency_gain

PROMPTS = [p.prompt for p in prompts("structured")]
RATES = [2.0, 16.0, float("inf")]


@pytest.mark.specdecode("load")
def test_latency_gain_shrinks_with_traffic(specdecode, gates):  # type: ignore[no-untyped-def]
    result = specdecode.load(
        PROMPTS, max_tokens=32, rates=RATES, requests=12,
        slo={"ttft_ms": gates["slo_ttft_ms"], "tpot_ms": gates["slo_tpot_ms"]},
    )  # fmt: skip
    assert_latency_gain(result, at_rate=RATES[0], min=gates["min_latency_gain"])
    low, busy = result.points[0], result.points[-1]
    assert busy.tpot_speedup_ci[0] <= low.tpot_speedup_ci[1], result.summary()
