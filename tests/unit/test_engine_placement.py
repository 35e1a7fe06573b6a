"""How engines are placed: memory per engine and the CPU engine's OpenMP preload (no engine)."""

from __future__ import annotations

import pytest

from pytest_specdecode.engines import placement as engine
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.hardware import Device, Gpu
from pytest_specdecode.engines.placement import openmp_preload, place

IOMP = "/venv/lib/libiomp5.so"
CPU = Device("cpu", "test CPU")


@pytest.mark.parametrize(
    ("preload", "expected"),
    [
        ("", IOMP),
        ("/usr/lib/libtcmalloc_minimal.so.4", f"{IOMP}:/usr/lib/libtcmalloc_minimal.so.4"),
        ("/opt/intel/libiomp5.so", None),  # already there
        ("/usr/lib/libtcmalloc.so:/usr/lib/aarch64-linux-gnu/libgomp.so.1", None),  # vLLM: not both
        ("/usr/lib/llvm/libomp.so", None),
    ],
)
def test_intel_openmp_is_preloaded_unless_a_runtime_is(preload: str, expected: str | None) -> None:
    assert openmp_preload(preload, IOMP) == expected


def test_no_intel_openmp_installed_leaves_the_preload_alone() -> None:
    assert openmp_preload("/usr/lib/libtcmalloc.so", None) is None


def test_cpu_engines_get_a_kv_cache_and_a_user_libgomp_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine, "find_iomp", lambda: IOMP)
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libgomp.so.1")
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    placement = place(EngineConfig.create("/m/target", None, {}), CPU, max_engines=2)
    assert placement.engine_kwargs["kv_cache_memory_bytes"] == engine.CPU_KV_CACHE_BYTES
    assert placement.engine_kwargs["disable_log_stats"] is False
    assert "LD_PRELOAD" not in placement.env  # inherited unchanged: vLLM refuses two runtimes
    monkeypatch.setenv("LD_PRELOAD", "")
    placement = place(EngineConfig.create("/m/target", None, {}), CPU, max_engines=2)
    assert placement.env["LD_PRELOAD"] == IOMP


def test_two_resident_gpu_engines_split_the_memory_budget() -> None:
    gpu = Device("gpu", "H100", (Gpu(0, "H100", 80.0, 79.0),))
    placement = place(EngineConfig.create("/m/target", None, {}), gpu, max_engines=2)
    assert placement.engine_kwargs["gpu_memory_utilization"] == 0.45
    assert placement.memory == "gpu_memory_utilization=0.45 (split 2 ways)"
    alone = place(EngineConfig.create("/m/target", None, {}), gpu, max_engines=1)
    assert alone.engine_kwargs["gpu_memory_utilization"] == 0.9


def test_a_temporary_folder_too_deep_for_vllm_s_sockets_moves_them() -> None:
    """vLLM names its sockets ``<temporary folder>/<uuid4>``, at most 107 characters: a deeper
    folder would fail every start, so the sockets go to /tmp; a user's own choice is kept."""
    deep = "/tmp/" + "d" * 80
    assert engine.socket_folder({"TMPDIR": deep}) == "/tmp"
    assert engine.socket_folder({"TMPDIR": "/tmp/" + "d" * 65}) is None  # 70 + 37 = 107
    assert engine.socket_folder({"TMPDIR": "/tmp/" + "d" * 66}) == "/tmp"
    assert engine.socket_folder({"TMPDIR": deep, "VLLM_RPC_BASE_PATH": "/run/x"}) is None


def test_place_gives_the_short_socket_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", "/tmp/" + "d" * 80)
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    placed = place(EngineConfig.create("/m/target", None, {}), CPU, max_engines=2)
    assert placed.env["VLLM_RPC_BASE_PATH"] == "/tmp"
    monkeypatch.setenv("TMPDIR", "/tmp")
    placed = place(EngineConfig.create("/m/target", None, {}), CPU, max_engines=2)
    assert "VLLM_RPC_BASE_PATH" not in placed.env
