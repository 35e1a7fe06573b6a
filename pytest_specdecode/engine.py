"""Parent-side handles on engine workers, and the bounded pool that reuses them."""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.util
import os
import re
import signal
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .backend import Counters, Placement, PlainCalls, Round
from .engine_config import EngineConfig
from .errors import EngineCrashedError, EngineError, EngineStartError, EngineTimeoutError
from .memory import group_pids, process_titles
from .platform import Device, detect_device, find_iomp
from .worker import exit_cause

#: KV cache given to each engine on a CPU when the user sets no memory knob (vLLM's default,
#: a fraction of the whole machine's memory, fails as soon as two engines are resident).
CPU_KV_CACHE_BYTES = 512 * 2**20
#: Fraction of a GPU that all resident engines together may claim.
GPU_MEMORY_BUDGET = 0.9

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


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


def _tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError:
        return "(no log)"


def _log_tail(path: str) -> str:
    """The end of an engine log, for an error message (a failed engine's log is kept)."""
    return f"--- last lines of the engine log {path} (kept) ---\n{_tail(path)}"


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


#: Engines whose worker may be running. They are killed at interpreter exit, before
#: multiprocessing's exit-time join, which would otherwise wait forever on a worker that an
#: interrupted session never shut down.
_RUNNING: set[Engine] = set()


def _kill_running() -> None:
    for engine in list(_RUNNING):
        engine.kill()


# atexit runs handlers last-registered first: multiprocessing.util (imported above) registered
# its join earlier, so this runs before it. A forked child does not own its parent's engines.
atexit.register(_kill_running)
os.register_at_fork(after_in_child=_RUNNING.clear)


@contextmanager
def _sigint_held() -> Iterator[None]:
    """Hold a Ctrl-C back until the block ends (a worker started and registered is never
    lost to an interrupt landing in between); then deliver it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:  # a handler not set from Python: leave it alone
        yield
        return
    received: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)


class Engine(PlainCalls):
    """One engine worker process holding one ``vllm.LLM``; methods block until it answers.

    Whatever interrupts it (Ctrl-C included), a worker that was started is killed with its whole
    process group: by the failing call itself, by :meth:`close`, or at interpreter exit.
    """

    def __init__(
        self,
        config: EngineConfig,
        placement: Placement,
        *,
        timeout: float,
        log_dir: str,
        on_start: Callable[[Engine], None] | None = None,
    ) -> None:
        """Start the worker and wait until vLLM is ready; ``on_start(engine)`` is called as soon
        as the worker process exists (before the wait), so an owner can track it."""
        self.config = config
        self.placement = placement
        self.timeout = timeout
        self.calls = 0
        #: the engine failed (start, crash, timeout, dead engine core): its log is worth keeping
        self.failed = False
        self._pending = False  # a command was sent and its answer not read (an interrupt)
        self._reaped = False  # killed and reaped: its pid may belong to another process now
        self._core_pids: list[int] = []  # vLLM's long-lived processes, known once ready
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
        self.pid: int | None = None
        self.info: dict[str, Any] = {}
        started = time.perf_counter()
        try:
            with _sigint_held():
                with _environ(placement.env):
                    self._process.start()
                _RUNNING.add(self)
                if on_start is not None:
                    on_start(self)
            child_conn.close()
            self.pid = self._process.pid
            status, payload = self._receive("start", timeout)
            if status != "ready":
                self.failed = True
                raise EngineStartError(
                    f"{config.describe()} failed to start:\n{payload}\n{_log_tail(self.log_path)}"
                )
        except BaseException:
            self.kill()
            raise
        self.info = payload
        self.start_seconds = time.perf_counter() - started
        if self.pid is not None:
            titles = process_titles(group_pids(self.pid))
            self._core_pids = [p for p, title in titles.items() if title.startswith("VLLM::")]

    @property
    def alive(self) -> bool:
        """Whether the worker runs, and so do vLLM's processes under it (its engine core)."""
        if not self._process.is_alive():
            return False
        if not self._core_pids or self.pid is None:
            return True
        return set(self._core_pids) <= set(group_pids(self.pid))

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
                self.failed = True
                self.kill()
                raise EngineTimeoutError(
                    f"{self.config.describe()} (worker pid {self.pid}) did not finish {doing} "
                    f"within {timeout:g} s and was killed (raise --specdecode-timeout or the "
                    f"marker's timeout=).\n{_log_tail(self.log_path)}"
                )

    def _crashed(self, doing: str) -> EngineCrashedError:
        """The error for a dead worker: its exit cause and the end of its log."""
        if self._process.exitcode is None:
            self._process.join(5)
        cause = exit_cause(self._process.exitcode)
        self.failed = True
        self.kill()
        return EngineCrashedError(
            f"{self.config.describe()} (worker pid {self.pid}) died during {doing}: {cause}.\n"
            f"{_log_tail(self.log_path)}"
        )

    def _core_died(self, doing: str, cause: str) -> EngineCrashedError:
        """The error for a worker whose vLLM engine core died: the worker has shut down."""
        self.failed = True
        self._process.join(10)  # it shuts vLLM down (bounded) and exits
        self.kill()
        return EngineCrashedError(
            f"{self.config.describe()} (worker pid {self.pid}): vLLM's engine core died during "
            f"{doing}: {cause}. The pool starts a fresh engine on its next use.\n"
            f"{_log_tail(self.log_path)}"
        )

    def call(self, command: str, **kwargs: Any) -> Any:
        """Run ``command`` in the worker and return its answer."""
        __tracebackhide__ = True
        if not self._process.is_alive():  # a dead engine core alone: the worker reports it
            raise self._crashed(f"{command} (it had died before the call)")
        self.calls += 1
        self._pending = True
        try:
            self._conn.send((command, kwargs))
        except (BrokenPipeError, OSError):
            pass  # reported by _receive as a crash
        status, payload = self._receive(command, self.timeout)
        self._pending = False
        if status == "dead":
            raise self._core_died(command, payload)
        if status != "ok":
            raise EngineError(f"{self.config.describe()}: {command} failed:\n{payload}")
        return payload

    def generate_round(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any], concurrency: int | None = None
    ) -> Round:
        """Generate and time it inside the worker."""
        __tracebackhide__ = True
        return Round.of(
            self.call(
                "generate", prompts=list(prompts), sampling=dict(sampling), concurrency=concurrency
            )
        )

    def sample(self, prompts: Sequence[Any], sampling: Mapping[str, Any]) -> list[list[list[int]]]:
        """Token ids of every completion (``sampling["n"]`` per prompt), per prompt."""
        __tracebackhide__ = True
        result: list[list[list[int]]] = self.call(
            "sample", prompts=list(prompts), sampling=dict(sampling)
        )
        return result

    def counters(self) -> Counters:
        """Cumulative speculative-decoding counters of this engine."""
        __tracebackhide__ = True
        return Counters.of(self.call("spec_counters"))

    def metrics(self) -> list[dict[str, Any]]:
        """Every ``vllm:*`` metric of this engine, as plain dicts."""
        result: list[dict[str, Any]] = self.call("metrics")
        return result

    def close(self, timeout: float = 60.0) -> None:
        """Ask the worker to shut vLLM down and exit; kill its process group if it won't.

        A worker still busy with an interrupted command is killed at once.
        """
        try:
            if self._process.is_alive() and not self._pending and not self._conn.closed:
                self._conn.send(("shutdown", {}))
                if self._conn.poll(timeout):
                    self._conn.recv()
                self._process.join(10)
        except (EOFError, OSError):
            pass
        finally:
            self.kill()

    def kill(self) -> None:
        """Kill the worker and every process of its group (vLLM's engine-core children)."""
        pid = self._process.pid
        if pid is not None and not self._reaped:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if self._process.exitcode is None:  # not reaped: the pid is still the worker's
                try:  # not yet leading its own group
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self._process.join(5)
            self._reaped = self._process.exitcode is not None
        _RUNNING.discard(self)
        try:
            self._conn.close()
        except OSError:
            pass


class EnginePool:
    """Engines cached by configuration; at most ``max_engines`` resident (least recently used
    is shut down first).

    Engine logs go to ``log_dir`` (by default a temporary folder, removed at :meth:`close`
    unless it holds the log of an engine that failed: only those are kept).
    """

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
        self._own_log_dir = log_dir is None
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="specdecode-logs-")
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._spawned: list[Engine] = []  # every engine started, ready or not
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
            self._engines.pop(config.key)
            engine.failed = True
            engine.kill()
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
            engine = Engine(
                config,
                placement,
                timeout=self.timeout,
                log_dir=self.log_dir,
                on_start=self._spawned.append,
            )
        except EngineStartError as exc:
            if out_of_memory(str(exc)):
                raise EngineStartError(
                    f"{exc}\n{memory_advice(self.device, self.max_engines)}"
                ) from None
            raise
        self._engines[config.key] = engine
        engine.timeout = timeout or self.timeout
        self.starts += 1
        self.start_seconds += engine.start_seconds
        self.progress(f"{config.describe()} ready in {engine.start_seconds:.1f} s")
        return engine

    def release(self, config: EngineConfig) -> None:
        """Shut down (or reap) the engine for ``config`` if the pool has one."""
        engine = self._engines.pop(config.key, None)
        if engine is not None:
            engine.close()

    def close(self) -> None:
        """Shut every engine down; none survives this call, even one interrupted mid-start.

        Then remove the logs of engines that did not fail (and the pool's own log folder when
        nothing is left in it).
        """
        interrupted: BaseException | None = None
        while self._engines:
            _, engine = self._engines.popitem(last=False)
            if interrupted is not None:
                engine.kill()
                continue
            try:
                engine.close()
            except Exception:
                engine.kill()
            except BaseException as exc:  # a second Ctrl-C: kill the rest without waiting
                interrupted = exc
        for engine in self._spawned:
            engine.kill()
        self._remove_logs()
        if interrupted is not None:
            raise interrupted

    def kept_logs(self) -> list[str]:
        """Logs of the engines that failed, kept after :meth:`close`."""
        return [e.log_path for e in self._spawned if e.failed and os.path.exists(e.log_path)]

    def _remove_logs(self) -> None:
        if not self._own_log_dir:
            return  # the caller's folder: the caller's logs
        for engine in self._spawned:
            if not engine.failed:
                try:
                    os.remove(engine.log_path)
                except OSError:
                    pass
        self._spawned = [e for e in self._spawned if e.failed]
        try:
            os.rmdir(self.log_dir)  # only when empty: failed engines' logs stay
        except OSError:
            pass

    def __len__(self) -> int:
        return len(self._engines)
