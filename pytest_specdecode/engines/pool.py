"""The bounded pool that starts local engines (together where it can) and reuses them
across tests, evicting the one needed farthest ahead."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence

from ..errors import EngineError, EngineStartError
from .config import EngineConfig
from .hardware import Device, detect_device
from .interrupts import sigterm_as_interrupt, sigterm_restored
from .local import Engine
from .placement import DEFAULT_MODE, ENGINE_MODES, memory_advice, out_of_memory, place
from .protocol import QUIET_S, EngineBackend, Placement
from .schedule import victim

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


#: When set, every local engine start, in any process that inherits it, appends one JSON
#: line to the file it names: ``{"engine", "seconds", "mode", "ok", "pid"}`` (``seconds``:
#: launch to ready, ``mode``: vLLM's layout, ``pid``: the process whose pool started it). A
#: CI job reads it to count the engine starts of every run it made (the project's own test
#: suite prints the count at its end).
STARTS_LOG_ENV = "PYTEST_SPECDECODE_STARTS_LOG"


def record_start(engine: str, seconds: float, mode: str | None, ok: bool) -> None:
    """One line in the :data:`STARTS_LOG_ENV` file, when that is set (never an error)."""
    path = os.environ.get(STARTS_LOG_ENV)
    if not path:
        return
    line = {"engine": engine, "seconds": round(seconds, 3), "mode": mode, "ok": ok,
            "pid": os.getpid()}  # fmt: skip
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
    except OSError:
        pass


def log_start(engine: Engine, ok: bool) -> None:
    """:func:`record_start` of a local engine whose process was launched."""
    if engine.pid is not None:
        record_start(
            engine.config.describe(), engine.start_seconds, engine.info.get("engine_mode"), ok
        )


def start_together(device: Device, placements: Sequence[Placement]) -> str | None:
    """Why these engines must start one after the other (None: they may start together).

    On a CPU a start is mostly one busy process importing torch and vLLM: together when the
    machine has a core per engine. On a GPU vLLM sizes the KV cache by profiling free memory,
    assuming nobody else allocates meanwhile: together only when every engine has an explicit
    KV cache budget (``kv_cache_memory_bytes``), which skips that profiling."""
    if len(placements) < 2:
        return None
    if device.kind == "gpu":
        if all("kv_cache_memory_bytes" in p.engine_kwargs for p in placements):
            return None
        return (
            "GPU engines without kv_cache_memory_bytes in engine_kwargs start one after the "
            "other (vLLM's start-up memory profiling assumes no other process allocates)"
        )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if (cores or 1) < len(placements):
        return f"{cores} CPU core(s) for {len(placements)} engines: started one after the other"
    return None


class EnginePool:
    """Engines cached by configuration, at most ``max_engines`` resident.

    When a new engine needs room, the pool shuts down the resident one needed farthest ahead in
    the :meth:`plan` (one never needed again first; without a plan: the least recently used).
    Engines a call needs together (``acquire``'s ``keep``) that are not running start at the
    same time where :func:`start_together` allows. Engine logs go to ``log_dir`` (by default a
    temporary folder, removed at :meth:`close` unless it holds the log of an engine that
    failed: only those are kept). From the first start until :meth:`close`, SIGTERM is
    handled as Ctrl-C (:mod:`.interrupts`).
    """

    def __init__(
        self,
        max_engines: int = 2,
        *,
        timeout: float = 900.0,
        progress: Progress = _quiet,
        device: Device | None = None,
        log_dir: str | None = None,
        engine_factory: Callable[..., Engine] = Engine,
        mode: str = DEFAULT_MODE,
    ) -> None:
        """``engine_factory`` makes each engine (``Engine``'s signature; tests give a stand-in
        that starts no process); ``mode`` is the engine mode asked for
        (:func:`~.placement.place`)."""
        if mode not in ENGINE_MODES:
            raise ValueError(f"mode must be one of {', '.join(ENGINE_MODES)}; got {mode!r}")
        self.max_engines = max_engines
        self.mode = mode
        self.quiet_seconds = QUIET_S
        self.timeout = timeout
        self.progress = progress
        self._device = device
        self._own_log_dir = log_dir is None
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="specdecode-logs-")
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._spawned: list[Engine] = []  # every engine started, ready or not
        self._stopping: list[Engine] = []  # evicted, shutting down (reaped at close)
        self._upcoming: list[frozenset[str]] = []  # needs of the work ahead, running test first
        self._gone: dict[str, str] = {}  # key -> why its engine is no longer running
        self._engine_factory = engine_factory
        self._sigterm = False  # SIGTERM handled as Ctrl-C on this pool's behalf
        #: engines started (restarts included), engines started again, wall seconds waited
        self.starts = 0
        self.restarts = 0
        self.start_seconds = 0.0
        self.stop_seconds = 0.0  # shutting engines down (evictions, close)
        #: why engines started one after the other (once per reason)
        self.sequential_reasons: list[str] = []

    @property
    def device(self) -> Device:
        if self._device is None:
            self._device = detect_device()
        return self._device

    def plan(self, upcoming: Sequence[Collection[str]]) -> None:
        """The engine keys each test ahead needs, the running test first (see
        :mod:`.schedule`): eviction keeps what is needed soonest."""
        self._upcoming = [frozenset(need) for need in upcoming]

    def is_running(self, config: EngineConfig) -> bool:
        engine = self._engines.get(config.key)
        return engine is not None and engine.alive

    def memory_gib(self, engine: EngineBackend) -> float | None:
        """The engine worker's process group: GPU memory on a GPU (NVML), else its RSS."""
        if not engine.pid:
            return None
        from .memory import engine_memory_gib

        return engine_memory_gib(engine.pid, self.device.kind)

    def acquire(
        self,
        config: EngineConfig,
        *,
        keep: Sequence[EngineConfig] = (),
        timeout: float | None = None,
    ) -> Engine:
        """The engine for ``config``, started if needed. Engines in ``keep`` (needed with it)
        are not evicted; those of them not running start together with it where they can.

        A start may take the pool's ``timeout``; ``timeout`` (a test's own) bounds each call.
        """
        __tracebackhide__ = True
        wanted = {c.key for c in (config, *keep)}
        for resident in list(self._engines.values()):  # a dead one is never kept or evicted
            self._drop_if_dead(resident.config, resident.config.key in wanted)
        engine = self._engines.get(config.key)
        if engine is None:
            self._start(config, keep)
            engine = self._engines[config.key]
        self._engines.move_to_end(config.key)
        engine.timeout = timeout or self.timeout
        return engine

    def _drop_if_dead(self, config: EngineConfig, wanted: bool) -> None:
        engine = self._engines.get(config.key)
        if engine is not None and not engine.alive:
            fresh = "; starting a fresh one" if wanted else ""
            self.progress(f"{config.describe()} is no longer running{fresh}")
            self._engines.pop(config.key)
            self._gone[config.key] = "its engine had died"
            engine.failed = True
            engine.kill()

    def _start(self, config: EngineConfig, keep: Sequence[EngineConfig]) -> None:
        """Start ``config`` (and what of ``keep`` is missing and fits) after making room."""
        __tracebackhide__ = True
        keep_keys = {c.key for c in keep} | {config.key}
        batch = [config]
        for other in keep:
            if other.key not in self._engines and other.key not in {c.key for c in batch}:
                batch.append(other)
        room = self.max_engines - sum(1 for k in self._engines if k in keep_keys)
        batch = batch[: max(1, room)]
        while len(self._engines) + len(batch) > self.max_engines:
            out = victim(list(self._engines), keep_keys, self._upcoming[1:])
            if out is None:
                break
            old = self._engines.pop(out)
            needed_by = ", ".join(c.describe() for c in batch)
            self._gone[out] = f"it was shut down to make room for {needed_by}"
            self.progress(f"shutting down {old.config.describe()} (pool holds {self.max_engines})")
            stopping = time.perf_counter()
            if self.device.kind == "gpu":
                old.close()  # its memory must be free before the next engine sizes its own
            else:  # it shuts down while the next one starts; reaped at close()
                old.begin_close()
                self._stopping.append(old)
            self.stop_seconds += time.perf_counter() - stopping
        placements = [place(c, self.device, self.max_engines, mode=self.mode) for c in batch]
        why = start_together(self.device, placements)
        if why is not None and why not in self.sequential_reasons:
            self.sequential_reasons.append(why)
        groups = [list(zip(batch, placements, strict=True))]
        if why is not None:
            groups = [[pair] for pair in groups[0]]
        for group in groups:
            self._start_group(group)

    def _start_group(self, group: list[tuple[EngineConfig, Placement]]) -> None:
        """Start these engines at the same time and wait until all are ready."""
        __tracebackhide__ = True
        if not self._sigterm:
            sigterm_as_interrupt()
            self._sigterm = True
        began = time.perf_counter()
        engines: list[tuple[EngineConfig, Engine]] = []
        for config, placement in group:
            again = self._gone.pop(config.key, None)
            if again is not None:
                self.restarts += 1
                self.progress(f"restarting {config.describe()}: {again}")
            together = " (together with the others)" if len(group) > 1 else ""
            self.progress(f"starting {config.describe()} [{placement.memory}]{together} ...")
            engines.append((config, self._engine_factory(
                config, placement, timeout=self.timeout, log_dir=self.log_dir,
                on_start=self._spawned.append, wait=False,
            )))  # fmt: skip
            self.starts += 1
        failures: list[EngineError] = []
        try:
            for config, engine in engines:
                try:
                    engine.wait_ready()
                except EngineError as exc:  # the others may still start: wait for them
                    failures.append(exc)
                    log_start(engine, ok=False)
                    continue
                log_start(engine, ok=True)
                self._engines[config.key] = engine
                self.progress(f"{config.describe()} ready in {engine.start_seconds:.1f} s")
        except BaseException:  # an interrupt: no engine of this start outlives it
            for config, engine in engines:
                if self._engines.get(config.key) is not engine:
                    engine.kill()
            raise
        finally:
            self.start_seconds += time.perf_counter() - began
        if failures:
            raise self._start_failure(failures)

    def _start_failure(self, failures: list[EngineError]) -> EngineError:
        """One error for the engines of a start that failed (each with its log's end), with
        the memory advice once when any ran out of memory."""
        message = "\n\n".join(str(f) for f in failures)
        if any(isinstance(f, EngineStartError) and out_of_memory(str(f)) for f in failures):
            return EngineStartError(f"{message}\n{memory_advice(self.device, self.max_engines)}")
        return type(failures[0])(message) if len(failures) > 1 else failures[0]

    def close(self) -> None:
        """Shut every engine down; none survives this call, even one interrupted mid-start.

        Then remove the logs of engines that did not fail (and the pool's own log folder when
        nothing is left in it).
        """
        stopping = time.perf_counter()
        try:
            self._close()
        finally:
            self.stop_seconds += time.perf_counter() - stopping
            if self._sigterm:
                self._sigterm = False
                sigterm_restored()

    def _close(self) -> None:
        interrupted: BaseException | None = None
        closing = [*self._stopping, *self._engines.values()]
        self._stopping, self._engines = [], OrderedDict()
        for engine in closing:  # every one shuts down at the same time
            engine.begin_close()
        while closing:
            engine = closing.pop(0)
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
