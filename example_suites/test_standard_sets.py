"""Standard sets by category: MT-Bench's eight categories, HumanEval (code) and GSM8K (maths).

The prompts ship with the package (``pytest_specdecode.prompts.standard``: no download), raw
text (the tiny models have no chat template; for a chat model, render them with
``prompts.chat``). One labelled run per category on the suites' own engines shows how far
acceptance and speedup move between categories of one standard set.
"""

import pytest

from pytest_specdecode import assert_acceptance_rate, prompts
from pytest_specdecode.workloads import STANDARD_SETS

#: Prompts per category, tokens per prompt and measured rounds per run: small, to keep the
#: suites quick on a CPU (ten runs).
PER_CATEGORY = 8
MAX_TOKENS = 32
TRIALS = 3


def by_category(specdecode, name):  # type: ignore[no-untyped-def]
    """One run per category of set ``name``, labelled with the category."""
    return {
        category: specdecode.run(
            prompts.standard(name, category=category, n=PER_CATEGORY, seed=0),
            max_tokens=MAX_TOKENS,
            trials=TRIALS,
            label=category,
        )
        for category in STANDARD_SETS[name].categories
    }


@pytest.mark.specdecode("mt-bench")
def test_mt_bench_by_category(specdecode, gates):  # type: ignore[no-untyped-def]
    results = by_category(specdecode, "mt-bench")
    for result in results.values():
        assert_acceptance_rate(result, min=gates["min_acceptance_rate"])
    rates = sorted(r.acceptance_rate for r in results.values())
    assert rates[-1] - rates[0] >= gates["min_category_spread"], (
        f"acceptance ranges only {rates[0]:.2f}-{rates[-1]:.2f} over MT-Bench's categories: "
        "are the category's prompts reaching the engines?"
    )


@pytest.mark.specdecode("humaneval")
def test_humaneval(specdecode, gates):  # type: ignore[no-untyped-def]
    (result,) = by_category(specdecode, "humaneval").values()
    assert_acceptance_rate(result, min=gates["min_acceptance_rate"])


@pytest.mark.specdecode("gsm8k")
def test_gsm8k(specdecode, gates):  # type: ignore[no-untyped-def]
    (result,) = by_category(specdecode, "gsm8k").values()
    assert_acceptance_rate(result, min=gates["min_acceptance_rate"])
