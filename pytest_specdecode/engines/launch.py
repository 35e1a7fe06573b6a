"""How engine worker processes are launched: spawned (the default), or, on request, forked
from a fork server that imported torch and vLLM once, so that a start after a process's first
skips their imports (``benchmarks/startup.py launch``: an in-process start of the tiny target
3.8 s instead of 11.1 s). The fork server's own import delays a process's first engines; it
is opt-in (docs/validation.md "Engine start-up"), and this project's real-engine tests, which
run in-process engines, use ``auto``.

One server per launch environment (the caller's environment with the engine's own variables:
``LD_PRELOAD`` and whatever torch and vLLM read when imported; and ``sys.path``), so that a
worker sees what a spawned one would; at most :data:`MAX_SERVERS` are kept, the least recently
used let go. Each worker is then given the caller's exact environment
(:func:`apply_environment`). The server is Python's own (``multiprocessing.forkserver``): a
fresh interpreter that imports the modules and forks nothing but workers, never the caller
(pytest), which may hold threads. ``PYTEST_SPECDECODE_START_METHOD`` chooses: ``spawn`` (the
default), ``forkserver`` for every engine, or ``auto`` (``forkserver`` for in-process engines,
whose worker runs the model, ``spawn`` for multiprocess ones, where vLLM spawns its own
processes anyway); a platform without fork servers spawns, and a server that cannot start a
worker falls back to ``spawn`` with a warning naming why.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver as mp_forkserver
import os
import sys
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from typing import Any

from ..errors import SpecDecodeWarning
from .placement import MULTIPROCESSING_ENV

#: ``spawn`` (the default), ``forkserver`` or ``auto`` (:func:`start_method`): how engine
#: workers are started.
START_METHOD_ENV = "PYTEST_SPECDECODE_START_METHOD"
START_METHODS = ("spawn", "forkserver", "auto")

#: What a server imports before it forks workers: its own set-up (output to ``/dev/null``),
#: then what the worker imports to build its engine.
PRELOAD = (
    "pytest_specdecode.engines.fork_server",
    "torch",
    "vllm",
    "vllm.entrypoints.llm",
    "pytest_specdecode.engines.worker",
)

#: Servers kept at once (each holds torch and vLLM imported: a few hundred MB).
MAX_SERVERS = 2

#: Variables that change from test to test, or that a caller's first engine sets, and that
#: are read by nobody at import time: a worker gets their current values from
#: :func:`apply_environment`; they do not pick the server. (torch sets
#: ``TORCHINDUCTOR_CACHE_DIR`` in the environment the first time it asks for inductor's cache
#: folder, and reads it at each use: keyed on, it made every caller start a second server.)
VOLATILE = frozenset({"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR"})

#: Intel OpenMP's own variable for binding threads to CPUs, and the two standard ones.
_AFFINITY_VARIABLES = ("KMP_AFFINITY", "OMP_PROC_BIND", "OMP_PLACES")


def forked_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a fork server and its workers: ``environ``, with ``KMP_AFFINITY``
    ``none`` where Intel OpenMP is preloaded and nothing says how to bind its threads. Intel
    OpenMP's default is ``none``, and a spawned worker keeps its threads unbound; but a worker
    forked from a server that imported torch came out with each OpenMP thread bound to one CPU
    (its main thread to CPU 0, the next to CPU 1), and on a busy machine its rounds ran up to
    three times slower (docs/validation.md "Engine start-up"). Said explicitly, it holds."""
    env = dict(environ)
    if "libiomp" in env.get("LD_PRELOAD", "") and not any(
        env.get(name) for name in _AFFINITY_VARIABLES
    ):
        env["KMP_AFFINITY"] = "none"
    return env


_lock = threading.Lock()
_servers: OrderedDict[tuple[frozenset[tuple[str, str]], tuple[str, ...]], Any] = OrderedDict()
_broken: list[str] = []  # why the fork servers were given up on in this process


def start_method(environ: Mapping[str, str] | None = None) -> str:
    """How an engine worker launched in this environment starts (:data:`START_METHOD_ENV`,
    default ``spawn``; ``auto``: ``forkserver`` where the worker runs the model itself, vLLM's
    ``VLLM_ENABLE_V1_MULTIPROCESSING`` being ``0``, else ``spawn``); ``spawn`` where the
    platform has no fork server or one failed in this process."""
    env = os.environ if environ is None else environ
    method = env.get(START_METHOD_ENV, "spawn").strip().lower() or "spawn"
    if method not in START_METHODS:
        raise ValueError(
            f"{START_METHOD_ENV}={env[START_METHOD_ENV]!r}: must be one of "
            f"{', '.join(START_METHODS)}"
        )
    if method == "auto":
        method = "forkserver" if env.get(MULTIPROCESSING_ENV, "1").strip() == "0" else "spawn"
    if method == "forkserver" and (
        _broken or "forkserver" not in multiprocessing.get_all_start_methods()
    ):
        return "spawn"
    return method


def _key(environ: Mapping[str, str]) -> tuple[frozenset[tuple[str, str]], tuple[str, ...]]:
    """What a server's imports depend on: the environment and the module search path (a
    server imports from the caller's ``sys.path`` as it was when the server started)."""
    return frozenset((k, v) for k, v in environ.items() if k not in VOLATILE), tuple(sys.path)


def _server_for(environ: Mapping[str, str]) -> Any:
    """The fork server of this environment, created (not yet started) when there is none."""
    key = _key(environ)
    server = _servers.get(key)
    if server is None:
        server = mp_forkserver.ForkServer()
        server.set_forkserver_preload(list(PRELOAD))
        _servers[key] = server
        while len(_servers) > MAX_SERVERS:
            _, old = _servers.popitem(last=False)
            _let_go(old)
    _servers.move_to_end(key)
    return server


def _let_go(server: Any) -> None:
    """Ask a server to exit once the workers it forked have: close this side's end of its
    "alive" pipe (they hold the other copies)."""
    fd = getattr(server, "_forkserver_alive_fd", None)
    pid = getattr(server, "_forkserver_pid", None)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None
        server._forkserver_pid = None
    if pid is not None:  # reaped when it exits (a thread that waits, not this caller)
        threading.Thread(target=_reap, args=(pid,), name="specdecode-reap", daemon=True).start()


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _ensure_running(server: Any, environ: Mapping[str, str]) -> None:
    """Start the server if it is not running, in ``environ`` and importing from the caller's
    ``sys.path`` (given as its ``PYTHONPATH``: Python 3.11's fork server ignores the path it is
    sent); a worker gets the caller's path and environment back when it starts."""
    changed = {k: v for k, v in environ.items() if os.environ.get(k) != v}
    changed["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if isinstance(p, str))
    saved = {k: os.environ.get(k) for k in changed}
    os.environ.update(changed)
    try:
        server.ensure_running()
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


@contextmanager
def _served_by(server: Any) -> Iterator[None]:
    """Python's fork-server ``Popen`` asks the module's server for a child: point it at this
    one while a worker is launched (under :data:`_lock`)."""
    saved = mp_forkserver.connect_to_new_process
    mp_forkserver.connect_to_new_process = server.connect_to_new_process
    try:
        yield
    finally:
        mp_forkserver.connect_to_new_process = saved


def launch(target: Callable[..., Any], args: tuple[Any, ...], name: str) -> BaseProcess:
    """Start ``target(*args, environ)`` in a new worker process and return it; ``environ``
    is the caller's environment now (call it inside the engine's own variables). Forked from
    this environment's server, or spawned (see the module's docstring)."""
    environ = dict(os.environ)
    method = start_method()
    if method == "forkserver":
        forked = forked_environment(environ)
        with _lock:
            server = _server_for(forked)
            process: BaseProcess = multiprocessing.get_context("forkserver").Process(
                target=target, args=(*args, forked), name=name, daemon=False
            )
            try:
                _ensure_running(server, forked)
                with _served_by(server):
                    process.start()
                return process
            except (OSError, EOFError) as exc:
                _broken.append(f"{type(exc).__name__}: {exc}")
                _let_go(server)
                warnings.warn(
                    f"pytest-specdecode could not start an engine worker from its fork server "
                    f"({_broken[-1]}); engine workers of this process are spawned instead, "
                    f"each importing torch and vLLM itself (set {START_METHOD_ENV}=spawn to "
                    f"skip the fork server)",
                    SpecDecodeWarning,
                    stacklevel=3,
                )
    process = multiprocessing.get_context("spawn").Process(
        target=target, args=(*args, environ), name=name, daemon=False
    )
    process.start()
    return process


def apply_environment(environ: Mapping[str, str] | None) -> None:
    """In a worker: take the caller's environment as it was at the launch (a forked worker
    has its server's, which may lack what changes from test to test)."""
    if environ is None:
        return
    for name in [k for k in os.environ if k not in environ]:
        del os.environ[name]
    os.environ.update(environ)
