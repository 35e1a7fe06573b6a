"""A result's engine steps by phase (``results[i]["phases"]``, ``PhaseSummary.to_dict()``) in
words: the phase line, the break-even beside the measured acceptance length, and a sweep's
break-even per concurrency. Reads report dicts; a result without phase figures (a served
engine, a report from before phase timing) is said to have none, never guessed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..engines.protocol import PHASES
from ..figure_table import finite, interval
from ..measure import phases as measured_phases
from ..measure.phases import PhaseSummary, explain, yield_of, yield_text

#: What a result without phase figures shows where the phase line would be.
SERVED = "no phase figures: served engine"
NOT_RECORDED = "no phase figures recorded"

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


def phases(row: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A result's (or sweep point's) phase figures, None when it has none."""
    value = row.get("phases")
    return value if isinstance(value, Mapping) else None


def step(figures: Mapping[str, Any], side: str, kind: str = "decode") -> Mapping[str, Any]:
    """One engine's steps of one kind (``decode`` or ``prefill``); {} when absent."""
    engine = figures.get(side)
    value = engine.get(kind) if isinstance(engine, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def phase_ms(step_figures: Mapping[str, Any], phase: str) -> float | None:
    """Mean milliseconds per step of one phase (``step`` for the whole step)."""
    return finite(step_figures.get(f"{phase}_ms"))


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


def _tokens(row: Mapping[str, Any] | None, side: str) -> float | None:
    engine = None if row is None else row.get(side)
    return finite(engine.get("generated_tokens")) if isinstance(engine, Mapping) else None


def step_yield(figures: Mapping[str, Any], row: Mapping[str, Any] | None = None) -> float | None:
    """The tokens each speculative decode step yields per request (``PhaseSummary.step_yield``):
    the baseline's decode steps per round over the speculative engine's, derived from the
    stored step counts (a report recorded before the figure existed has it too), scaled by
    the two sides' generated tokens where ``row`` (the result) has them and they differ; None
    when either engine counted no decode step."""
    measured = yield_of(finite(step(figures, "baseline").get("steps")),
                        finite(step(figures, "speculative").get("steps")))  # fmt: skip
    base, spec = _tokens(row, "baseline"), _tokens(row, "speculative")
    if measured is not None and base and spec and base != spec:
        measured *= spec / base
    return measured


def names_yield(figures: Mapping[str, Any], row: Mapping[str, Any] | None = None) -> bool:
    """Whether the words name the step yield beside the acceptance length: it lies more than
    ``YIELD_GAP`` (10%) from it, or on the other side of the break-even."""
    return measured_phases.names_yield(
        step_yield(figures, row),
        finite(figures.get("acceptance_length")),
        finite(figures.get("break_even_length")),
    )


def break_even_text(
    figures: Mapping[str, Any], fmt: str = ".1f", row: Mapping[str, Any] | None = None
) -> str:
    """``break-even 2.1 tokens/step [1.9-2.3], measured 3.4 [3.2-3.6]``; where the step yield
    differs from the acceptance length, ``break-even 1.5 tokens/step [1.4-1.6], measured: yields
    1.5 tokens per verify step (acceptance length 3.7 counts only the steps with drafts)``."""
    be = finite(figures.get("break_even_length"))
    be_ci = interval(figures, "break_even_ci")
    length = finite(figures.get("acceptance_length"))
    tokens = step_yield(figures, row)
    if tokens is not None and length is not None and names_yield(figures, row):
        if fmt == ".1f":
            fmt = ".2f"  # a yield just under the break-even would print as the same number
        measured = f"measured: {yield_text(tokens, length, fmt)}"
    else:
        length_ci = interval(figures, "acceptance_length_ci")
        measured = f"measured {with_interval(length, length_ci, fmt)}"
    if be is None:
        return f"break-even -, {measured}"
    ci = "" if be_ci is None else f" [{be_ci[0]:{fmt}}-{be_ci[1]:{fmt}}]"
    return f"break-even {be:{fmt}} tokens/step{ci}, {measured}"


def phase_line(row: Mapping[str, Any], *, served: bool = False) -> str:
    """The contract's phase line: ``phases: spec step 7.9 ms = verify 4.1 + draft 2.9 + sample
    0.5 + prepare 0.3 + other 0.1; base step 3.8 ms; break-even 2.1 tokens/step [1.9-2.3],
    measured 3.4 [3.2-3.6]`` (decode steps; the clock named when not wall time)."""
    figures = phases(row)
    if figures is None:
        return f"phases: {SERVED if served else NOT_RECORDED}"
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
    clock = figures.get("clock")
    tail = f"; clock {clock}" if clock not in (None, "wall") else ""
    return f"phases: {spec_text}; {base_text}; {break_even_text(figures, row=row)}{tail}"


def pays(figures: Mapping[str, Any], row: Mapping[str, Any] | None = None) -> bool | None:
    """Whether each speculative decode step yields more tokens than the break-even (True),
    fewer (False), their intervals apart; None when they overlap or either is missing. The
    step yield (:func:`step_yield`) where the step counts are stored, with the acceptance
    length's interval scaled to it (the per-round step counts are not kept), else the
    measured acceptance length with its interval."""
    be, length = finite(figures.get("break_even_length")), finite(figures.get("acceptance_length"))
    length_ci = interval(figures, "acceptance_length_ci")
    acc, acc_ci = step_yield(figures, row), None
    if acc is None:
        acc, acc_ci = length, length_ci
    elif length and length_ci is not None:
        acc_ci = (length_ci[0] * acc / length, length_ci[1] * acc / length)
    if be is None or acc is None:
        return None
    be_ci = interval(figures, "break_even_ci") or (be, be)
    acc_ci = acc_ci or (acc, acc)
    if acc_ci[0] > be_ci[1]:
        return True
    if acc_ci[1] < be_ci[0]:
        return False
    return None


def explanation(row: Mapping[str, Any]) -> str:
    """The result's sentence on why speculation pays or not: as recorded, or derived afresh
    from its figures where they name the step yield (a report recorded before the step yield
    existed compared the break-even with the acceptance length alone); "" without one."""
    figures = phases(row)
    if figures is None:
        return ""
    said = str(figures.get("explanation") or "")
    if not names_yield(figures, row) or "counts only the steps with drafts" in said:
        return said
    try:
        summary = PhaseSummary.from_dict(figures)
    except (KeyError, TypeError, ValueError):
        return said
    batch = finite(row.get("concurrency")) or finite(row.get("num_prompts")) or 1
    return explain(
        summary.baseline.decode, summary.speculative.decode, summary.break_even_length,
        summary.acceptance_length, int(batch), step_yield(figures, row),
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


def break_even_points(sweep: Mapping[str, Any]) -> list[BreakEvenPoint]:
    """The sweep's points that carry phase figures with a break-even length, by k then
    concurrency."""
    out = []
    for p in sweep.get("points") or []:
        figures = phases(p) if isinstance(p, Mapping) else None
        k, c = finite(p.get("num_speculative_tokens")), finite(p.get("concurrency"))
        be = None if figures is None else finite(figures.get("break_even_length"))
        if figures is None or be is None or k is None or c is None:
            continue
        out.append(BreakEvenPoint(
            int(k), int(c), be, interval(figures, "break_even_ci"),
            finite(figures.get("acceptance_length")), interval(figures, "acceptance_length_ci"),
        ))  # fmt: skip
    return sorted(out, key=lambda b: (b.k, b.concurrency))
