"""Phase timing inside vLLM's worker: every engine step of a round, by phase.

vLLM's ``worker_extension_cls`` engine argument mixes :data:`EXTENSION` into the class of each
of its workers (in the engine-core process, or in a worker process of its own under tensor
parallelism); ``LLM.collective_rpc`` calls its methods there. On the first
``specdecode_phases_start`` it wraps methods of the worker's V1 model runner (the same on
``GPUModelRunner`` and ``CPUModelRunner``, its subclass); between ``specdecode_phases_start``
and ``specdecode_phases_collect`` (one round) each step is timed:

- a step is one ``execute_model`` that scheduled tokens, with the ``sample_tokens`` that
  follows it; it is a prefill step when it scheduled any prompt token. It runs from its
  ``execute_model`` call to the next step's (so the engine core's scheduling and output
  handling between the two are in it); the round's last step ends where its
  ``sample_tokens`` returns;
- ``prepare``: from ``execute_model``'s start to the call of ``_model_forward`` (batch state,
  input ids, positions, attention metadata);
- ``forward``: from ``_model_forward``'s call to ``execute_model``'s return (the model and its
  logits: a decode step on the baseline, the verification pass over k + 1 positions on the
  speculative side);
- ``sample``: from ``sample_tokens``' start to ``_sample``'s return (grammar bitmask, sampling,
  rejection sampling);
- ``draft``: the calls of ``propose_draft_token_ids`` (the proposer's next draft);
- ``other``: the rest of the step (bookkeeping, the engine core's scheduling and output).

Outside a round nothing is recorded (warm-up, ``sample``, load rounds). A vLLM whose model
runner lacks one of :data:`WRAPPED` (vLLM's model runner V2) is not timed: the round's profile
is None and the engine log says why. This module imports neither vLLM nor torch.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable, Mapping, MutableMapping
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
#: The model runner's methods that are wrapped, in the order a step calls them.
WRAPPED = ("execute_model", "_model_forward", "sample_tokens", "_sample", "propose_draft_token_ids")


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
        "prefill", "fresh", "start", "forward", "executed", "sample", "sampled", "drafts", "end",
    )  # fmt: skip

    def __init__(self, prefill: bool, fresh: bool, start: Any) -> None:
        self.prefill = prefill
        self.fresh = fresh  # it schedules only new requests: the engine had none running
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
    whose computed tokens have not yet covered its prompt (chunked prefill)."""
    if scheduler_output.scheduled_new_reqs:
        return True
    cached = scheduler_output.scheduled_cached_reqs
    if getattr(cached, "resumed_req_ids", None):
        return True
    for req_id, computed in zip(cached.req_ids, cached.num_computed_tokens, strict=False):
        state = runner.requests.get(req_id)
        if state is None or computed < state.num_prompt_tokens:
            return True
    return False


class StepTimer:
    """Times each step of a round on a model runner whose :data:`WRAPPED` methods it wrapped
    (:meth:`install`)."""

    def __init__(self, clock: PhaseClock) -> None:
        self.clock = clock
        self.armed = False
        self.steps: list[_Step] = []
        self.executing: _Step | None = None  # inside execute_model
        self.sampling: _Step | None = None  # inside sample_tokens
        self.error: str | None = None  # what stopped the timing (the round has no profile)

    @classmethod
    def install(cls, runner: Any, clock: PhaseClock | None = None) -> StepTimer:
        """Wrap ``runner``'s methods (its instance attributes shadow the class's); a
        ``LookupError`` naming what is missing when it lacks one of :data:`WRAPPED`."""
        missing = [name for name in WRAPPED if not callable(getattr(runner, name, None))]
        if missing:
            raise LookupError(
                f"the model runner {type(runner).__module__}.{type(runner).__qualname__} has no "
                f"{', '.join(missing)}"
            )
        device = getattr(getattr(runner, "device", None), "type", "cpu")
        timer = cls(clock or clock_for(str(device)))
        for name in WRAPPED:
            wrap = getattr(timer, "_wrap_" + name.lstrip("_"))
            original = getattr(runner, name)
            setattr(runner, name, functools.wraps(original)(wrap(runner, original)))
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
        for i, step in enumerate(steps):
            after = steps[i + 1] if i + 1 < len(steps) else None
            end = step.end if after is None or after.fresh else after.start
            executed = step.executed if step.executed is not None else step.end
            kinds[step.prefill] += PhaseTimes(
                1,
                seconds(step.start, end),
                prepare=seconds(step.start, step.forward if step.forward is not None else executed),
                forward=seconds(step.forward, executed) if step.forward is not None else 0.0,
                sample=(
                    seconds(step.sample, step.sampled)
                    if step.sample is not None and step.sampled is not None
                    else 0.0
                ),
                draft=sum(seconds(a, b) for a, b in step.drafts),
            )
        self._drop()
        return StepProfile(kinds[True], kinds[False], self.clock.name).to_dict()

    def _drop(self) -> None:
        self.clock.recycle([m for s in self.steps for m in s.marks()])
        self.steps = []
        self.executing = self.sampling = None

    def _fail(self, what: str, exc: BaseException) -> None:
        self.error = f"{what}: {type(exc).__name__}: {exc}"
        self.armed = False
        print(f"specdecode phases: this round is not timed ({self.error})", flush=True)

    def _wrap_execute_model(self, runner: Any, call: Callable[..., Any]) -> Callable[..., Any]:
        def execute_model(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.armed or not getattr(scheduler_output, "total_num_scheduled_tokens", 0):
                return call(scheduler_output, *args, **kwargs)
            try:
                prefill = _has_prompt_tokens(runner, scheduler_output)
                fresh = not scheduler_output.scheduled_cached_reqs.req_ids
            except Exception as exc:  # noqa: BLE001 - a vLLM whose scheduler output differs
                self._fail("reading the scheduler output", exc)
                return call(scheduler_output, *args, **kwargs)
            step = _Step(prefill, fresh, self.clock.mark())
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

    def _wrap_model_forward(self, runner: Any, call: Callable[..., Any]) -> Callable[..., Any]:
        def _model_forward(*args: Any, **kwargs: Any) -> Any:
            step = self.executing
            if step is not None and step.forward is None:
                step.forward = self.clock.mark()
            return call(*args, **kwargs)

        return _model_forward

    def _wrap_sample_tokens(self, runner: Any, call: Callable[..., Any]) -> Callable[..., Any]:
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

    def _wrap_sample(self, runner: Any, call: Callable[..., Any]) -> Callable[..., Any]:
        def _sample(*args: Any, **kwargs: Any) -> Any:
            step = self.sampling
            try:
                return call(*args, **kwargs)
            finally:
                if step is not None:
                    step.sampled = self.clock.mark()

        return _sample

    def _wrap_propose_draft_token_ids(
        self, runner: Any, call: Callable[..., Any]
    ) -> Callable[..., Any]:
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
                timer = f"phases are not timed with this vLLM: {exc}"
                print(f"specdecode phases: {timer}", flush=True)
            self.__dict__["_specdecode_timer"] = timer
        if isinstance(timer, str):
            return {"ok": False, "note": timer}
        timer.begin()
        return {"ok": True, "clock": timer.clock.name}

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
