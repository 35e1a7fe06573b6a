"""The parent-side handle on one engine worker process (a local ``vllm.LLM``)."""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from typing import Any

from ..errors import EngineCrashedError, EngineError, EngineStartError, EngineTimeoutError
from .config import EngineConfig
from .engine_log import raised_in
from .interrupts import interrupts_held
from .launch import launch
from .leftovers import remove_openmp_files, wait_gone
from .memory import group_pids, process_titles
from .protocol import Counters, LoadRound, Placement, PlainCalls, Round
from .worker import exit_cause


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


def _logged_errors(path: str) -> str:
    """The error lines of the tracebacks at the end of an engine log, as a message's lines
    (``""``: none): what vLLM's own processes raised, which the worker never sees."""
    errors = raised_in(path)
    if not errors:
        return ""
    plural = "s" if len(errors) > 1 else ""
    return f"\nThe engine log's error{plural}:" + "".join(f"\n  {line}" for line in errors)


def _log_tail(path: str) -> str:
    """The end of an engine log, for an error message (a failed engine's log is kept)."""
    return f"--- last lines of the engine log {path} (kept) ---\n{_tail(path)}"


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
def _main_not_rerun() -> Iterator[None]:
    """Start a spawned worker without re-running the caller's script in it: multiprocessing
    runs the parent's ``__main__`` file again in every spawned child, so a plain script using
    ``Bench`` without an ``if __name__ == "__main__":`` guard would start itself once more in
    every engine worker (which imports only what ``worker.main`` needs)."""
    main = sys.modules.get("__main__")
    saved: dict[str, Any] = {
        k: main.__dict__[k] for k in ("__file__", "__spec__") if main and k in main.__dict__
    }
    if main is not None:
        main.__dict__.pop("__file__", None)
        main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


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
        wait: bool = True,
    ) -> None:
        """Start the worker and (with ``wait``) wait until vLLM is ready; ``on_start(engine)``
        is called as soon as the worker process exists, so an owner can track it. Without
        ``wait`` the caller calls :meth:`wait_ready` (engines started together)."""
        self.config = config
        self.placement = placement
        self.timeout = timeout
        #: the engine failed (start, crash, timeout, dead engine core): its log is worth keeping
        self.failed = False
        self._pending = False  # a command was sent and its answer not read (an interrupt)
        self._closing = False  # asked to shut down (begin_close)
        self._reaped = False  # killed and reaped: its pid may belong to another process now
        self._core_pids: list[int] = []  # vLLM's long-lived processes, known once ready
        fd, self.log_path = tempfile.mkstemp(
            prefix="specdecode-engine-", suffix=".log", dir=log_dir
        )
        os.close(fd)
        self._conn, child_conn = multiprocessing.Pipe()
        from . import worker

        #: the worker (a placeholder that never runs until :func:`launch` has started it)
        self._process: BaseProcess = multiprocessing.get_context("spawn").Process()
        self.pid: int | None = None
        self.info: dict[str, Any] = {}
        self.start_seconds = 0.0
        self._started = time.perf_counter()
        self._ready = False
        try:
            with interrupts_held():
                with _environ(placement.env), _main_not_rerun():
                    self._process = launch(
                        worker.main,
                        (child_conn, config.target, placement.engine_kwargs, self.log_path),
                        "specdecode-engine",
                    )
                _RUNNING.add(self)
                if on_start is not None:
                    on_start(self)
            child_conn.close()
            self.pid = self._process.pid
        except BaseException:
            self.kill()
            raise
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until vLLM in the worker is ready (at once when it is already); an engine
        that fails to start is killed and raises :class:`EngineStartError`."""
        __tracebackhide__ = True
        if self._ready:
            return
        try:
            limit = self.timeout if timeout is None else timeout
            waited = time.perf_counter() - self._started  # started with others: time counts
            status, payload = self._receive("start", max(1.0, limit - waited))
            if status != "ready":
                self.failed = True
                raise EngineStartError(
                    f"{self.config.describe()} failed to start:\n{payload}\n"
                    f"{_log_tail(self.log_path)}"
                )
        except BaseException:
            self.kill()
            raise
        self.info = payload
        self.start_seconds = time.perf_counter() - self._started
        self._ready = True
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
            f"{self.config.describe()} (worker pid {self.pid}) died during {doing}: {cause}."
            f"{_logged_errors(self.log_path)}\n{_log_tail(self.log_path)}"
        )

    def _core_died(self, doing: str, cause: str) -> EngineCrashedError:
        """The error for a worker whose vLLM engine core died: the worker has shut down."""
        self.failed = True
        self._process.join(10)  # it shuts vLLM down (bounded) and exits
        self.kill()
        return EngineCrashedError(
            f"{self.config.describe()} (worker pid {self.pid}): vLLM's engine core died during "
            f"{doing}: {cause}.{_logged_errors(self.log_path)}\nThe pool starts a fresh engine "
            f"on its next use.\n{_log_tail(self.log_path)}"
        )

    def call(self, command: str, **kwargs: Any) -> Any:
        """Run ``command`` in the worker and return its answer."""
        __tracebackhide__ = True
        if not self._process.is_alive():  # a dead engine core alone: the worker reports it
            raise self._crashed(f"{command} (it had died before the call)")
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

    def load_round(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any], arrivals: Sequence[float]
    ) -> LoadRound:
        """Send each prompt at its arrival and time it inside the worker (its ``load``)."""
        __tracebackhide__ = True
        return LoadRound.of(
            self.call(
                "load", prompts=list(prompts), sampling=dict(sampling), arrivals=list(arrivals)
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

    def begin_close(self) -> None:
        """Ask the worker to shut vLLM down, without waiting (:meth:`close` waits)."""
        try:
            if self._process.is_alive() and not self._pending and not self._conn.closed:
                self._conn.send(("shutdown", {}))
                self._pending = True  # its answer is read by close()
                self._closing = True
        except OSError:
            pass

    def close(self, timeout: float = 60.0) -> None:
        """Ask the worker to shut vLLM down and exit; kill its process group if it won't.

        A worker still busy with an interrupted command is killed at once.
        """
        try:
            if self._process.is_alive() and not self._conn.closed:
                if not self._pending:
                    self._conn.send(("shutdown", {}))
                    self._closing = True
                if self._closing:
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
            group = {*group_pids(pid), *self._core_pids}  # those that exited before too
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
            if self._reaped:  # what the killed group left in /dev/shm (its tracker: the rest)
                wait_gone(group)
                remove_openmp_files([pid, *group])
        _RUNNING.discard(self)
        try:
            self._conn.close()
        except OSError:
            pass
