"""GPU paths on real hardware: memory split between resident engines, memory released after.

Skipped with a reason where NVML sees no GPU; ``SPECDECODE_REQUIRE_GPU=1`` (GPU CI) turns that
skip into a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_specdecode.engines.hardware import nvml_gpus

from ..e2e_support import build_pair, needs_vllm

GPUS = nvml_gpus()
if not GPUS and os.environ.get("SPECDECODE_REQUIRE_GPU") == "1":
    raise RuntimeError("SPECDECODE_REQUIRE_GPU=1 but NVML sees no GPU")

pytestmark = [
    needs_vllm,
    pytest.mark.slow,
    pytest.mark.skipif(not GPUS, reason="no GPU visible through NVML"),
]

SUITE = """
import pytest
from pytest_specdecode import assert_acceptance_rate, assert_outputs_equivalent

@pytest.mark.specdecode("gpu", min_gpus=1, speculative_config={{
    "method": "draft_model", "model": {draft!r}, "num_speculative_tokens": 4}})
def test_on_gpu(specdecode):
    r = specdecode.run(["the hot word is", "water and people"] * 4, max_tokens=64)
    assert_acceptance_rate(r, min=0.9)
    assert_outputs_equivalent(r, min_match_rate=0.5)
"""


def _free_gib() -> float:
    return nvml_gpus()[0].memory_free_gib


def test_two_engines_split_the_gpu_and_release_it(tmp_path: Path) -> None:
    pair = build_pair()
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_suite.py").write_text(SUITE.format(draft=pair["draft"]))
    free_before = _free_gib()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_suite.py",
         "--specdecode-target", pair["target"], "--specdecode-report", "report.json",
         "--specdecode-require-gpu", "--specdecode-engine-kwargs", '{"max_model_len": 512}'],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    result = report["results"][0]
    assert result["memory"] == "gpu_memory_utilization=0.45 (split 2 ways)"
    assert result["mode"] == "interleaved"
    assert report["environment"]["device"]["kind"] == "gpu"
    deadline = time.monotonic() + 60
    while _free_gib() < free_before - 1.0 and time.monotonic() < deadline:
        time.sleep(1)
    assert _free_gib() >= free_before - 1.0, "engine memory was not released"
