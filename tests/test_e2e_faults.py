"""Engine faults on real vLLM: a killed worker, a hang, a start without memory.

Each ends its own test with the stated outcome; the session goes on, later tests get a fresh
engine, and no process survives.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from .e2e_support import ENGINE_KWARGS, build_pair, needs_vllm, surviving_processes

pytestmark = [needs_vllm, pytest.mark.slow]

SUITE = """
import os, signal, threading, time
import pytest
from pytest_specdecode import EngineCrashedError, EngineStartError, EngineTimeoutError

PROMPTS = ["the hot word is", "water and people"]
DRAFT = {{"method": "draft_model", "model": {draft!r}, "num_speculative_tokens": 4}}


@pytest.mark.specdecode("faults", speculative_config=DRAFT)
def test_1_worker_killed_mid_run(specdecode, baseline_engine, speculative_engine):
    victim = speculative_engine.pid  # both engines are up: the kill lands inside run()
    threading.Timer(1.0, os.kill, (victim, signal.SIGKILL)).start()
    specdecode.run(PROMPTS * 4, max_tokens=256, trials=20)


@pytest.mark.specdecode("faults", speculative_config=DRAFT)
def test_2_later_test_gets_a_fresh_engine(specdecode):
    result = specdecode.run(PROMPTS, max_tokens=16, trials=2)
    assert result.acceptance_rate > 0.9


@pytest.mark.specdecode("faults", speculative_config=DRAFT, timeout=1)
def test_3_hang_is_killed_by_the_timeout(specdecode):
    specdecode.run(PROMPTS * 8, max_tokens=400, trials=2)


@pytest.mark.specdecode("faults", speculative_config=DRAFT,
                        engine_kwargs={{"kv_cache_memory_bytes": 2**50}})
def test_4_start_without_memory(specdecode):
    specdecode.run(PROMPTS, max_tokens=16, trials=2)


def test_5_session_goes_on():
    pass
"""


@pytest.fixture(scope="module")
def faults_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict[str, Any], str]:
    root = tmp_path_factory.mktemp("faults")
    pair = build_pair(root / "pair")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_faults.py").write_text(SUITE.format(draft=pair["draft"]))
    tag = f"specdecode-faults-{uuid.uuid4().hex}"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "test_faults.py",
         "--specdecode-target", pair["target"], "--specdecode-report", "report.json",
         "--specdecode-engine-kwargs", json.dumps(ENGINE_KWARGS)],
        cwd=root, capture_output=True, text=True, timeout=900,
        env={**__import__("os").environ, "SPECDECODE_E2E_TAG": tag},
    )  # fmt: skip
    report_path = Path(root / "report.json")
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return proc.returncode, proc.stdout + proc.stderr, report, tag


def test_outcomes(faults_run: Any) -> None:
    code, output, _, _ = faults_run
    assert code == 1, output
    for line in (
        "test_faults.py::test_1_worker_killed_mid_run FAILED",
        "test_faults.py::test_2_later_test_gets_a_fresh_engine PASSED",
        "test_faults.py::test_3_hang_is_killed_by_the_timeout FAILED",
        "test_faults.py::test_4_start_without_memory FAILED",
        "test_faults.py::test_5_session_goes_on PASSED",
    ):
        assert line in output, output


def test_killed_worker_reports_exit_cause_and_log(faults_run: Any) -> None:
    _, output, _, _ = faults_run
    assert re.search(r"died during (generate|spec_counters).*: killed by SIGKILL", output), output
    assert "--- last lines of the engine log" in output


def test_fresh_engine_after_crash(faults_run: Any) -> None:
    _, output, report, _ = faults_run
    assert "is no longer running; starting a fresh one" in output
    assert report["results"][0]["nodeid"].endswith("test_2_later_test_gets_a_fresh_engine")


def test_hang_killed_with_what_it_was_doing(faults_run: Any) -> None:
    _, output, _, _ = faults_run
    assert "did not finish generate within 1 s and was killed" in output


def test_start_without_memory_gives_figures_and_knobs(faults_run: Any) -> None:
    _, output, _, _ = faults_run
    assert "failed to start" in output
    assert "The engine ran out of memory. Free now:" in output
    assert "GiB of RAM available" in output and "kv_cache_memory_bytes" in output


def test_nothing_survives(faults_run: Any) -> None:
    _, _, _, tag = faults_run
    assert surviving_processes(tag) == []
