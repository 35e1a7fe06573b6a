"""Fake measurement data for tests that need no engine."""

from __future__ import annotations

from typing import Any

from pytest_specdecode.engine_config import EngineConfig
from pytest_specdecode.measure import build_result
from pytest_specdecode.result import Result, SpecCounters


def fake_round(elapsed: float, outputs: list[list[int]]) -> dict[str, Any]:
    return {
        "elapsed": elapsed,
        "requests": [
            {"token_ids": ids, "text": "x", "ttft": 0.01, "tpot": 0.002} for ids in outputs
        ],
    }


def fake_result(
    base_times: tuple[float, ...] = (1.0, 1.1, 0.9),
    spec_times: tuple[float, ...] = (0.5, 0.55, 0.45),
    base_outputs: list[list[int]] | None = None,
    spec_outputs: list[list[int]] | None = None,
    counters: SpecCounters | None = None,
    temperature: float = 0.0,
) -> Result:
    base_outputs = base_outputs or [[1, 2, 3], [4, 5, 6]]
    spec_outputs = spec_outputs or [list(o) for o in base_outputs]
    spec = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}
    raw = {
        "baseline": [fake_round(t, base_outputs) for t in base_times],
        "speculative": [fake_round(t, spec_outputs) for t in spec_times],
        "counters": counters or SpecCounters(10, 40, 30, [10, 8, 7, 5]),
        "round_counters": [SpecCounters(3, 12, 9, [3, 3, 2, 1])] * len(spec_times),
        "mode": "interleaved",
        "memory": "test",
    }
    return build_result(
        raw,
        nodeid="tests/test_x.py::test_a",
        category="structured",
        baseline=EngineConfig.create("org/target", None, {}),
        speculative=EngineConfig.create("org/target", spec, {}),
        num_prompts=len(base_outputs),
        sampling={"max_tokens": 3, "temperature": temperature},
        concurrency=None,
    )
