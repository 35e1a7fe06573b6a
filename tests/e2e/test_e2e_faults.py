"""Engine faults on real vLLM: a killed worker, a killed engine core, a hang, a start without
memory.

Each ends its own test with the stated outcome; the session goes on, later tests get a fresh
engine, and no process survives.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from ..e2e_support import (
    ENGINE_KWARGS,
    build_pair,
    needs_vllm,
    surviving_processes,
    vllm_layout,
)

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


def engine_core(worker_pid):
    # the VLLM::EngineCore process that vLLM started under an engine worker
    for task in os.listdir(f"/proc/{{worker_pid}}/task"):
        with open(f"/proc/{{worker_pid}}/task/{{task}}/children") as fh:
            for child in fh.read().split():
                with open(f"/proc/{{child}}/cmdline", "rb") as cmd:
                    if b"EngineCore" in cmd.read():
                        return int(child)
    raise AssertionError(f"no engine core under worker {{worker_pid}}")


@pytest.mark.specdecode("faults", speculative_config=DRAFT)
def test_3_engine_core_killed_mid_run(specdecode, baseline_engine, speculative_engine):
    victim = engine_core(speculative_engine.pid)  # the worker lives on: only its core dies
    with open("core.pid", "w") as fh:
        fh.write(str(victim))
    threading.Timer(1.0, os.kill, (victim, signal.SIGKILL)).start()
    specdecode.run(PROMPTS * 4, max_tokens=256, trials=20)


@pytest.mark.specdecode("faults", speculative_config=DRAFT)
def test_4_later_test_after_a_dead_core_passes(specdecode):
    result = specdecode.run(PROMPTS, max_tokens=16, trials=2)
    assert result.acceptance_rate > 0.9


@pytest.mark.specdecode("faults", speculative_config=DRAFT, timeout=1)
def test_5_hang_is_killed_by_the_timeout(specdecode):
    specdecode.run(PROMPTS * 8, max_tokens=400, trials=2)


@pytest.mark.specdecode("faults", speculative_config=DRAFT,
                        engine_kwargs={{"kv_cache_memory_bytes": 2**50}})
def test_6_start_without_memory(specdecode):
    specdecode.run(PROMPTS, max_tokens=16, trials=2)


def test_7_session_goes_on():
    pass
"""


@pytest.fixture(scope="module")
def faults_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[int, str, dict[str, Any], str, str]:
    root = tmp_path_factory.mktemp("faults")
    pair = build_pair()
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_faults.py").write_text(SUITE.format(draft=pair["draft"]))
    tag = f"specdecode-faults-{uuid.uuid4().hex}"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "test_faults.py",
         "--specdecode-target", pair["target"], "--specdecode-report", "report.json",
         "--specdecode-engine-kwargs", json.dumps(ENGINE_KWARGS)],
        cwd=root, capture_output=True, text=True, timeout=900,
        # SPT_NOENV: vLLM retitles its processes (VLLM::EngineCore) with setproctitle, which
        # otherwise overwrites /proc/PID/environ, and the tag with it.
        env=vllm_layout({**os.environ, "SPECDECODE_E2E_TAG": tag, "SPT_NOENV": "1"}),
    )  # fmt: skip
    report_path = Path(root / "report.json")
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    core_pid = (root / "core.pid").read_text() if (root / "core.pid").exists() else "?"
    return proc.returncode, proc.stdout + proc.stderr, report, tag, core_pid


def test_outcomes(faults_run: Any) -> None:
    code, output, *_ = faults_run
    assert code == 1, output
    for line in (
        "test_faults.py::test_1_worker_killed_mid_run FAILED",
        "test_faults.py::test_2_later_test_gets_a_fresh_engine PASSED",
        "test_faults.py::test_3_engine_core_killed_mid_run FAILED",
        "test_faults.py::test_4_later_test_after_a_dead_core_passes PASSED",
        "test_faults.py::test_5_hang_is_killed_by_the_timeout FAILED",
        "test_faults.py::test_6_start_without_memory FAILED",
        "test_faults.py::test_7_session_goes_on PASSED",
    ):
        assert line in output, output


def test_killed_worker_reports_exit_cause_and_log(faults_run: Any) -> None:
    _, output, *_ = faults_run
    assert re.search(r"died during (generate|spec_counters).*: killed by SIGKILL", output), output
    assert "--- last lines of the engine log" in output


def test_fresh_engine_after_crash(faults_run: Any) -> None:
    _, output, report, *_ = faults_run
    assert "is no longer running" in output
    assert re.search(r"restarting speculative engine \(.*\): its engine had died", output)
    nodeids = [r["nodeid"] for r in report["results"]]
    assert nodeids[0].endswith("test_2_later_test_gets_a_fresh_engine"), nodeids


def test_dead_engine_core_reports_what_died_and_the_log(faults_run: Any) -> None:
    _, output, _, _, core_pid = faults_run
    section = output[output.index("_ test_3_engine_core_killed_mid_run _") :]
    section = section[: section.index("_ test_5_hang_is_killed_by_the_timeout _")]
    assert re.search(
        r"vLLM's engine core died during (generate|spec_counters): process EngineCore "
        rf"\(pid {core_pid}\) killed by SIGKILL",
        section,
    ), section
    assert "--- last lines of the engine log" in section
    assert "(kept) ---" in section


def test_fresh_engine_after_a_dead_core(faults_run: Any) -> None:
    _, output, report, *_ = faults_run
    # once after the killed worker (test 1), once after the dead engine core (test 3)
    assert output.count("is no longer running") >= 2, output
    nodeids = [r["nodeid"] for r in report["results"]]
    assert any(n.endswith("test_4_later_test_after_a_dead_core_passes") for n in nodeids)


def test_hang_killed_with_what_it_was_doing(faults_run: Any) -> None:
    _, output, *_ = faults_run
    assert "did not finish generate within 1 s and was killed" in output


def test_start_without_memory_gives_figures_and_knobs(faults_run: Any) -> None:
    _, output, *_ = faults_run
    assert "failed to start" in output
    assert "The engine ran out of memory. Free now:" in output
    assert "GiB of RAM available" in output and "kv_cache_memory_bytes" in output


def test_only_failed_engines_logs_are_kept(faults_run: Any) -> None:
    _, output, *_ = faults_run
    kept = set(re.findall(r"--- last lines of the engine log (\S+) \(kept\) ---", output))
    assert kept, output
    for path in kept:
        assert os.path.exists(path), path
    folder = os.path.dirname(next(iter(kept)))
    assert set(os.listdir(folder)) == {os.path.basename(p) for p in kept}


def test_nothing_survives(faults_run: Any) -> None:
    _, _, _, tag, _ = faults_run
    assert surviving_processes(tag) == []
