"""Where a local engine goes: its final ``vllm.LLM`` arguments (memory split between resident
engines, statistics on), its environment (OpenMP runtime on a CPU, the engine mode), and what
to say when it does not fit.

Engine modes: vLLM normally runs its engine core in a process of its own, and on a CPU the
model in a third (its executor's worker), each importing torch and vLLM; the plugin's engine
worker already isolates the engine, so ``"in-process"`` runs both in the worker itself
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``distributed_executor_backend="uni"``), which saves
their start-up (tiny target on 2 CPU cores: 11.0 s instead of 26.5 s). ``"multiprocess"`` is
vLLM's own layout and the default (:data:`DEFAULT_MODE`): in-process, a step no longer pays the
round trips between engine core and model process (on a CPU, where vLLM schedules without
async scheduling, a speculative step pays one more: ``take_draft_token_ids``), so the measured
figures are not those of a deployed vLLM: on the tiny pair, speedup +7.3% (95% CI +3.9% to
+10.7%) and speculative tokens/s +11.5%, acceptance unchanged (``benchmarks/startup.py
modes``). The ``engine_mode`` setting (``--specdecode-engine-mode``) chooses; engines on
several devices, and those whose layout the user chose, are always multiprocess.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import platform
import re
import subprocess
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

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
#: What ``place(mode=...)`` accepts: ``"auto"`` is :func:`engine_mode`'s choice (in-process
#: wherever it can be), ``"in-process"`` the same, ``"multiprocess"`` vLLM's own layout.
ENGINE_MODES = ("auto", IN_PROCESS, MULTIPROCESS)
#: The mode ``place`` uses when the caller names none: in-process changes the measured figures
#: (see the module's docstring), so engines keep vLLM's layout unless asked.
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

#: vLLM's switch for saving and loading torch.compile's ahead-of-time artifacts.
AOT_COMPILE_ENV = "VLLM_USE_AOT_COMPILE"

#: The folder of vLLM's ZeroMQ sockets between its processes (``ipc://<folder>/<uuid4>``); by
#: default the temporary folder.
RPC_BASE_ENV = "VLLM_RPC_BASE_PATH"
#: The longest path a Unix socket may have on Linux (``sizeof(sockaddr_un.sun_path)`` - 1).
UNIX_SOCKET_PATH_MAX = 107
#: Where sockets go when the temporary folder's path is too long for them.
SHORT_SOCKET_FOLDER = "/tmp"


def socket_folder(environ: Mapping[str, str] | None = None) -> str | None:
    """A folder for vLLM's sockets (:data:`RPC_BASE_ENV`) when the temporary folder's path
    leaves too little room for ``/<uuid4>`` in a Unix socket's path (a deep ``TMPDIR``, such as
    a pytest ``tmp_path``, makes every start fail with "ipc path ... is longer than 107
    characters"): :data:`SHORT_SOCKET_FOLDER`. None when the user set the variable or the
    temporary folder fits."""
    environ = os.environ if environ is None else environ
    if environ.get(RPC_BASE_ENV):
        return None
    folder = next(
        (environ[k] for k in ("TMPDIR", "TEMP", "TMP") if environ.get(k)), tempfile.gettempdir()
    )
    if len(f"{folder}/{uuid.UUID(int=0)}") <= UNIX_SOCKET_PATH_MAX:
        return None
    return SHORT_SOCKET_FOLDER


#: Why CPU engines start with ``VLLM_USE_AOT_COMPILE=0`` unless the user set it.
CPU_AOT_COMPILE_NOTE = (
    "vLLM for CPU (0.32 with torch 2.13, where AOT compile is on by default) compiles with "
    "torch's own inductor backend (DYNAMO_TRACE_ONCE), whose saved AOT artifact loads as a "
    "plain function; vLLM then calls finalize_loading() on it, which fails ('function' object "
    "has no attribute 'finalize_loading'), logs 'Compiling model again due to a load failure' "
    "and compiles and saves again on every start. Without AOT compile, inductor's own caches "
    "serve a repeated start: the tiny target (2 CPU cores) starts in 36 s instead of 59-69 s "
    "(benchmarks/startup.py compile)."
)


def engine_mode(config: EngineConfig, device: Device) -> str:
    """The mode an engine of ``config`` can have when in-process is asked for (``"auto"``):
    ``"in-process"`` (vLLM's engine core and model in the engine worker) or ``"multiprocess"``
    (vLLM's own processes): for tensor, pipeline, data or context parallel engines, and when
    the user chose the layout (``distributed_executor_backend`` in engine_kwargs,
    ``VLLM_ENABLE_V1_MULTIPROCESSING`` in the environment)."""
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
    if (sockets := socket_folder()) is not None:
        env[RPC_BASE_ENV] = sockets
    in_process = mode != MULTIPROCESS and engine_mode(config, device) == IN_PROCESS
    if in_process:
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
        if AOT_COMPILE_ENV not in os.environ:
            env[AOT_COMPILE_ENV] = "0"  # see CPU_AOT_COMPILE_NOTE
        # Both engines get it, so that they differ only in speculative_config.
        preload = openmp_preload(os.environ.get("LD_PRELOAD", ""), find_iomp())
        if preload is not None:
            env["LD_PRELOAD"] = preload
        if in_process:  # the worker runs the model: give it what vLLM gives its model process
            inherited = env.get("LD_PRELOAD", os.environ.get("LD_PRELOAD", ""))
            preload = platform_preload(inherited)
            if preload != inherited:
                env["LD_PRELOAD"] = preload
            env.update(cpu_model_env(preload))
    return Placement(kwargs, memory, env)


#: What vLLM for CPU sets in its own environment before it starts the process that runs the
#: model (``CpuPlatform.check_and_update_config``): read when that process starts, so an
#: in-process engine's worker must start with them.
_CPU_PLATFORM_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1", "TORCHINDUCTOR_CPP_DYNAMIC_THREADS": "1"}


def platform_preload(preload: str) -> str:
    """``LD_PRELOAD`` as vLLM for CPU sets it on Linux for the process that runs the model:
    torch's own ``libgomp`` after it when no OpenMP runtime is preloaded, and the ``tcmalloc``
    bundled with vLLM (where it has one) first. Found without importing either package."""
    if platform.system() != "Linux":
        return preload
    if not any(name in preload for name in _OPENMP_RUNTIMES):
        torch_dir = _package_dir("torch")
        if torch_dir is not None:
            libs = [os.path.join(os.path.dirname(torch_dir), "torch.libs"), f"{torch_dir}/lib"]
            found = [hit for d in libs for hit in sorted(glob.glob(f"{d}/libgomp*.so*"))]
            if found:
                preload = f"{preload}:{found[0]}" if preload else found[0]
    vllm_dir = _package_dir("vllm")
    if "libtcmalloc" not in preload and vllm_dir is not None:
        for pattern in ("libtcmalloc_minimal*.so*", "libtcmalloc.so*"):
            found = sorted(glob.glob(os.path.join(vllm_dir, "libs", pattern)))
            if found:
                preload = f"{found[0]}:{preload}" if preload else found[0]
                break
    return preload


def _package_dir(name: str) -> str | None:
    """The folder of an installed package, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(next(iter(spec.submodule_search_locations)))


def cpu_model_env(preload: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment vLLM for CPU gives the process that runs the model, for an in-process
    engine's worker (which is that process): the platform's settings and the OpenMP thread
    binding of its executor worker (:func:`omp_binding`). Variables the user set are kept."""
    environ = os.environ if environ is None else environ
    env = {**_CPU_PLATFORM_ENV, **omp_binding(preload, environ)}
    return {k: v for k, v in env.items() if k not in environ}


def omp_binding(preload: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The OpenMP variables vLLM for CPU (0.2x to 0.32, ``vllm.utils.ompmultiprocessing``)
    sets for its executor worker of rank 0 of 1: as many threads as the CPUs chosen by
    ``VLLM_CPU_OMP_THREADS_BIND`` (``auto``: :func:`auto_bind_cpus`; ``nobind``: none; else
    the user's list), each bound to one of them, by the preloaded runtime's variables."""
    bind = environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
    if bind == "nobind":
        return {}
    if bind == "auto":
        cpus = auto_bind_cpus(environ)
    else:
        cpus = parse_cpu_list(bind.split("|")[0])
    if not cpus:
        return {}
    env = {"OMP_NUM_THREADS": str(len(cpus))}
    if "libiomp" in preload or "libomp" in preload:
        env["KMP_AFFINITY"] = f"granularity=fine,explicit,proclist=[{','.join(map(str, cpus))}]"
        env["KMP_BLOCKTIME"] = "5"
        env["KMP_TPAUSE"] = "0"
    elif "libgomp" in preload:
        env["GOMP_CPU_AFFINITY"] = " ".join(map(str, cpus))
    else:
        env["OMP_PLACES"] = "{" + ",".join(map(str, cpus)) + "}"
        env["OMP_PROC_BIND"] = "true"
    return env


def parse_cpu_list(text: str) -> list[int]:
    """``"0-2,4"`` as ``[0, 1, 2, 4]``."""
    ids: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        ids.update(range(int(first), int(last or first) + 1))
    return sorted(ids)


@dataclass(frozen=True)
class LogicalCpu:
    id: int
    core: int
    node: int


def auto_bind_cpus(
    environ: Mapping[str, str], cpus: Sequence[LogicalCpu] | None = None
) -> list[int]:
    """The CPUs vLLM's ``auto`` binding gives rank 0 of 1: the allowed CPUs of the first
    allowed memory node, one per physical core (x86, s390x: its highest-numbered logical CPU;
    POWER: ids mod 8 below 4; others: all), less the last ``VLLM_CPU_NUM_OF_RESERVED_CPU``
    (default 1, left to vLLM's scheduler) when more remain."""
    cpus = list(logical_cpus() if cpus is None else cpus)
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cpus = [c for c in cpus if allowed is None or c.id in allowed]
    nodes = memory_nodes(environ)
    if not cpus or not nodes:
        return []
    on_node = [c for c in cpus if c.node == nodes[0]]
    by_core: dict[int, list[LogicalCpu]] = {}
    for cpu in on_node:
        by_core.setdefault(cpu.core, []).append(cpu)
    machine = platform.machine().lower()
    chosen: list[int] = []
    for siblings in by_core.values():
        ids = sorted(c.id for c in siblings)
        if machine in ("x86_64", "amd64", "i386", "i686", "s390x"):
            chosen.extend(ids[-1:])
        elif machine.startswith("ppc"):
            chosen.extend(i for i in ids if i % 8 < 4)
        else:
            chosen.extend(ids)
    chosen.sort()
    reserved = environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU")
    reserve = int(reserved) if reserved not in (None, "") else 1
    if 0 < reserve < len(chosen):
        chosen = chosen[:-reserve]
    return chosen


def memory_nodes(environ: Mapping[str, str]) -> list[int]:
    """The memory nodes this process may use (``Mems_allowed_list``), narrowed by
    ``CPU_VISIBLE_MEMORY_NODES`` as vLLM does."""
    allowed = [0]
    try:
        with open("/proc/self/status", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("Mems_allowed_list:"):
                    allowed = parse_cpu_list(line.split(":", 1)[1])
    except OSError:
        pass
    visible = environ.get("CPU_VISIBLE_MEMORY_NODES", "")
    if visible and "VLLM_CPU_SIM_MULTI_NUMA" not in environ:
        return [n for n in (int(x) for x in visible.split(",")) if n in allowed]
    return allowed


@cache
def logical_cpus() -> tuple[LogicalCpu, ...]:
    """Every online logical CPU with its core and NUMA node, from ``lscpu`` as vLLM reads them
    (each CPU its own core on node 0 where ``lscpu`` fails)."""
    try:
        out = subprocess.run(
            ["lscpu", "--json", "--extended=CPU,CORE,NODE", "--online"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout  # fmt: skip
        rows = json.loads(re.sub(r'":\s*-\s*(?=[,\n}])', '": "-"', out))["cpus"]
        found = tuple(
            LogicalCpu(
                int(r["cpu"]), int(r["core"]), 0 if r["node"] in ("-", None) else int(r["node"])
            )
            for r in rows
            if r.get("cpu") not in ("-", None) and r.get("core") not in ("-", None)
        )
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
        found = ()
    return found or tuple(LogicalCpu(i, i, 0) for i in range(os.cpu_count() or 1))


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
