"""The engine mode on one real engine: vLLM's engine core inside the engine worker (the rest of
the engine mode, on configurations and fakes: tests/unit/test_engine_mode.py)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.placement import IN_PROCESS, MULTIPROCESSING_ENV, place
from pytest_specdecode.tiny import ENGINE_KWARGS

from ..e2e_support import build_pair, needs_vllm


@pytest.fixture(autouse=True)
def _no_user_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MULTIPROCESSING_ENV, raising=False)


@needs_vllm
@pytest.mark.slow
def test_an_in_process_engine_speculates_and_reports_its_metrics(tmp_path: Any) -> None:
    """vLLM's engine core in the worker: draft-model speculation, the spec-decode counters of
    ``get_metrics()`` and the per-request metrics, and no vLLM process of its own."""
    from pytest_specdecode.engines.hardware import detect_device
    from pytest_specdecode.engines.local import Engine
    from pytest_specdecode.engines.memory import group_pids, process_titles

    pair = build_pair()
    spec = {"method": "draft_model", "model": pair["draft"], "num_speculative_tokens": 4}
    engine_config = EngineConfig.create(pair["target"], spec, dict(ENGINE_KWARGS))
    placement = place(engine_config, detect_device(), 2, mode=IN_PROCESS)
    engine = Engine(engine_config, placement, timeout=300, log_dir=str(tmp_path))
    pid = engine.pid
    assert pid is not None
    try:
        assert engine.info["engine_mode"] == "in-process"
        assert [t for t in process_titles(group_pids(pid)).values() if "VLLM::" in t] == []
        before = engine.counters()
        done = engine.generate_round(
            ["the hot word is", "water and people"],
            {"temperature": 0.0, "max_tokens": 24, "ignore_eos": True},
        )
        delta = engine.counters().since(before)
    finally:
        engine.close()
    assert delta.num_drafts > 0 and delta.num_draft_tokens == 4 * delta.num_drafts
    assert delta.num_accepted_tokens > 0.9 * delta.num_draft_tokens  # the draft is the target
    assert sum(r.spec_steps or 0 for r in done.requests) == delta.num_drafts
    assert all(r.per_step_accepted for r in done.requests)
    assert group_pids(pid) == []
