"""Warm-up rounds: full on an engine's first use, short after (measure/warmup.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_specdecode.measure.warmup import SHORT_TOKENS, short, warm_up


class Recorder:
    """Stands in for an engine: records the sampling of each round."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def generate_round(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any], concurrency: int | None = None
    ) -> Any:
        self.sent.append(dict(sampling))
        return None


def test_the_first_warm_up_is_full_and_later_ones_short() -> None:
    engine = Recorder()
    sampling = {"max_tokens": 64, "temperature": 0.0, "ignore_eos": True}
    for _ in range(3):
        warm_up(engine, ["a"], sampling)  # type: ignore[arg-type]
    assert [s["max_tokens"] for s in engine.sent] == [64, SHORT_TOKENS, SHORT_TOKENS]
    assert all(s["ignore_eos"] and s["temperature"] == 0.0 for s in engine.sent)
    restarted = Recorder()  # a fresh engine (a restart is a new object): full again
    warm_up(restarted, ["a"], sampling)  # type: ignore[arg-type]
    assert restarted.sent[0]["max_tokens"] == 64


def test_a_short_warm_up_keeps_every_other_parameter_and_caps_a_minimum() -> None:
    sampling = {"max_tokens": 64, "min_tokens": 32, "json_schema": {"type": "object"}, "n": 2}
    assert short(sampling) == {
        "max_tokens": SHORT_TOKENS, "min_tokens": SHORT_TOKENS,
        "json_schema": {"type": "object"}, "n": 2,
    }  # fmt: skip
    assert short({"max_tokens": 4})["max_tokens"] == 4  # never longer than the measured rounds
