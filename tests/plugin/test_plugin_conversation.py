"""``specdecode.conversation`` through pytest on the simulated backend: one result per turn in
the summary and the JSON report, each with both sides' cache figures and the first-send note
(``Bench.conversation`` itself: ``tests/unit/test_conversation.py``)."""

from __future__ import annotations

import json
from typing import Any

from pytest_specdecode.tiny import WEIGHTS_DIR

from ..fakes import FakeSource, use_fake

SUITE = f"""
import pytest
from pytest_specdecode import assert_speedup, prompts

NGRAM = {{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}}


@pytest.mark.specdecode("mt-bench", target={str(WEIGHTS_DIR / "target")!r},
                        speculative_config=NGRAM)
def test_two_turns(specdecode):
    convs = prompts.standard_conversations("mt-bench", category="writing", n=2)
    first, second = specdecode.conversation(convs, max_tokens=8, label="mt")
    assert_speedup(second, min=1.2)


@pytest.mark.specdecode("mt-bench", target={str(WEIGHTS_DIR / "target")!r},
                        speculative_config=NGRAM)
def test_ragged(specdecode):
    specdecode.conversation([["a", "b"], ["c"]], max_tokens=8)
"""


def test_each_turn_is_a_result_with_its_cache_figures(pytester: Any, monkeypatch: Any) -> None:
    source = FakeSource()
    source.prefix_cache = True
    use_fake(pytester, monkeypatch, source)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdecode-report", "report.json")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "the conversations have 1, 2 turns; pass turns= (at most 1" in out
    table = out.split("speculative decoding summary", 1)[1]
    assert "mt turn 1" in table and "mt turn 2" in table and "first-send cache hit=" in table
    report = json.loads((pytester.path / "report.json").read_text())
    turns = {r["label"]: r for r in report["results"]}
    assert set(turns) == {"mt turn 1", "mt turn 2"}
    for r in turns.values():
        assert r["nodeid"] == "test_suite.py::test_two_turns" and r["num_prompts"] == 2
        for side in ("baseline", "speculative"):
            assert 0 < r[side]["prefix_cache_hit_rate"] <= 1
    assert turns["mt turn 1"]["notes"]["first-send cache hit"] == "0.00 baseline, 0.00 speculative"
    assert turns["mt turn 2"]["notes"]["first-send cache hit"] != "0.00 baseline, 0.00 speculative"
