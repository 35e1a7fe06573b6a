"""An engine core that vLLM kills with an error of its own, on real vLLM for CPU: the error
the user gets carries the error lines from the engine log (its model worker's and its engine
core's), not only "the engine core died".

Synthetic acceptance (``rejection_sample_method: "synthetic"``) kills a CPU engine at its first
step with an assertion in its model worker; the plugin and ``Bench`` refuse it before start
(it cannot run on CPU), so the engine is started here directly, past those checks.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.hardware import detect_device
from pytest_specdecode.engines.local import Engine
from pytest_specdecode.engines.placement import place
from pytest_specdecode.errors import EngineCrashedError

from ..e2e_support import (
    ENGINE_KWARGS,
    LAYOUT_ENV,
    build_pair,
    needs_vllm,
    surviving_processes,
)

pytestmark = [needs_vllm, pytest.mark.slow]

WORKER_ERROR = "AssertionError: Synthetic acceptance not supported with CPU sampling"
CORE_ERROR = (
    "RuntimeError: Worker failed with error 'Synthetic acceptance not supported with CPU "
    "sampling', please check the stack trace above for the root cause"
)


def test_the_engine_core_s_own_error_is_in_the_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pair = build_pair()
    tag = f"specdecode-engine-error-{uuid.uuid4().hex}"
    monkeypatch.setenv("SPECDECODE_E2E_TAG", tag)  # the engine's processes inherit it
    monkeypatch.setenv("SPT_NOENV", "1")
    monkeypatch.delenv(LAYOUT_ENV, raising=False)  # vLLM's engine core in a process of its own
    spec = {
        "method": "draft_model", "model": pair["draft"], "num_speculative_tokens": 2,
        "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2,
    }  # fmt: skip
    config = EngineConfig.create(pair["target"], spec, dict(ENGINE_KWARGS))
    engine = Engine(config, place(config, detect_device(), 2), timeout=300, log_dir=str(tmp_path))
    try:
        with pytest.raises(EngineCrashedError) as excinfo:
            engine.generate_round(["the hot word is"], {"max_tokens": 8, "temperature": 0.0})
    finally:
        engine.kill()
    head = str(excinfo.value).split("--- last lines of the engine log")[0]
    assert "vLLM's engine core died during generate" in head, head
    assert f"The engine log's errors:\n  {WORKER_ERROR}\n  {CORE_ERROR}\n" in head, head
    assert "The pool starts a fresh engine on its next use." in head
    assert Path(engine.log_path).read_text().count("vLLM's engine core died") == 1
    # (this process's own multiprocessing resource tracker lives as long as it does)
    assert [p for p in surviving_processes(tag) if _parent(p) != os.getpid()] == []


def _parent(entry: str) -> int:
    """The parent pid of a ``surviving_processes`` entry (``pid: command``)."""
    try:
        stat = Path(f"/proc/{entry.split(':')[0]}/stat").read_text()
    except OSError:
        return 0
    return int(stat[stat.rfind(")") + 2 :].split()[1])
