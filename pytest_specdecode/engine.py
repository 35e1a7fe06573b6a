"""Parent-side handles on engine workers, and the bounded pool that reuses them."""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .engine_config import EngineConfig
from .errors import EngineCrashedError, EngineError, EngineStartError, EngineTimeoutError
from .platform import Device, detect_device, find_iomp

#: KV cache given to each engine on a CPU when the user sets no memory knob (vLLM's default,
#: a fraction of the whole machine's memory, fails as soon as two engines are resident).
CPU_KV_CACHE_BYTES = 512 * 2**20
#: Fraction of a GPU that all resident engines together may claim.
GPU_MEMORY_BUDGET = 0.9

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class Placement:
    """How an engine was placed: the final ``vllm.LLM`` kwargs and a note for reports."""

    engine_kwargs: dict[str, Any]
    memory: str
    env: dict[str, str]


def place(config: EngineConfig, device: Device, max_engines: int) -> Placement:
    """Final engine kwargs: stats on, and memory split so that ``max_engines`` engines fit."""
    kwargs = dict(config.engine_kwargs)
    kwargs["disable_log_stats"] = False
    if config.speculative_config is not None:
        kwargs["speculative_config"] = config.speculative_config
    env: dict[str, str] = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
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


@contextmanager
def _environ(extra: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _exit_cause(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def _tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError:
        return "(no log)"


_MEMORY_WORDS = ("out of memory", "oom", "memory", "kv cache", "cache blocks")


def _looks_like_memory(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _MEMORY_WORDS)


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
        from .platform import nvml_gpus

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


class Engine:
    """One engine worker process holding one ``vllm.LLM``; methods block until it answers."""

    def __init__(
        self,
        config: EngineConfig,
        placement: Placement,
        *,
        timeout: float,
        log_dir: str,
    ) -> None:
        self.config = config
        self.placement = placement
        self.timeout = timeout
        self.calls = 0
        fd, self.log_path = tempfile.mkstemp(
            prefix="specdecode-engine-", suffix=".log", dir=log_dir
        )
        os.close(fd)
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        from . import worker

        self._process = ctx.Process(
            target=worker.main,
            args=(child_conn, config.target, placement.engine_kwargs, self.log_path),
            name="specdecode-engine",
            daemon=False,
        )
        started = time.perf_counter()
        with _environ(placement.env):
            self._process.start()
        child_conn.close()
        self.pid = self._process.pid
        self.info: dict[str, Any] = {}
        status, payload = self._receive("start", timeout)
        if status != "ready":
            self.kill()
            raise EngineStartError(
                f"{config.describe()} failed to start:\n{payload}\n"
                f"--- last lines of the engine log {self.log_path} ---\n{_tail(self.log_path)}"
            )
        self.info = payload
        self.start_seconds = time.perf_counter() - started

    @property
    def alive(self) -> bool:
        return self._process.is_alive()

    def _receive(self, doing: str, timeout: float) -> tuple[str, Any]:
        __tracebackhide__ = True
        deadline = time.monotonic() + timeout
        while True:
            if self._conn.poll(0.5):
                try:
                    message: tuple[str, Any] = self._conn.recv()
                    return message
                except (EOFError, OSError):
                    pass  # the worker died: report below
            if not self._process.is_alive() or self._conn.closed:
                raise self._crashed(doing)
            if time.monotonic() > deadline:
                self.kill()
                raise EngineTimeoutError(
                    f"{self.config.describe()} (worker pid {self.pid}) did not finish {doing} "
                    f"within {timeout:g} s and was killed (raise --specdecode-timeout or the "
                    f"marker's timeout=).\n--- last lines of the engine log {self.log_path} "
                    f"---\n{_tail(self.log_path)}"
                )

    def _crashed(self, doing: str) -> EngineCrashedError:
        """The error for a dead worker: its exit cause and the end of its log."""
        if self._process.exitcode is None:
            self._process.join(5)
        cause = _exit_cause(self._process.exitcode)
        self.kill()
        return EngineCrashedError(
            f"{self.config.describe()} (worker pid {self.pid}) died during {doing}: {cause}.\n"
            f"--- last lines of the engine log {self.log_path} ---\n{_tail(self.log_path)}"
        )

    def call(self, command: str, **kwargs: Any) -> Any:
        """Run ``command`` in the worker and return its answer."""
        __tracebackhide__ = True
        if not self.alive:
            raise self._crashed(f"{command} (it had died before the call)")
        self.calls += 1
        try:
            self._conn.send((command, kwargs))
        except (BrokenPipeError, OSError):
            pass  # reported by _receive as a crash
        status, payload = self._receive(command, self.timeout)
        if status != "ok":
            raise EngineError(f"{self.config.describe()}: {command} failed:\n{payload}")
        return payload

    def generate(
        self, prompts: Sequence[Any], sampling: dict[str, Any], concurrency: int | None = None
    ) -> dict[str, Any]:
        """Generate and time it inside the worker: ``{"elapsed", "requests": [...]}``."""
        __tracebackhide__ = True
        result: dict[str, Any] = self.call(
            "generate", prompts=list(prompts), sampling=sampling, concurrency=concurrency
        )
        return result

    def sample(self, prompts: Sequence[Any], sampling: dict[str, Any]) -> list[list[list[int]]]:
        """Token ids of every completion (``sampling["n"]`` per prompt), per prompt."""
        __tracebackhide__ = True
        result: list[list[list[int]]] = self.call(
            "sample", prompts=list(prompts), sampling=sampling
        )
        return result

    def spec_counters(self) -> dict[str, Any]:
        """Cumulative speculative-decoding counters of this engine."""
        result: dict[str, Any] = self.call("spec_counters")
        return result

    def metrics(self) -> list[dict[str, Any]]:
        """Every ``vllm:*`` metric of this engine, as plain dicts."""
        result: list[dict[str, Any]] = self.call("metrics")
        return result

    def close(self, timeout: float = 60.0) -> None:
        """Ask the worker to shut vLLM down and exit; kill its process group if it won't."""
        if self._process.is_alive():
            try:
                self._conn.send(("shutdown", {}))
                if self._conn.poll(timeout):
                    self._conn.recv()
            except (EOFError, OSError, BrokenPipeError):
                pass
            self._process.join(10)
        self.kill()

    def kill(self) -> None:
        """Kill the worker and every process of its group (vLLM's engine-core children)."""
        try:
            if self.pid:
                os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self._process.pid is not None:
            self._process.join(5)
        try:
            self._conn.close()
        except OSError:
            pass


class EnginePool:
    """Engines cached by configuration; at most ``max_engines`` resident (least recently used
    is shut down first)."""

    def __init__(
        self,
        max_engines: int = 2,
        *,
        timeout: float = 900.0,
        progress: Progress = _quiet,
        device: Device | None = None,
        log_dir: str | None = None,
    ) -> None:
        self.max_engines = max_engines
        self.timeout = timeout
        self.progress = progress
        self._device = device
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="specdecode-logs-")
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self.starts = 0
        self.start_seconds = 0.0

    @property
    def device(self) -> Device:
        if self._device is None:
            self._device = detect_device()
        return self._device

    def acquire(
        self,
        config: EngineConfig,
        *,
        keep: Sequence[EngineConfig] = (),
        timeout: float | None = None,
    ) -> Engine:
        """The engine for ``config``, started if needed. Engines in ``keep`` are not evicted.

        A start may take the pool's ``timeout``; ``timeout`` (a test's own) bounds each call.
        """
        __tracebackhide__ = True
        engine = self._engines.get(config.key)
        if engine is not None and not engine.alive:
            self.progress(f"{config.describe()} is no longer running; starting a fresh one")
            self.release(config)
            engine = None
        if engine is not None:
            self._engines.move_to_end(config.key)
            engine.timeout = timeout or self.timeout
            return engine
        keep_keys = {c.key for c in keep}
        while len(self._engines) >= self.max_engines:
            victim = next((k for k in self._engines if k not in keep_keys), None)
            if victim is None:
                break
            old = self._engines.pop(victim)
            self.progress(f"shutting down {old.config.describe()} (pool holds {self.max_engines})")
            old.close()
        placement = place(config, self.device, self.max_engines)
        self.progress(f"starting {config.describe()} [{placement.memory}] ...")
        try:
            engine = Engine(config, placement, timeout=self.timeout, log_dir=self.log_dir)
        except EngineStartError as exc:
            if _looks_like_memory(str(exc)):
                raise EngineStartError(
                    f"{exc}\n{memory_advice(self.device, self.max_engines)}"
                ) from None
            raise
        engine.timeout = timeout or self.timeout
        self.starts += 1
        self.start_seconds += engine.start_seconds
        self.progress(f"{config.describe()} ready in {engine.start_seconds:.1f} s")
        self._engines[config.key] = engine
        return engine

    def release(self, config: EngineConfig) -> None:
        """Shut down (or reap) the engine for ``config`` if the pool has one."""
        engine = self._engines.pop(config.key, None)
        if engine is not None:
            engine.close()

    def close(self) -> None:
        """Shut every engine down; none survives this call."""
        while self._engines:
            _, engine = self._engines.popitem(last=False)
            try:
                engine.close()
            except Exception:
                engine.kill()

    def __len__(self) -> int:
        return len(self._engines)
