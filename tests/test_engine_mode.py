"""The engine mode: which engines run vLLM's engine core inside the engine worker, what
``place()`` gives each mode, and how the worker reports and handles an in-process core."""

from __future__ import annotations

import multiprocessing
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_specdecode.engines import worker
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.hardware import Device, Gpu
from pytest_specdecode.engines.placement import (
    IN_PROCESS,
    MULTIPROCESS,
    MULTIPROCESSING_ENV,
    engine_mode,
    place,
)

CPU = Device("cpu", "test CPU")
GPU = Device("gpu", "H100", (Gpu(0, "H100", 80.0, 79.0), Gpu(1, "H100", 80.0, 79.0)))
DRAFT = {"method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 4}


@pytest.fixture(autouse=True)
def _no_user_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MULTIPROCESSING_ENV, raising=False)


def config(engine_kwargs: dict[str, Any] | None = None, spec: Any = DRAFT) -> EngineConfig:
    return EngineConfig.create("/m/target", spec, engine_kwargs or {})


@pytest.mark.parametrize("device", [CPU, GPU], ids=["cpu", "gpu"])
@pytest.mark.parametrize("spec", [None, DRAFT], ids=["baseline", "speculative"])
def test_one_device_engines_run_in_process(device: Device, spec: Any) -> None:
    assert engine_mode(config({"tensor_parallel_size": 1}, spec), device) == IN_PROCESS


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tensor_parallel_size": 2},
        {"pipeline_parallel_size": 2},
        {"data_parallel_size": 2},
        {"decode_context_parallel_size": 2},
        {"prefill_context_parallel_size": 2},
        {"distributed_executor_backend": "mp"},
        {"distributed_executor_backend": "uni"},  # the user's choice, even the same one
    ],
)
def test_several_devices_or_a_user_layout_keep_vllms_processes(kwargs: dict[str, Any]) -> None:
    assert engine_mode(config(kwargs), GPU) == MULTIPROCESS


@pytest.mark.parametrize("value", ["0", "1"])
def test_a_user_set_multiprocessing_variable_is_left_alone(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(MULTIPROCESSING_ENV, value)
    assert engine_mode(config(), CPU) == MULTIPROCESS
    placement = place(config(), CPU, max_engines=2, mode="auto")
    assert MULTIPROCESSING_ENV not in placement.env  # the worker inherits the user's value
    assert "distributed_executor_backend" not in placement.engine_kwargs


@pytest.mark.parametrize("device", [CPU, GPU], ids=["cpu", "gpu"])
def test_in_process_placement_sets_the_variable_and_the_uniprocess_executor(
    device: Device,
) -> None:
    placement = place(config(), device, max_engines=2, mode="auto")
    assert placement.env[MULTIPROCESSING_ENV] == "0"
    assert placement.engine_kwargs["distributed_executor_backend"] == "uni"
    assert placement.engine_kwargs["speculative_config"] == DRAFT
    assert placement.env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert "distributed_executor_backend" not in config().engine_kwargs  # the key is unchanged


def test_multiprocess_placement_is_vllms_own_layout() -> None:
    placement = place(config(), CPU, max_engines=2, mode=MULTIPROCESS)
    assert MULTIPROCESSING_ENV not in placement.env
    assert "distributed_executor_backend" not in placement.engine_kwargs
    # everything else is placed alike in both modes
    in_process = place(config(), CPU, max_engines=2, mode=IN_PROCESS)
    assert {k: v for k, v in in_process.env.items() if k != MULTIPROCESSING_ENV} == placement.env
    assert {
        k: v for k, v in in_process.engine_kwargs.items() if k != "distributed_executor_backend"
    } == placement.engine_kwargs
    assert in_process.memory == placement.memory


def test_in_process_is_not_forced_on_a_multi_device_engine() -> None:
    tp = config({"tensor_parallel_size": 2})
    placement = place(tp, GPU, max_engines=1, mode=IN_PROCESS)
    assert MULTIPROCESSING_ENV not in placement.env
    assert "distributed_executor_backend" not in placement.engine_kwargs
    mine = config({"distributed_executor_backend": "mp"})
    assert place(mine, CPU, 2, mode=IN_PROCESS).engine_kwargs["distributed_executor_backend"] == (
        "mp"
    )


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="in-process"):
        place(config(), CPU, max_engines=2, mode="threads")


# -- the worker side -------------------------------------------------------------------------


class InprocClient:  # named like vLLM's in-process engine core client
    def __init__(self) -> None:
        self.unfinished = False


class SyncMPClient:
    pass


def fake_llm(client: Any) -> Any:
    return SimpleNamespace(
        llm_engine=SimpleNamespace(
            engine_core=client, has_unfinished_requests=lambda: client.unfinished
        )
    )


def test_the_worker_reports_where_the_engine_core_runs() -> None:
    assert worker.run_mode(fake_llm(InprocClient())) == "in-process"
    assert worker.run_mode(fake_llm(SyncMPClient())) == "multiprocess"
    assert worker.run_mode(SimpleNamespace()) == "unknown"


def test_an_in_process_core_with_requests_in_flight_after_an_error_is_broken() -> None:
    client = InprocClient()
    engine = worker._Engine(fake_llm(client))
    assert not engine.broken()
    client.unfinished = True
    assert engine.broken()
    cause = engine.dead_cause(RuntimeError("step failed"))
    assert "raised RuntimeError: step failed" in cause and "in the worker process" in cause
    separate = SyncMPClient()
    separate.unfinished = True  # type: ignore[attr-defined]
    assert not worker._Engine(fake_llm(separate)).broken()  # vLLM says EngineDeadError there


class FailingEngine:
    """An in-process engine whose ``generate`` fails, leaving requests in flight or not."""

    mode = "in-process"

    def __init__(self, leaves_requests: bool) -> None:
        self.leaves_requests = leaves_requests
        self.failed = False

    def generate(self) -> None:
        self.failed = True
        raise RuntimeError("boom in the model")

    def broken(self) -> bool:
        return self.failed and self.leaves_requests

    def dead_cause(self, exc: BaseException) -> str:
        return f"the engine core raised {type(exc).__name__}"

    def shutdown(self) -> None:
        pass


def _serve_one(leaves_requests: bool) -> tuple[tuple[str, Any], tuple[str, Any] | None, int]:
    """Run ``worker.serve`` in a forked child on a failing engine: the answer to ``generate``,
    the answer to a second command (None when the child had exited) and its exit code."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=worker.serve, args=(child, FailingEngine(leaves_requests), {}))
    proc.start()
    child.close()
    try:
        assert parent.recv()[0] == "ready"
        parent.send(("generate", {}))
        first = parent.recv()
        second = None
        proc.join(2)
        if proc.exitcode is None:
            parent.send(("shutdown", {}))
            second = parent.recv()
        proc.join(10)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
    assert proc.exitcode is not None
    return first, second, proc.exitcode


def test_an_in_process_core_left_broken_is_answered_dead_and_the_worker_exits() -> None:
    first, second, _ = _serve_one(leaves_requests=True)
    assert first == ("dead", "the engine core raised RuntimeError")
    assert second is None


def test_an_in_process_error_without_requests_in_flight_is_an_ordinary_error() -> None:
    first, second, code = _serve_one(leaves_requests=False)
    assert first[0] == "error" and "boom in the model" in first[1]
    assert second == ("ok", None)
    assert code == 0
