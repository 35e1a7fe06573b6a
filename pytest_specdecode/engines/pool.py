"""The bounded pool that starts local engines and reuses them across tests."""

from __future__ import annotations

import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Sequence

from ..errors import EngineStartError
from .config import EngineConfig
from .hardware import Device, detect_device
from .local import Engine
from .placement import memory_advice, out_of_memory, place

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
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
