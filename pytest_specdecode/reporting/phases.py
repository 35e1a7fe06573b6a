"""A result's engine steps by phase (``Result.phases``, a :class:`PhaseSummary`) in
words: the phase line, the break-even beside the measured acceptance length, and a sweep's
break-even per concurrency. Reads the typed report model (a :class:`ReportEntry` or its
:class:`Result`, a :class:`PhaseSummary`, a :class:`Sweep`); a result without phase figures (a
served engine, a report from before phase timing) is said to have none, never guessed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..baselines.report import ReportEntry
from ..engines.protocol import PHASES
from ..figure_table import finite
from ..figure_table import interval as interval  # re-exported: scripts/render_docs.py reads it
from ..measure import phases as measured_phases
from ..measure.phases import (
    SIDES,
    EngineSteps,
    PhaseSummary,
    StepFigures,
    explain,
    yield_of,
    yield_text,
)
from ..measure.result import Result
from ..measure.sweep import Sweep

#: What a result without phase figures shows where the phase line would be.
SERVED = "no phase figures: served engine"
NOT_RECORDED = "no phase figures recorded"
#: What goes with the phase profile where the engine could not be timed.
WITHOUT_PHASES = "so no cost ratio, break-even length or theory efficiency"

#: How each of :data:`PHASES` reads on the speculative side (the forward pass there is the
#: verification pass over k + 1 positions), in the phase line's order: largest terms first.
SPEC_TERMS = (("forward", "verify"), ("draft", "draft"), ("sample", "sample"),
              ("prepare", "prepare"), ("other", "other"))  # fmt: skip

#: The legend's words for each phase.
PHASE_NAMES = {
    "prepare": "prepare (scheduling, model inputs)",
    "forward": "forward pass (decode; verification on the speculative side)",
    "sample": "sampling and rejection",
    "draft": "draft proposal",
    "other": "other",
}
#: One colour per phase (matplotlib's tab10), the same in every chart.
PHASE_COLOURS = dict(zip(PHASES, ("#9467bd", "#1f77b4", "#2ca02c", "#ff7f0e", "#7f7f7f"),
                         strict=True))  # fmt: skip


def _result(row: ReportEntry | Result) -> Result:
    return row.result if isinstance(row, ReportEntry) else row


def phases(row: ReportEntry | Result) -> PhaseSummary | None:
    """A result's (or sweep point's) phase figures, None when it has none."""
    return _result(row).phases


def no_phases(rows: Sequence[ReportEntry | Result], served: bool) -> str:
    """Why results have no phase figures: a served engine's; the engines' own words where
    their runner could not be timed (the vLLM version, the runner, the missing point; and
    the figures that go with it); else not recorded."""
    if served:
        return SERVED
    said = list(dict.fromkeys(n for r in rows if (n := _result(r).phases_unavailable)))
    if said:
        return f"{'; '.join(said)}; {WITHOUT_PHASES}"
    return NOT_RECORDED


def step(figures: PhaseSummary, side: str, kind: str = "decode") -> StepFigures:
    """One engine's steps of one kind (``decode`` or ``prefill``)."""
    engine: EngineSteps = getattr(figures, side)
    steps: StepFigures = getattr(engine, kind)
    return steps


def phase_ms(step_figures: StepFigures, phase: str) -> float | None:
    """Mean milliseconds per step of one phase (``step`` for the whole step); None when not
    measured."""
    return finite(step_figures.step_ms if phase == "step" else step_figures.ms(phase))


def pair(ci: tuple[float, float] | None) -> tuple[float, float] | None:
    """A 95% interval of phase figures; None unless both ends are finite numbers."""
    if ci is None:
        return None
    low, high = finite(ci[0]), finite(ci[1])
    return None if low is None or high is None else (low, high)


def ms(value: float | None) -> str:
    """Milliseconds as shown: one decimal, two significant digits below 0.05."""
    if value is None:
        return "-"
    return f"{value:.1f}" if value >= 0.05 or value == 0 else f"{value:.2g}"


def with_interval(value: float | None, ci: tuple[float, float] | None, fmt: str = ".1f") -> str:
    """``2.1 [1.9-2.3]``; the value alone without an interval; ``-`` when not measured."""
    if value is None:
        return "-"
    text = format(value, fmt)
    return text if ci is None else f"{text} [{ci[0]:{fmt}}-{ci[1]:{fmt}}]"


def _tokens(row: ReportEntry | Result | None, side: str) -> float | None:
    return None if row is None else finite(getattr(_result(row), side).generated_tokens)


def step_yield(figures: PhaseSummary, row: ReportEntry | Result | None = None) -> float | None:
    """The tokens each speculative decode step yields per request (``PhaseSummary.step_yield``):
    the baseline's decode steps per round over the speculative engine's, derived from the
    stored step counts (a report recorded before the figure existed has it too), scaled by
    the two sides' generated tokens where ``row`` (the result) has them and they differ; None
    when either engine counted no decode step."""
    measured = yield_of(finite(step(figures, "baseline").steps),
                        finite(step(figures, "speculative").steps))  # fmt: skip
    base, spec = _tokens(row, "baseline"), _tokens(row, "speculative")
    if measured is not None and base and spec and base != spec:
        measured *= spec / base
    return measured


def tokens_per_step(figures: PhaseSummary, row: ReportEntry | Result | None = None) -> float | None:
    """What the break-even is compared with (``PhaseSummary.tokens_per_step``, scaled as
    :func:`step_yield` is): the step yield, or the acceptance length where the steps were not
    counted."""
    measured = step_yield(figures, row)
    return finite(figures.acceptance_length) if measured is None else measured


def names_yield(figures: PhaseSummary, row: ReportEntry | Result | None = None) -> bool:
    """Whether the words name the step yield beside the acceptance length: it lies more than
    ``YIELD_GAP`` (10%) from it, or on the other side of the break-even."""
    return measured_phases.names_yield(
        step_yield(figures, row),
        finite(figures.acceptance_length),
        finite(figures.break_even_length),
    )


def break_even_text(
    figures: PhaseSummary, fmt: str = ".1f", row: ReportEntry | Result | None = None
) -> str:
    """``break-even 2.1 tokens/step [1.9-2.3], measured 3.4 [3.2-3.6]``; where the step yield
    differs from the acceptance length, ``break-even 1.5 tokens/step [1.4-1.6], measured: yields
    1.5 tokens per verify step (acceptance length 3.7 counts only the steps with drafts)``."""
    be = finite(figures.break_even_length)
    be_ci = pair(figures.break_even_ci)
    length = finite(figures.acceptance_length)
    tokens = step_yield(figures, row)
    if tokens is not None and length is not None and names_yield(figures, row):
        if fmt == ".1f":
            fmt = ".2f"  # a yield just under the break-even would print as the same number
        measured = f"measured: {yield_text(tokens, length, fmt)}"
    else:
        length_ci = pair(figures.acceptance_length_ci)
        measured = f"measured {with_interval(length, length_ci, fmt)}"
    per_request = finite(figures.request_yield)
    if tokens is not None and per_request is not None:
        if abs(per_request - tokens) > measured_phases.YIELD_GAP * tokens:
            measured += (
                f"; {per_request:{fmt}} tokens per request-step (the slowest request sets "
                f"the step count, {tokens:{fmt}})"
            )
    if be is None:
        return f"break-even -, {measured}"
    ci = "" if be_ci is None else f" [{be_ci[0]:{fmt}}-{be_ci[1]:{fmt}}]"
    full = finite(figures.break_even_full)
    at_full = "" if full is None else f" ({full:{fmt}} at full batch)"
    return f"break-even {be:{fmt}} tokens/step{ci}{at_full}, {measured}"


def round_split(figures: PhaseSummary) -> str:
    """Where a round's time went on each side, and how much of a speculative decode step the
    named phases account for: ``a round: baseline 72 ms = prefill 10 + decode 52 + outside
    the steps 10; speculative ...; named phases 90% of a speculative decode step``; "" for a
    report from before the rounds' time was kept."""
    parts = []
    for side in SIDES:
        split = getattr(figures, side).split()
        if split is None:
            return ""
        total = sum(split)
        pre, dec, out = split
        parts.append(
            f"{side} {ms(total)} ms = prefill {ms(pre)} + decode {ms(dec)} + outside the "
            f"steps {ms(out)}"
        )
    share = finite(figures.speculative.decode.named_share)
    named = "" if share is None else (
        f"; named phases {share:.0%} of a speculative decode step (the rest is other)"
    )  # fmt: skip
    return f"a round: {'; '.join(parts)}{named}"


def phase_line(row: ReportEntry | Result, *, served: bool = False) -> str:
    """The contract's phase line: ``phases: spec step 7.9 ms = verify 4.1 + draft 2.9 + sample
    0.5 + prepare 0.3 + other 0.1; base step 3.8 ms; break-even 2.1 tokens/step [1.9-2.3],
    measured 3.4 [3.2-3.6]`` (decode steps; the clock named when not wall time)."""
    figures = phases(row)
    if figures is None:
        return f"phases: {no_phases([row], served)}"
    spec, base = step(figures, "speculative"), step(figures, "baseline")
    total = phase_ms(spec, "step")
    if total is None:
        spec_text = "spec step - (no decode steps)"
    else:
        terms = " + ".join(f"{name} {ms(phase_ms(spec, phase))}" for phase, name in SPEC_TERMS)
        spec_text = f"spec step {ms(total)} ms = {terms}"
    base_total = phase_ms(base, "step")
    base_text = "base step - (no decode steps)" if base_total is None else (
        f"base step {ms(base_total)} ms"
    )  # fmt: skip
    clock = figures.clock
    tail = f"; clock {clock}" if clock not in (None, "wall") else ""
    return f"phases: {spec_text}; {base_text}; {break_even_text(figures, row=row)}{tail}"


def pays(figures: PhaseSummary, row: ReportEntry | Result | None = None) -> bool | None:
    """Whether each speculative decode step yields more tokens than the break-even (True),
    fewer (False), their intervals apart; None when they overlap or either is missing. The
    step yield (:func:`step_yield`) where the step counts are stored, with the acceptance
    length's interval scaled to it (the per-round step counts are not kept), else the
    measured acceptance length with its interval."""
    length, measured = finite(figures.acceptance_length), step_yield(figures, row)
    return measured_phases.clears(
        length if measured is None else measured,
        measured_phases.scaled_interval(pair(figures.acceptance_length_ci), length, measured),
        finite(figures.break_even_length),
        pair(figures.break_even_ci),
    )


def explanation(row: ReportEntry | Result) -> str:
    """The result's sentence on why speculation pays or not: as recorded, or derived afresh
    from its figures where they name the step yield (a report recorded before the step yield
    existed compared the break-even with the acceptance length alone); "" without one."""
    summary = phases(row)
    if summary is None:
        return ""
    said = summary.explanation
    if not names_yield(summary, row) or "counts only the steps with drafts" in said:
        return said
    result = _result(row)
    batch = finite(result.concurrency) or finite(result.num_prompts) or 1
    return explain(
        summary.baseline.decode, summary.speculative.decode, summary.break_even_length,
        summary.acceptance_length, int(batch), step_yield(summary, row),
        summary.break_even_ci, summary.acceptance_length_ci,
    )  # fmt: skip


@dataclass(frozen=True)
class BreakEvenPoint:
    """One point of a sweep's break-even curve: at ``concurrency`` with ``k`` drafted tokens,
    the break-even length and the measured acceptance length, each with its interval."""

    k: int
    concurrency: int
    break_even: float
    break_even_ci: tuple[float, float] | None
    acceptance: float | None
    acceptance_ci: tuple[float, float] | None
    #: L* over the steps at the full batch only (None in reports from before it was kept)
    full: float | None = None


def break_even_points(sweep: Sweep) -> list[BreakEvenPoint]:
    """The sweep's points that carry phase figures with a break-even length, by k then
    concurrency."""
    out = []
    for k, c, result in sweep.points:
        figures = result.phases
        be = None if figures is None else finite(figures.break_even_length)
        if figures is None or be is None:
            continue
        out.append(BreakEvenPoint(
            k, c, be, pair(figures.break_even_ci),
            finite(figures.acceptance_length), pair(figures.acceptance_length_ci),
            finite(figures.break_even_full),
        ))  # fmt: skip
    return sorted(out, key=lambda b: (b.k, b.concurrency))
