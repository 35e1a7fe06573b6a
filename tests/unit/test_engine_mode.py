"""The engine mode: which engines run vLLM's engine core inside the engine worker, what
``place()`` gives each mode, and how the worker reports and handles an in-process core.
One real in-process engine: tests/e2e/test_engine_mode_real.py."""

from __future__ import annotations

import multiprocessing
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_specdecode.engines import placement as placement_module
from pytest_specdecode.engines import worker
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.hardware import Device, Gpu
from pytest_specdecode.engines.placement import (
    IN_PROCESS,
    MULTIPROCESS,
    MULTIPROCESSING_ENV,
    LogicalCpu,
    auto_bind_cpus,
    cpu_model_env,
    engine_mode,
    omp_binding,
    parse_cpu_list,
    place,
    platform_preload,
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


def test_engines_keep_vllms_layout_unless_in_process_is_asked_for() -> None:
    """In-process changes the measured figures (benchmarks/startup.py modes): not a default."""
    placement = place(config(), CPU, max_engines=2)
    assert MULTIPROCESSING_ENV not in placement.env
    assert "distributed_executor_backend" not in placement.engine_kwargs


def test_multiprocess_placement_is_vllms_own_layout() -> None:
    placement = place(config(), CPU, max_engines=2, mode=MULTIPROCESS)
    assert MULTIPROCESSING_ENV not in placement.env
    assert "distributed_executor_backend" not in placement.engine_kwargs
    # everything else is placed alike in both modes
    in_process = place(config(), CPU, max_engines=2, mode=IN_PROCESS)
    assert set(placement.env) <= set(in_process.env)
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


# -- what an in-process CPU engine's worker starts with ------------------------------------------

IOMP = "/venv/lib/libiomp5.so"


def cpus(*rows: tuple[int, int, int]) -> list[LogicalCpu]:
    return [LogicalCpu(*row) for row in rows]


#: Two NUMA nodes of two cores with two hyperthreads each (ids 0-3 and 4-7 on nodes 0 and 1).
SMT = cpus(*[(i, i // 2, i // 4) for i in range(8)])


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An x86 machine whose process may use every CPU and memory nodes 0 and 1."""
    monkeypatch.setattr(placement_module.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(placement_module.os, "sched_getaffinity", lambda _: set(range(64)))
    monkeypatch.setattr(placement_module, "memory_nodes", lambda env: [0, 1])
    return monkeypatch


def test_auto_binding_takes_one_cpu_per_core_of_the_first_node_and_reserves_one(
    machine: pytest.MonkeyPatch,
) -> None:
    assert auto_bind_cpus({}, SMT) == [1]  # cores (0,1) and (2,3): last siblings 1, 3; 3 kept back
    assert auto_bind_cpus({"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}, SMT) == [1, 3]
    machine.setattr(placement_module, "memory_nodes", lambda env: [1])
    assert auto_bind_cpus({}, SMT) == [5]


def test_auto_binding_on_arm_takes_every_cpu_and_keeps_a_lone_core(
    machine: pytest.MonkeyPatch,
) -> None:
    machine.setattr(placement_module.platform, "machine", lambda: "aarch64")
    assert auto_bind_cpus({}, SMT) == [0, 1, 2]
    assert auto_bind_cpus({}, cpus((0, 0, 0))) == [0]  # nothing to reserve when one is left


def test_auto_binding_keeps_to_the_allowed_cpus(machine: pytest.MonkeyPatch) -> None:
    machine.setattr(placement_module.os, "sched_getaffinity", lambda _: {0, 1, 2})
    assert auto_bind_cpus({}, SMT) == [1]  # core (2,3) offers 2 only: 1, 2, then 2 reserved


def test_binding_variables_follow_the_preloaded_runtime(machine: pytest.MonkeyPatch) -> None:
    machine.setattr(placement_module, "logical_cpus", lambda: tuple(SMT))
    env = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    assert omp_binding(IOMP, env) == {
        "OMP_NUM_THREADS": "2",
        "KMP_AFFINITY": "granularity=fine,explicit,proclist=[1,3]",
        "KMP_BLOCKTIME": "5",
        "KMP_TPAUSE": "0",
    }
    assert omp_binding("/usr/lib/libgomp.so.1", env) == {
        "OMP_NUM_THREADS": "2",
        "GOMP_CPU_AFFINITY": "1 3",
    }
    assert omp_binding("", env) == {
        "OMP_NUM_THREADS": "2",
        "OMP_PLACES": "{1,3}",
        "OMP_PROC_BIND": "true",
    }
    assert omp_binding(IOMP, {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}) == {}
    assert omp_binding(IOMP, {"VLLM_CPU_OMP_THREADS_BIND": "4-6|8-10"})["OMP_NUM_THREADS"] == "3"


def test_cpu_list_parsing() -> None:
    assert parse_cpu_list("0-2,4,7-8") == [0, 1, 2, 4, 7, 8]
    assert parse_cpu_list("3") == [3]


def test_a_user_set_variable_wins_over_the_binding(machine: pytest.MonkeyPatch) -> None:
    machine.setattr(placement_module, "logical_cpus", lambda: tuple(SMT))
    env = cpu_model_env(IOMP, {"OMP_NUM_THREADS": "8", "KMP_BLOCKTIME": "0"})
    assert "OMP_NUM_THREADS" not in env and "KMP_BLOCKTIME" not in env
    assert env["KMP_AFFINITY"] == "granularity=fine,explicit,proclist=[1]"
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"


def test_in_process_cpu_placement_binds_threads_and_multiprocess_leaves_it_to_vllm(
    machine: pytest.MonkeyPatch,
) -> None:
    machine.setattr(placement_module, "logical_cpus", lambda: tuple(SMT))
    machine.setattr(placement_module, "find_iomp", lambda: IOMP)
    machine.setenv("LD_PRELOAD", "")
    for name in ("OMP_NUM_THREADS", "KMP_AFFINITY", "VLLM_CPU_OMP_THREADS_BIND"):
        machine.delenv(name, raising=False)
    inproc = place(config(), CPU, 2, mode="auto")
    assert inproc.env["KMP_AFFINITY"] == "granularity=fine,explicit,proclist=[1]"
    assert inproc.env["OMP_NUM_THREADS"] == "1"
    assert inproc.env["LD_PRELOAD"].startswith(IOMP)
    multi = place(config(), CPU, 2, mode=MULTIPROCESS)
    assert "OMP_NUM_THREADS" not in multi.env and "KMP_AFFINITY" not in multi.env
    assert multi.env["LD_PRELOAD"] == IOMP
    gpu = place(config(), GPU, 2, mode="auto")
    assert "OMP_NUM_THREADS" not in gpu.env  # vLLM sets a GPU engine's threads itself


def test_platform_preload_adds_torchs_libgomp_and_vllms_tcmalloc(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "torch" / "lib").mkdir(parents=True)
    (tmp_path / "torch" / "lib" / "libgomp-a34b3233.so.1").write_text("")
    (tmp_path / "vllm" / "libs").mkdir(parents=True)
    (tmp_path / "vllm" / "libs" / "libtcmalloc_minimal.so.4").write_text("")
    dirs = {"torch": str(tmp_path / "torch"), "vllm": str(tmp_path / "vllm")}
    monkeypatch.setattr(placement_module.platform, "system", lambda: "Linux")
    monkeypatch.setattr(placement_module, "_package_dir", dirs.get)
    gomp = f"{tmp_path}/torch/lib/libgomp-a34b3233.so.1"
    tcmalloc = f"{tmp_path}/vllm/libs/libtcmalloc_minimal.so.4"
    assert platform_preload("") == f"{tcmalloc}:{gomp}"
    assert platform_preload(IOMP) == f"{tcmalloc}:{IOMP}"  # a runtime is there: no libgomp
    assert platform_preload(f"/lib/libtcmalloc.so:{IOMP}") == f"/lib/libtcmalloc.so:{IOMP}"
    monkeypatch.setattr(placement_module, "_package_dir", lambda _: None)
    assert platform_preload("") == ""


def test_cpu_engines_start_without_vllms_aot_compile_unless_the_user_chose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    for mode in (IN_PROCESS, MULTIPROCESS):
        assert place(config(), CPU, 2, mode=mode).env["VLLM_USE_AOT_COMPILE"] == "0"
    assert "VLLM_USE_AOT_COMPILE" not in place(config(), GPU, 2).env
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
    assert "VLLM_USE_AOT_COMPILE" not in place(config(), CPU, 2).env


# -- the engine_mode setting -------------------------------------------------------------------


@pytest.mark.parametrize(("value", "in_process"), [("in-process", True), ("multiprocess", False)])
def test_the_engine_mode_setting_reaches_each_engine_s_placement(
    value: str, in_process: bool
) -> None:
    """``engine_mode`` (Bench keyword, --specdecode-engine-mode, ini) → the pool → place()."""
    from pytest_specdecode.measure.bench import bench_settings, make_source

    from ..fakes import FakeSource, fake_pool

    pool = make_source(bench_settings({"engine_mode": value}), lambda _: None)
    assert pool.mode == value  # type: ignore[attr-defined]
    fake = fake_pool(FakeSource(), mode=value)
    engine = fake.acquire(config())
    assert (engine.placement.env.get(MULTIPROCESSING_ENV) == "0") is in_process
    assert (engine.placement.engine_kwargs.get("distributed_executor_backend") == "uni") is (
        in_process
    )
    fake.close()


def test_a_bad_engine_mode_names_the_setting_and_the_choices() -> None:
    from pytest_specdecode.errors import ConfigError
    from pytest_specdecode.measure.bench import bench_settings

    with pytest.raises(ConfigError, match=r"Bench\(engine_mode=\.\.\.\).*in-process"):
        bench_settings({"engine_mode": "threads"})
