"""Where a local engine goes: its final ``vllm.LLM`` arguments (memory split between resident
engines, statistics on), its environment (OpenMP runtime on a CPU, the engine mode), and what
to say when it does not fit.

Engine modes: vLLM normally runs its engine core in a process of its own, and on a CPU the
model in a third (its executor's worker), each importing torch and vLLM; the plugin's engine
worker already isolates the engine, so ``"in-process"`` runs both in the worker itself
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``distributed_executor_backend="uni"``), which saves
their start-up. ``"multiprocess"`` is vLLM's own layout, kept for engines on several devices
and wherever the user chose the layout.
"""

from __future__ import annotations

import os
import re

from .config import EngineConfig
from .hardware import Device, find_iomp
from .protocol import Placement

#: KV cache given to each engine on a CPU when the user sets no memory knob (vLLM's default,
#: a fraction of the whole machine's memory, fails as soon as two engines are resident).
CPU_KV_CACHE_BYTES = 512 * 2**20
#: Fraction of a GPU that all resident engines together may claim.
GPU_MEMORY_BUDGET = 0.9


IN_PROCESS = "in-process"
MULTIPROCESS = "multiprocess"
#: What ``place(mode=...)`` accepts: ``"auto"`` is :func:`engine_mode`'s choice.
ENGINE_MODES = ("auto", IN_PROCESS, MULTIPROCESS)
#: The mode ``place`` uses when the caller names none.
DEFAULT_MODE = MULTIPROCESS

#: ``vllm.LLM`` arguments whose value above 1 spreads an engine over several processes.
_PARALLEL_ARGS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "prefill_context_parallel_size",
    "decode_context_parallel_size",
)
#: The environment variable that makes vLLM run its engine core in the calling process.
MULTIPROCESSING_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"


def engine_mode(config: EngineConfig, device: Device) -> str:
    """How an engine of ``config`` runs when nobody asks: ``"in-process"`` (vLLM's engine core
    and model in the engine worker) or ``"multiprocess"`` (vLLM's own processes): for tensor,
    pipeline, data or context parallel engines, and when the user chose the layout
    (``distributed_executor_backend`` in engine_kwargs, ``VLLM_ENABLE_V1_MULTIPROCESSING`` in
    the environment)."""
    del device  # one device either way: the same rule on a CPU and a GPU
    kwargs = config.engine_kwargs
    for name in _PARALLEL_ARGS:
        value = kwargs.get(name)
        if isinstance(value, int) and value > 1:
            return MULTIPROCESS
    if kwargs.get("distributed_executor_backend") is not None:
        return MULTIPROCESS
    if os.environ.get(MULTIPROCESSING_ENV) is not None:
        return MULTIPROCESS
    return IN_PROCESS


def place(
    config: EngineConfig, device: Device, max_engines: int, *, mode: str = DEFAULT_MODE
) -> Placement:
    """Final engine kwargs and environment: stats on, memory split so that ``max_engines``
    engines fit, and the engine mode (default :data:`DEFAULT_MODE`): ``"auto"``
    (:func:`engine_mode`), ``"multiprocess"``, or ``"in-process"`` where :func:`engine_mode`
    allows it (else multiprocess)."""
    if mode not in ENGINE_MODES:
        raise ValueError(f"mode must be one of {', '.join(ENGINE_MODES)}; got {mode!r}")
    kwargs = dict(config.engine_kwargs)
    kwargs["disable_log_stats"] = False
    if config.speculative_config is not None:
        kwargs["speculative_config"] = config.speculative_config
    env: dict[str, str] = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    if mode != MULTIPROCESS and engine_mode(config, device) == IN_PROCESS:
        env[MULTIPROCESSING_ENV] = "0"
        kwargs["distributed_executor_backend"] = "uni"
    if device.kind == "gpu":
        if "gpu_memory_utilization" in kwargs or "kv_cache_memory_bytes" in kwargs:
            memory = "user-set " + (
                f"gpu_memory_utilization={kwargs['gpu_memory_utilization']}"
                if "gpu_memory_utilization" in kwargs
                else f"kv_cache_memory_bytes={kwargs['kv_cache_memory_bytes']}"
            )
        else:
            share = round(GPU_MEMORY_BUDGET / max_engines, 3)
            kwargs["gpu_memory_utilization"] = share
            memory = f"gpu_memory_utilization={share} (split {max_engines} ways)"
    else:
        if (
            "kv_cache_memory_bytes" in kwargs
            or "gpu_memory_utilization" in kwargs
            or os.environ.get("VLLM_CPU_KVCACHE_SPACE")
        ):
            memory = "user-set"
        else:
            kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
            memory = f"kv_cache_memory_bytes={CPU_KV_CACHE_BYTES // 2**20} MiB"
        # Both engines get it, so that they differ only in speculative_config.
        preload = openmp_preload(os.environ.get("LD_PRELOAD", ""), find_iomp())
        if preload is not None:
            env["LD_PRELOAD"] = preload
    return Placement(kwargs, memory, env)


#: Library names by which vLLM for CPU recognises an OpenMP runtime in ``LD_PRELOAD``.
_OPENMP_RUNTIMES = ("libiomp", "libomp", "libgomp")


def openmp_preload(preload: str, iomp: str | None) -> str | None:
    """``LD_PRELOAD`` for a CPU engine: Intel OpenMP first, unless one runtime is preloaded
    already (vLLM refuses two, e.g. a user's ``libgomp`` beside ``libiomp5``); None: unchanged."""
    if iomp is None or any(name in preload for name in _OPENMP_RUNTIMES):
        return None
    return f"{iomp}:{preload}" if preload else iomp


#: What torch and vLLM (0.20 to 0.32) say when an engine does not fit in memory: the exception
#: types, and vLLM's own messages for weights, activations and KV cache on GPUs and CPUs. Words
#: such as "memory" alone are no sign: every log names the plugin's ``kv_cache_memory_bytes``.
_OUT_OF_MEMORY = re.compile(
    r"OutOfMemoryError\b"  # torch.OutOfMemoryError, torch.cuda.OutOfMemoryError
    r"|(?<![\w.])MemoryError\b"
    r"|CUDA out of memory"
    r"|(?:can't|cannot) allocate memory"  # DefaultCPUAllocator, ENOMEM
    r"|No available memory for the cache blocks"
    r"|is larger than the available KV cache memory"
    r"|allocation is less than requested memory for kv"
    r"|is less than desired (?:CPU|GPU) memory utilization"
    r"|is less than the engine's budget"
    r"|exceed the desired GPU memory utilization"
    r"|not enough GPU memory",
    re.IGNORECASE,
)


def out_of_memory(text: str) -> bool:
    """Whether a failed start's traceback or log says the engine ran out of memory."""
    return _OUT_OF_MEMORY.search(text) is not None


def _available_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def memory_advice(device: Device, max_engines: int) -> str:
    """Free memory now and the knobs that make an engine fit."""
    if device.kind == "gpu":
        from .hardware import nvml_gpus

        free = ", ".join(
            f"GPU {g.index} {g.name}: {g.memory_free_gib:.1f} of {g.memory_total_gib:.1f} GiB free"
            for g in nvml_gpus()
        )
        knobs = (
            "lower gpu_memory_utilization in engine_kwargs (each of the "
            f"{max_engines} resident engines claims its share of the card), lower max_model_len, "
            "or keep one engine resident (--specdecode-max-engines 1, runs the engines one "
            "after the other)"
        )
    else:
        available = _available_gib()
        free = f"{available:.1f} GiB of RAM available" if available is not None else "unknown"
        knobs = (
            "set kv_cache_memory_bytes (or lower gpu_memory_utilization, which on a CPU is a "
            "fraction of RAM) in engine_kwargs, lower max_model_len, or keep one engine resident "
            "(--specdecode-max-engines 1)"
        )
    return f"The engine ran out of memory. Free now: {free}. To make it fit: {knobs}."
