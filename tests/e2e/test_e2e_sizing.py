"""Baselines sized by their noise, on real vLLM (issue 32): a pytest run saving a baseline
takes few rounds for a quiet test and says it catches drops below 10%; a deliberately noisy
test (one prompt, two tokens per round: a round is a few milliseconds, so timing jitter is most
of it; per-round log-ratio sd 0.10-0.14 measured on machine X, against 0.047 for the quiet
one with four prompts a round; it sends six) takes rounds up to its cap and is flagged
blind with what to change. Both tests share one engine pair. The tests check that each saving
run follows the rule whichever way its noise goes (the rule's thresholds are asserted on fakes
with controlled noise: tests/plugin/test_plugin_sizing.py, tests/unit/test_detectable.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import pytest

from pytest_specdecode.measure.detectable import compared_rounds
from pytest_specdecode.settings import BY_NAME

from ..e2e_support import ENGINE_KWARGS, build_pair, needs_vllm, surviving_processes, tagged_env

pytestmark = [needs_vllm, pytest.mark.slow]

SUITE = """
import pytest
from pytest_specdecode.tiny.corpus import prompts

DRAFT = {{"method": "draft_model", "model": {draft!r}, "num_speculative_tokens": 4}}

@pytest.mark.specdecode("structured", speculative_config=DRAFT)
def test_quiet(specdecode):
    # one prompt after another: each round is six requests long, so jitter mostly averages
    # out (which way its sizing goes is printed, not asserted: check_sized)
    specdecode.run(prompts("structured", 6, seed=1), max_tokens=32, concurrency=1)

@pytest.mark.specdecode("structured", speculative_config=DRAFT)
def test_noisy(specdecode):
    specdecode.run(["the"], max_tokens=2)
"""
# the most rounds a saving run takes: room for the quiet test to plan more than the 20 it
# starts with as the runner's noise asks, the noisy one taking all of them (a few
# milliseconds each)
CAP = 30


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("sizing")
    pair = build_pair()
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_suite.py").write_text(SUITE.format(draft=pair["draft"]))
    tag = f"specdecode-sizing-{uuid.uuid4().hex}"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_suite.py",
         "--specdecode-target", pair["target"],
         "--specdecode-engine-kwargs", json.dumps(ENGINE_KWARGS),
         "--specdecode-cost-ratio", "off", "--specdecode-save", "base.json",
         "--specdecode-baseline-max-trials", str(CAP)],
        cwd=root, capture_output=True, text=True, timeout=900, env=tagged_env(tag),
    )  # fmt: skip
    path = root / "base.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    results = {r["nodeid"].split("::")[-1]: r for r in data.get("results", [])}
    return {"code": proc.returncode, "out": proc.stdout + proc.stderr, "results": results,
            "tag": tag}  # fmt: skip


def check_sized(saved: dict[str, Any], name: str) -> bool:
    """One test's saving run followed the sizing rule, whichever way its noise went: it saved
    rounds that see the designed 10% drop (no warning; the baseline line says what it
    catches) or it took rounds to its cap and was flagged blind with what to change. Which
    way a test goes is a measured figure (a busy runner once left the quiet test at 9.2-10.0%,
    on the line), so it is printed, not asserted; returns whether the test came out blind."""
    result = saved["results"][name]
    speedup = result["detectable"]["speedup"]
    compared = compared_rounds(result["trials"], int(BY_NAME["compare_max_trials"].default))
    assert speedup["designed"] == 0.10 and result["compared_rounds"] == compared, saved["out"]
    assert 2 <= result["trials"] <= CAP, saved["out"]
    blind = speedup["drop"] == "none" or speedup["drop"] > speedup["designed"]
    nodeid = f"test_suite.py::{name}"
    warnings = [x for x in saved["out"].splitlines() if x.startswith(f"WARNING: {nodeid}")]
    line = next(x for x in saved["out"].splitlines() if x.startswith(f"baseline {nodeid}"))
    print(f"\n{name}: {result['trials']} rounds saved, detectable drop {speedup['drop']}")
    if blind:
        assert result["trials"] == CAP and len(warnings) == 1, saved["out"]
        warning = warnings[0]
        assert "speedup: only drops from" in warning, warning
        assert "not the 10% its rule is designed" in warning, warning
        assert "more prompts or max_tokens per round" in warning, warning
        assert "--specdecode-baseline-max-trials" in warning, warning
    else:
        assert warnings == [], saved["out"]
        said = f"rounds saved, compared runs take up to {compared}; catches drops from speedup"
        assert said in line, line
    return blind


def test_a_quiet_test_saves_rounds_by_the_sizing_rule(saved: dict[str, Any]) -> None:
    assert saved["code"] == 0, saved["out"]
    check_sized(saved, "test_quiet")


def test_a_noisy_test_saves_rounds_by_the_sizing_rule(saved: dict[str, Any]) -> None:
    """Two tokens a round: in practice blind at its cap (per-round sd 0.10-0.14)."""
    assert saved["code"] == 0, saved["out"]
    check_sized(saved, "test_noisy")


def test_no_worker_outlives_the_session(saved: dict[str, Any]) -> None:
    assert surviving_processes(saved["tag"]) == []
