"""The engine worker: a process of its own that holds one ``vllm.LLM`` and answers commands
(forked from a fork server that imported torch and vLLM, or spawned: :mod:`.launch`).

One process per engine isolates vLLM's process-global metrics, makes freeing accelerator memory
certain (the process exits) and keeps an engine crash from taking the test session down. The
worker leads its own process group, so the parent can kill it together with vLLM's children.

Protocol over a ``multiprocessing`` pipe: the worker first sends ``("ready", info)`` or
``("error", text)``; then for each ``(command, kwargs)`` it answers ``("ok", value)``,
``("error", text)`` or, when vLLM's engine core has died, ``("dead", cause)`` and exits.
In the in-process engine mode (see :mod:`.placement`) the engine core runs in this process:
its death is the worker's, and an error the core raised with requests in flight leaves it in
a state no later call can trust, so the worker answers ``("dead", cause)`` then too.
Everything sent is plain data (no pickled vLLM objects; ``info`` is plain JSON types). When the
connection ends or the parent disappears, the worker shuts vLLM down and kills its own process
group.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, NoReturn

from .footprint import proposer_footprint
from .launch import apply_environment
from .phases import PHASES_ENV, with_phase_timing

#: Longest wait for vLLM to shut down before the worker kills its process group.
SHUTDOWN_SECONDS = 10.0
#: How long a call may go on after an engine-core process has exited before the worker answers
#: ``("dead", cause)`` itself: vLLM's own ``EngineDeadError`` normally comes within a second, but
#: a call it never wakes would otherwise wait for the caller's timeout.
DEAD_CORE_GRACE = 10.0
#: vLLM's processes under this worker, as seen once it was ready.
_VLLM_PIDS: set[int] = set()


def _watch_parent() -> None:
    """Kill this process group when the caller (pytest) disappears without saying goodbye:
    its end of the launch pipe closes. (A forked worker's parent process is the fork server,
    not the caller; without a launch pipe, the parent process is watched.)"""
    caller = multiprocessing.parent_process()
    if caller is not None and caller.sentinel is not None:
        multiprocessing.connection.wait([caller.sentinel])
        _kill_group_and_exit(0)
    parent_pid = os.getppid()
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            _kill_group_and_exit(0)


def _redirect_output(log_path: str) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _build_sampling(sampling: dict[str, Any], n: int) -> list[Any]:
    """One ``SamplingParams`` per prompt; ``structured_outputs`` may be one dict or one per
    prompt."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    sampling = dict(sampling)
    structured = sampling.pop("structured_outputs", None)
    per_prompt = structured if isinstance(structured, list) else [structured] * n
    params = []
    for spec in per_prompt:
        kwargs: dict[str, Any] = dict(sampling)
        if spec is not None:
            kwargs["structured_outputs"] = StructuredOutputsParams(**spec)
        params.append(SamplingParams(**kwargs))
    return params


def _delta_sampling(sampling: dict[str, Any], n: int) -> list[Any]:
    """:func:`_build_sampling`'s parameters, each asking for only the new tokens at every
    engine step (``RequestOutputKind.DELTA``), so that each chunk can be timed."""
    from vllm.sampling_params import RequestOutputKind

    params = _build_sampling(sampling, n)
    for p in params:
        p.output_kind = RequestOutputKind.DELTA
    return params


def _request_figures(output: Any) -> dict[str, Any]:
    completion = output.outputs[0]
    token_ids = list(completion.token_ids)
    figures: dict[str, Any] = {
        "token_ids": token_ids,
        "text": completion.text,
        "ttft": None,
        "tpot": None,
    }
    stats = getattr(output, "metrics", None)
    if stats is not None:
        first = getattr(stats, "first_token_latency", None)
        figures["ttft"] = float(first) if first else None
        first_ts = getattr(stats, "first_token_ts", 0.0)
        last_ts = getattr(stats, "last_token_ts", 0.0)
        n = getattr(stats, "num_generation_tokens", len(token_ids))
        if n > 1 and last_ts > first_ts > 0:
            figures["tpot"] = (last_ts - first_ts) / (n - 1)
    spec = getattr(completion, "spec_decode_metrics", None)  # vLLM 0.29+, when turned on
    if spec is not None:
        from .protocol import request_spec_fields

        figures.update(request_spec_fields(spec.to_dict()))
    return figures


def with_request_metrics(engine_kwargs: dict[str, Any], supported: bool) -> dict[str, Any]:
    """``engine_kwargs`` with vLLM's per-request speculative-decoding metrics: ``detailed``
    on a speculative engine unless the caller chose a level (where the installed vLLM has the
    argument); never on an engine that does not speculate, which vLLM refuses."""
    from .protocol import REQUEST_METRICS_ARG

    kwargs = dict(engine_kwargs)
    if kwargs.get("speculative_config") is None:
        kwargs.pop(REQUEST_METRICS_ARG, None)
    elif supported:
        kwargs.setdefault(REQUEST_METRICS_ARG, "detailed")
    return kwargs


def _has_request_metrics() -> bool:
    """Whether the installed vLLM's engine arguments include per-request metrics."""
    import dataclasses

    from .protocol import REQUEST_METRICS_ARG

    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:  # a vLLM without it (or a stand-in): no per-request metrics
        return False
    return REQUEST_METRICS_ARG in {f.name for f in dataclasses.fields(EngineArgs)}


def run_mode(llm: Any) -> str:
    """Where a ``vllm.LLM``'s engine core runs: ``"in-process"`` (in this process) or
    ``"multiprocess"`` (a process of its own); ``"unknown"`` for a vLLM without the V1 engine
    client (or a stand-in)."""
    client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if client is None:
        return "unknown"
    return "in-process" if type(client).__name__ == "InprocClient" else "multiprocess"


class _Engine:
    def __init__(self, llm: Any, phases: bool = False) -> None:
        self.llm = llm
        self.mode = run_mode(llm)
        #: whether vLLM's workers time each round's steps by phase (:mod:`.phases`)
        self.phases = phases
        #: why its rounds have no phase profile (the workers' reply), once known
        self.phases_note = "" if phases else f"phase timing switched off ({PHASES_ENV}=0)"
        #: the load loop's clock and sleep (a test gives simulated ones)
        self.clock: Callable[[], float] = time.perf_counter
        self.sleep: Callable[[float], None] = time.sleep
        self.loads = 0  # load rounds run (names their requests)

    def broken(self) -> bool:
        """Whether a failed call left this in-process engine core unusable: requests still in
        flight (a core of its own would have died and taken them with it)."""
        if self.mode != "in-process":
            return False
        try:
            return bool(self.llm.llm_engine.has_unfinished_requests())
        except Exception:
            return True

    def generate(
        self, prompts: Sequence[Any], sampling: dict[str, Any], concurrency: int | None
    ) -> dict[str, Any]:
        params = _build_sampling(sampling, len(prompts))
        batch = concurrency or len(prompts)
        outputs: list[Any] = []
        timed = self._phases_start()
        start = time.perf_counter()
        try:
            for i in range(0, len(prompts), batch):
                chunk = list(prompts[i : i + batch])
                outputs.extend(self.llm.generate(chunk, params[i : i + batch], use_tqdm=False))
        except BaseException:
            if timed:  # stop recording: later calls (load rounds) are not timed
                self._phases_drop()
            raise
        elapsed = time.perf_counter() - start
        return {
            "elapsed": elapsed,
            "requests": [_request_figures(o) for o in outputs],
            "profile": self._phases_collect() if timed else None,
            "profile_note": "" if timed else self.phases_note,
        }

    def _phases_start(self) -> bool:
        """Start timing a round's steps in vLLM's workers; False (and phase timing off for
        this engine, the reason in its log) when they cannot be timed."""
        if not self.phases:
            return False
        try:
            reply = self.llm.collective_rpc("specdecode_phases_start")[0]
        except Exception as exc:  # noqa: BLE001 - a round without a profile, never a failure
            if is_engine_dead(exc):
                raise
            reply = {"ok": False, "note": f"{type(exc).__name__}: {exc}"}
        if not reply.get("ok"):
            self.phases_note = str(reply.get("note") or "phase profile unavailable")
            print(f"specdecode worker: {self.phases_note}", flush=True)
            self.phases = False
        return self.phases

    def _phases_drop(self) -> None:
        """End a round that failed, its profile unread (whatever else fails meanwhile)."""
        try:
            self.llm.collective_rpc("specdecode_phases_collect")
        except BaseException:  # noqa: BLE001 - the round's own error is the one to report
            pass

    def _phases_collect(self) -> dict[str, Any] | None:
        """The round's step profile (a plain dict) from the first of vLLM's workers."""
        try:
            profile: dict[str, Any] | None = self.llm.collective_rpc("specdecode_phases_collect")[0]
        except Exception as exc:  # noqa: BLE001 - a round without a profile, never a failure
            if is_engine_dead(exc):
                raise
            print(f"specdecode worker: no phase profile for this round: {exc!r}", flush=True)
            return None
        return profile

    def _render(self, prompts: Sequence[Any]) -> list[Any]:
        """The prompts as engine inputs, rendered (tokenized) before a load round's clock
        starts, as ``LLM.generate`` renders them (vLLM 0.32's private ``_preprocess_cmpl``).
        Where it is missing the prompts go to ``add_request`` as they are, which renders each
        one as it is added: inside the timed loop, as a server does."""
        render = getattr(self.llm, "_preprocess_cmpl", None)
        return list(prompts) if render is None else list(render(list(prompts)))

    def load(
        self, prompts: Sequence[Any], sampling: dict[str, Any], arrivals: Sequence[float]
    ) -> dict[str, Any]:
        """An open-loop round: each prompt added to the engine as a request of its own once
        its arrival (seconds after the round's start, ascending) has passed, the engine
        stepped while any is in flight, and every step's new tokens stamped. TTFT and e2e run
        from the scheduled arrival: a request due during a step waits for it to end, as on a
        server. On an error the requests still in flight are aborted (none is left over)."""
        from .protocol import Timeline, check_arrivals

        n = len(prompts)
        check_arrivals(arrivals, n)
        inputs = self._render(prompts)
        params = _delta_sampling(sampling, n)
        self.loads += 1
        ids = [f"specdecode-load-{self.loads}-{i}" for i in range(n)]
        timelines = {rid: Timeline(float(t)) for rid, t in zip(ids, arrivals, strict=True)}
        engine = self.llm.llm_engine
        in_flight: set[str] = set()
        due = 0  # the next request to send
        start = self.clock()
        try:
            while due < n or in_flight:
                now = self.clock() - start
                while due < n and arrivals[due] <= now:
                    timelines[ids[due]].sent = now
                    engine.add_request(ids[due], inputs[due], params[due])
                    in_flight.add(ids[due])
                    due += 1
                    now = self.clock() - start
                if not in_flight:
                    self.sleep(max(0.0, arrivals[due] - now))
                    continue
                if not engine.has_unfinished_requests():
                    raise RuntimeError(
                        f"vLLM has no unfinished request but never finished {sorted(in_flight)}"
                    )
                outputs = engine.step()
                now = self.clock() - start
                for output in outputs:
                    timeline = timelines.get(output.request_id)
                    if timeline is None:
                        continue
                    timeline.chunk(now, sum(len(c.token_ids) for c in output.outputs))
                    if output.finished:
                        timeline.ended = now
                        in_flight.discard(output.request_id)
        except BaseException:
            if in_flight:
                try:
                    engine.abort_request(sorted(in_flight))
                except Exception:  # noqa: BLE001 - the original error is the one to report
                    traceback.print_exc()
            raise
        requests = [timelines[rid] for rid in ids]
        return {
            "elapsed": max((q.end for q in requests), default=0.0),
            "requests": [q.timed().to_dict() for q in requests],
        }

    def sample(self, prompts: Sequence[Any], sampling: dict[str, Any]) -> list[list[list[int]]]:
        """Every completion's token ids, per prompt (``sampling`` usually has ``n`` > 1; more
        than vLLM's ``VLLM_MAX_N_SEQUENCES`` are asked for in several requests)."""
        import vllm.envs

        from .protocol import MAX_N_SEQUENCES, split_n

        limit = int(getattr(vllm.envs, "VLLM_MAX_N_SEQUENCES", MAX_N_SEQUENCES))
        found: list[list[list[int]]] = [[] for _ in prompts]
        for part in split_n(sampling, limit):
            params = _build_sampling(part, len(prompts))
            outputs = self.llm.generate(list(prompts), params, use_tqdm=False)
            for i, o in enumerate(outputs):
                found[i].extend(list(c.token_ids) for c in o.outputs)
        return found

    def spec_counters(self) -> dict[str, Any]:
        """The speculative-decoding and prefix-cache counters, summed over ``engine`` labels
        (data parallel)."""
        from .protocol import PREFIX_CACHE_COUNTERS, SPEC_COUNTERS, SPEC_PER_POSITION

        scalars = SPEC_COUNTERS | PREFIX_CACHE_COUNTERS
        totals = dict.fromkeys(scalars.values(), 0)
        per_pos: list[int] = []
        for metric in self.llm.get_metrics():
            if metric.name in scalars:
                totals[scalars[metric.name]] += int(metric.value)
            elif metric.name == SPEC_PER_POSITION:
                values = list(metric.values)
                if len(per_pos) < len(values):
                    per_pos.extend([0] * (len(values) - len(per_pos)))
                for i, v in enumerate(values):
                    per_pos[i] += int(v)
        return {**totals, "accepted_per_position": per_pos}

    def _core_processes(self) -> list[Any]:
        """vLLM's engine-core processes (none in-process)."""
        if self.mode == "in-process":
            return []
        try:
            manager = self.llm.llm_engine.engine_core.resources.engine_manager
        except AttributeError:
            return []
        return list(getattr(manager, "processes", None) or [])

    def core_exit(self) -> str | None:
        """The engine-core processes that have exited, with their exit causes; None while all
        run (and in-process). Safe to call from another thread."""
        died = [
            f"process {proc.name} (pid {proc.pid}) {exit_cause(proc.exitcode)}"
            for proc in self._core_processes()
            if proc.exitcode is not None
        ]
        return "; ".join(died) or None

    def dead_cause(self, exc: BaseException) -> str:
        """What died under a ``vllm.LLM`` that raised ``EngineDeadError``: each engine-core
        process that exited, with its exit cause (in-process: what the core raised)."""
        if self.mode == "in-process":
            return (
                f"the engine core (in the worker process, pid {os.getpid()}) raised "
                f"{type(exc).__name__}: {exc}"
            )
        procs = self._core_processes()
        died = []
        deadline = time.monotonic() + 5.0
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))  # reaps it once it is dead
            if proc.exitcode is not None:
                died.append(f"process {proc.name} (pid {proc.pid}) {exit_cause(proc.exitcode)}")
        what = "; ".join(died) if died else "no engine-core process had exited"
        return f"{what} (vLLM raised {type(exc).__name__})"

    def shutdown(self) -> None:
        shutdown = getattr(self.llm, "shutdown", None)
        if shutdown is None:
            engine_core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
            shutdown = getattr(engine_core, "shutdown", None)
        if shutdown is not None:
            shutdown()


def plain(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` as plain JSON types (a ``str`` subclass such as torch's ``TorchVersion`` becomes
    a ``str``): what leaves the worker may travel on to pytest-xdist's controller."""
    result: dict[str, Any] = json.loads(json.dumps(info, default=str))
    return result


def exit_cause(exitcode: int | None) -> str:
    """A process's exit code in words: ``exit code 1``, ``killed by SIGKILL`` ..."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def is_engine_dead(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is vLLM's ``EngineDeadError``: the engine
    core process is gone and this ``vllm.LLM`` can never answer again."""
    dead: tuple[type[BaseException], ...] = ()
    if "vllm" in sys.modules:  # never import vLLM just to ask
        try:
            from vllm.v1.engine.exceptions import EngineDeadError

            dead = (EngineDeadError,)
        except ImportError:
            pass
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, dead) or type(current).__name__ == "EngineDeadError":
            return True
        current = current.__cause__ or current.__context__
    return False


def _kill_group_and_exit(code: int) -> NoReturn:
    """Kill every other process of this worker's group (vLLM's engine core and its workers,
    whatever state they are in), then exit."""
    sys.stdout.flush()
    sys.stderr.flush()
    from .leftovers import remove_openmp_files, wait_gone
    from .memory import group_pids

    me = os.getpid()
    killed = []
    if os.getpgid(0) == me:  # never signal the parent's group
        for pid in group_pids(me):
            if pid != me:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except OSError:
                    pass
    wait_gone(killed)
    # os._exit skips OpenMP's own removal; vLLM's shutdown may have killed its processes
    remove_openmp_files({*killed, *_VLLM_PIDS, me}, exiting=True)
    os._exit(code)


def _shutdown(engine: Any, timeout: float = SHUTDOWN_SECONDS) -> None:
    """Shut vLLM down, waiting at most ``timeout`` seconds (a dead or stuck engine core may
    never answer)."""

    def shut() -> None:
        try:
            engine.shutdown()
        except BaseException:
            traceback.print_exc()

    thread = threading.Thread(target=shut, daemon=True, name="specdecode-shutdown")
    thread.start()
    thread.join(timeout)


def _send(conn: Connection, message: tuple[str, Any]) -> bool:
    """Send to the parent; False when it is gone."""
    try:
        conn.send(message)
    except (OSError, ValueError):
        return False
    return True


def _broken(engine: Any) -> bool:
    broken = getattr(engine, "broken", None)
    return bool(broken()) if broken is not None else False


class _CoreWatch:
    """Sends the parent one message at a time, and answers ``("dead", cause)`` for a call that
    vLLM never wakes after its engine core died (then kills the engine and exits)."""

    def __init__(self, conn: Connection, engine: Any) -> None:
        self.conn, self.engine = conn, engine
        self.lock = threading.Lock()
        self.busy_since: float | None = None  # when the call in progress began

    def send(self, message: tuple[str, Any]) -> bool:
        with self.lock:
            return _send(self.conn, message)

    def dead(self, cause: str) -> None:
        """Say in the log that the engine core died, and answer ``("dead", cause)`` (the one
        place either is done)."""
        print(f"specdecode worker: vLLM's engine core died: {cause}", flush=True)
        self.send(("dead", cause))

    def start(self) -> None:
        if getattr(self.engine, "core_exit", None) is not None:
            threading.Thread(target=self._watch, daemon=True, name="specdecode-core-watch").start()

    def _watch(self) -> None:
        died_at: float | None = None
        while True:
            time.sleep(0.5)
            cause = self.engine.core_exit()
            if cause is None:
                continue
            now = time.monotonic()
            died_at = died_at or now
            busy = self.busy_since
            if busy is not None and now - max(died_at, busy) >= DEAD_CORE_GRACE:
                self.dead(f"{cause} (vLLM did not raise within {DEAD_CORE_GRACE:g} s)")
                _kill_group_and_exit(0)
                return  # (only a stand-in for the exit returns)


def serve(conn: Connection, engine: Any, info: dict[str, Any]) -> NoReturn:
    """Say ``ready`` with ``info``, then answer commands until told to shut down.

    Never returns: on ``shutdown``, on the end of the connection (the parent went away or gave
    up on this worker) and on a dead vLLM engine core (answered ``("dead", cause)``) it shuts
    vLLM down, kills the rest of its process group and exits.
    """
    from .memory import group_pids

    _VLLM_PIDS.update(group_pids(os.getpid()))
    watch = _CoreWatch(conn, engine)
    if not watch.send(("ready", plain(info))):
        _shutdown(engine)
        _kill_group_and_exit(0)
    watch.start()
    while True:
        try:
            command, kwargs = conn.recv()
        except (EOFError, OSError):
            _shutdown(engine)
            _kill_group_and_exit(0)
        if command == "shutdown":
            _shutdown(engine)
            watch.send(("ok", None))
            _kill_group_and_exit(0)
        watch.busy_since = time.monotonic()
        try:
            reply: tuple[str, Any] = ("ok", getattr(engine, command)(**kwargs))
        except BaseException as exc:
            watch.busy_since = None
            if is_engine_dead(exc) or _broken(engine):
                watch.dead(engine.dead_cause(exc))
                _shutdown(engine)
                _kill_group_and_exit(0)
            reply = ("error", traceback.format_exc())
        watch.busy_since = None
        if not watch.send(reply):
            _shutdown(engine)
            _kill_group_and_exit(0)


def _torch_threads(torch: Any) -> int | None:
    """Torch's intra-op threads in this process (the model's, in the in-process mode)."""
    threads = getattr(torch, "get_num_threads", None)
    return int(threads()) if threads is not None else None


def main(
    conn: Connection,
    target: str,
    engine_kwargs: dict[str, Any],
    log_path: str,
    environ: dict[str, str] | None = None,
) -> None:
    """Entry point of the worker (:func:`~.launch.launch`: forked from a fork server or
    spawned), given the caller's environment at its launch."""
    apply_environment(environ)
    os.setpgid(0, 0)
    threading.Thread(target=_watch_parent, daemon=True).start()
    _redirect_output(log_path)
    try:  # what vLLM leaves in shared memory is this engine's, never the caller's
        from .leftovers import own_resource_tracker

        own_resource_tracker()
    except Exception:  # the inherited tracker still cleans up, at the caller's exit
        traceback.print_exc()
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    try:
        start = time.perf_counter()
        import torch
        import vllm

        kwargs, phases = with_phase_timing(
            with_request_metrics(engine_kwargs, _has_request_metrics()), os.environ
        )
        llm = vllm.LLM(target, **kwargs)
        engine = _Engine(llm, phases)
        kv_tokens: int | None = None
        try:
            cache: Any = llm.llm_engine.vllm_config.cache_config
            kv_tokens = int(cache.num_gpu_blocks) * int(cache.block_size)
        except (AttributeError, TypeError, ValueError):
            pass
        draft_memory: dict[str, Any] | None = None
        try:
            draft_memory = proposer_footprint(llm.llm_engine.vllm_config)
        except Exception:  # noqa: BLE001 - an unknown figure, never a failed start
            pass
        info = {
            "pid": os.getpid(),
            "start_seconds": time.perf_counter() - start,
            "vllm_version": str(getattr(vllm, "__version__", "unknown")),
            "torch_version": str(torch.__version__),
            "kv_cache_tokens": kv_tokens,
            "draft_memory": draft_memory,
            "engine_mode": engine.mode,
            "torch_threads": _torch_threads(torch),
        }
    except BaseException:
        _send(conn, ("error", traceback.format_exc()))
        _kill_group_and_exit(3)
    serve(conn, engine, info)
