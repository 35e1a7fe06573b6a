"""One self-contained HTML file: the table, the verdicts, and the charts of :mod:`.charts`.

Charts are embedded as inline SVG, so the file works offline with no external script. It is
rendered from a :class:`~pytest_specdecode.baselines.report.Report` (a ``--specdecode-report``
file read with ``Report.from_dict``), so it can be made after the fact:
``python -m pytest_specdecode html report.json report.html``. matplotlib is the optional
extra ``pytest-specdecode[html]``.

The page is assembled from small functions, a section each, each returning its lines. Text from
the report is escaped once, where its element is made (:func:`esc`, :func:`text_element`): each
lone surrogate (which JSON can carry but UTF-8 cannot) written as its escape, then HTML's special
characters. A chart that cannot be drawn is replaced by a line saying why, so one bad figure
never costs the page.
"""

from __future__ import annotations

import functools
import html
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC
from typing import Any

from ..baselines.report import Report, ReportEntry
from ..errors import ConfigError
from ..figure_table import finite
from ..measure.choice import Ranking
from ..measure.kschedule import KSchedule, ScheduleCheck
from ..measure.load import LoadResult
from ..measure.phases import StepFigures
from ..measure.sweep import Sweep
from ..measure.verdict import Verdict
from . import charts
from .checklist import NO, UNKNOWN, YES, Checklist, checklists
from .phases import (
    NOT_RECORDED,
    PHASE_COLOURS,
    PHASE_NAMES,
    SERVED,
    break_even_points,
    explanation,
    ms,
    no_phases,
    phase_line,
    round_split,
    tokens_per_step,
)
from .style import STYLE
from .table import (
    CHECK_HEADERS,
    COMPARISON_HEADERS,
    LOAD_LEGEND,
    RANKING_HEADERS,
    SCHEDULE_HEADERS,
    SCHEDULE_LEGEND,
    Cell,
    Gate,
    check_line,
    check_rows,
    comparison_rows,
    distribution_line,
    label,
    load_line,
    ranking_rows,
    render_loads,
    results_table,
    schedule_line,
    schedule_rows,
    sizing_lines,
    sweep_line,
    without_surrogates,
)

# --- markup: where text is escaped ----------------------------------------------------------


def esc(text: str) -> str:
    """Text from the report as HTML: each lone surrogate written as its escape (``\\udcff``),
    then ``&``, ``<``, ``>`` and quotes as entities. Every text on the page goes through here
    once, where its element is made."""
    return html.escape(without_surrogates(text))


def element(tag: str, markup: str = "", **attributes: str) -> str:
    """``<tag ...>markup</tag>``: ``markup`` is HTML already (escaped text, elements); each
    attribute's value is text, escaped here, in the order given (``css`` gives ``class``)."""
    named = "".join(f" {'class' if k == 'css' else k}='{esc(v)}'" for k, v in attributes.items())
    return f"<{tag}{named}>{markup}</{tag}>"


def text_element(tag: str, text: str, **attributes: str) -> str:
    """An element holding ``text``, escaped."""
    return element(tag, esc(text), **attributes)


def _cell(text: str, css: str | None = None) -> str:
    """A table cell holding ``text``; ``css``, a class, colours it."""
    return text_element("td", text, css=css) if css else text_element("td", text)


def _boxed_table(css: str, headers: Sequence[str], rows: Iterable[str]) -> str:
    """A table in a box that scrolls sideways; ``rows``: each row's cells as markup."""
    head = element("thead", element("tr", "".join(text_element("th", h) for h in headers)))
    body = element("tbody", "".join(element("tr", cells) for cells in rows))
    return element("div", element("table", head + body, css=css), css="wrap")


def _table(css: str, headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """:func:`_boxed_table` of text cells."""
    return _boxed_table(css, headers, ("".join(map(_cell, row)) for row in rows))


# --- charts: drawn by :mod:`.charts`, or a line saying why not ------------------------------


def _drawn(draw: Callable[[], list[str]]) -> list[str]:
    """``draw()``'s charts, or one line saying why they could not be drawn (the rest of the
    page still renders)."""
    try:
        return draw()
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - one chart must not cost the page
        why = f"chart not drawn: {type(exc).__name__}: {exc}"
        return [text_element("p", why, css="chart-error")]


def _chart(draw: Callable[..., str], *args: Any) -> str:
    """``draw(*args)``, or a line saying why that chart could not be drawn."""
    return _drawn(lambda: [draw(*args)])[0]


def _figure(anchor: str, draw: Callable[..., str], *args: Any) -> str:
    """The chart ``draw(*args)`` in its box, whose id is ``anchor`` (:func:`_chart`)."""
    return element("div", _chart(draw, *args), css="chart", id=anchor)


# --- the phase bars: HTML and CSS, no matplotlib --------------------------------------------


def _legend() -> str:
    """The phase colours, once for every bar chart on the page, and the break-even mark."""
    items = "".join(
        element("span", element("i", css="swatch", style=f"background:{colour}") + esc(name))
        for name, colour in ((PHASE_NAMES[p], PHASE_COLOURS[p]) for p in PHASE_COLOURS)
    )
    mark = ("<span><i class='mark'></i>break-even: the baseline step &times; the tokens "
            "each speculative step yields (a speculative step shorter than this "
            "pays)</span>")  # fmt: skip
    return element("div", items + mark, css="legend", id="phase-legend")


def _bar(name: str, figures: StepFigures, scale: float, mark: float | None) -> str:
    """One engine's decode step as a stacked bar, a segment per phase (title: its ms)."""
    total = figures.step_ms
    segments = []
    for phase, colour in PHASE_COLOURS.items():
        value = figures.ms(phase) or 0.0
        if value <= 0 or total is None:
            continue
        width = 100 * value / scale
        text = ms(value) if width >= 9 else ""
        tip = f"{PHASE_NAMES[phase]}: {ms(value)} ms ({value / total:.0%} of the step)"
        style = f"width:{width:.2f}%;background:{colour}"
        segments.append(text_element("span", text, css="seg", style=style, title=tip))
    shown = "no decode steps" if total is None else f"{ms(total)} ms"
    marker = ""
    if mark is not None:
        marker = element("span", css="break-even", style=f"left:{100 * mark / scale:.2f}%",
                         title=f"break-even: {ms(mark)} ms")  # fmt: skip
    track = "".join(segments) + text_element("span", shown, css="phase-total") + marker
    side = text_element("span", name, css="phase-side")
    return element("div", side + element("div", track, css="phase-track"), css="phase-row")


def phase_chart(entry: ReportEntry) -> str:
    """A result's baseline decode step against its speculative decode step, stacked by phase
    in ms on one scale, with the break-even mark (the baseline step times the tokens each
    speculative step yields, or the measured acceptance length where the steps were not
    counted) on the speculative bar; its phase line and the prefill steps below.
    HTML and CSS only: it reflows at any width. Empty when the result has no phase figures."""
    figures = entry.result.phases
    if figures is None:
        return ""
    base, spec = figures.baseline.decode, figures.speculative.decode
    base_ms, spec_ms = base.step_ms, spec.step_ms
    accepted = tokens_per_step(figures, entry)
    mark = None if base_ms is None or accepted is None else base_ms * accepted
    longest = max([v for v in (base_ms, spec_ms, mark) if v is not None] or [1.0])
    scale = longest / 0.8 if longest > 0 else 1.0  # the longest takes 80%: room for its label
    prefill = "; ".join(
        f"{side} {ms(steps.prefill.step_ms)} ms per step "
        f"({finite(steps.prefill.steps) or 0:g} per round)"
        for side, steps in (("baseline", figures.baseline), ("speculative", figures.speculative))
    )
    said = explanation(entry)
    split = round_split(figures)
    return (
        text_element("div", label(entry), css="phase-title")
        + _bar("baseline", base, scale, None)
        + _bar("speculative", spec, scale, mark)
        + text_element("p", phase_line(entry), css="phase-text")
        + (text_element("p", said, css="phase-text") if said else "")
        + text_element("p", f"prefill steps (apart): {prefill}", css="phase-text env")
        + (text_element("p", split, css="phase-text env") if split else "")
    )


def _phase_section(results: Sequence[ReportEntry], served: bool) -> list[str]:
    """Where each test's decode step goes, baseline against speculative, by phase; a test
    without phase figures says so (a served engine has none)."""
    if not results:
        return []
    parts = ["<h2>Where a decode step's time goes</h2>"]
    if not any(r.result.phases is not None for r in results):
        why = no_phases(results, served)
        why += " in this report" if why == NOT_RECORDED else ""
        return [*parts, text_element("p", f"{why}.", id="phases")]
    parts += [
        "<p class='env'>Mean milliseconds per decode step, timed inside each engine; on the "
        "speculative side the forward pass is the verification pass over k + 1 positions.</p>",
        _legend(),
        "<div id='phases'>",
    ]
    for i, r in enumerate(results):
        chart = phase_chart(r) or (
            text_element("div", label(r), css="phase-title")
            + text_element("p", no_phases([r], served), css="phase-text")
        )
        parts.append(element("div", chart, css="phase-chart", id=f"phases-{i}"))
    parts.append("</div>")
    return parts


# --- sweeps, schedules, loads and rankings --------------------------------------------------


def _sweep_section(index: int, sweep: Sweep, served: bool) -> list[str]:
    """A sweep: its line, its charts, its break-even curve and, where it measured something,
    its k schedule."""
    # the sweep's line without its id, which the heading gives (the line's surrogates escaped)
    line = sweep_line(sweep).removeprefix(f"{without_surrogates(sweep.nodeid)}: ")
    svgs = _drawn(functools.partial(charts.sweep_charts, sweep))
    parts = [text_element("h2", f"Sweep: {sweep.nodeid}"), text_element("p", line)]
    parts += [
        element("div", chart, css="chart", id=f"sweep-{index}-{j}") for j, chart in enumerate(svgs)
    ]
    parts += _sweep_break_even(index, sweep, served)
    if sweep.points:  # a sweep that measured something has a schedule
        parts += _schedule_part(sweep.schedule())
    return parts


def _sweep_break_even(index: int, sweep: Sweep, served: bool) -> list[str]:
    """The sweep's break-even chart, or a line saying it has no phase figures."""
    if not break_even_points(sweep):
        why = SERVED if served else NOT_RECORDED
        return [text_element("p", f"Break-even against concurrency: {why}.", css="env")]
    return [
        "<h3>Break-even against concurrency</h3>",
        "<p class='env'>Speculation pays where a k's measured acceptance length (dashed) lies "
        "above its break-even length L* (solid): each verification step must yield more than "
        "L* = speculative step / baseline step tokens; 95% intervals.</p>",
        element(
            "div", _chart(charts.break_even_chart, sweep), css="chart fit", id=f"break-even-{index}"
        ),
    ]


def _schedule_part(schedule: KSchedule) -> list[str]:
    """A sweep's k schedule: its line, its table and the config to paste, one line of JSON."""
    # each lone surrogate written as its escape, as in every other text, before JSON writes it
    config = json.dumps(without_surrogates(schedule.speculative_config))
    return [
        "<h3>Which k at which batch size</h3>" + text_element("p", schedule_line(schedule)),
        _table("schedule", SCHEDULE_HEADERS, schedule_rows(schedule)),
        "<p>The speculative config (<code>vllm serve --speculative-config '...'</code>, or "
        "<code>vllm.LLM(speculative_config=...)</code>):</p>",
        text_element("pre", config, css="config"),
    ]


def _check_section(index: int, check: ScheduleCheck) -> list[str]:
    """A schedule check: its line, its table and its chart."""
    return [
        text_element("h2", f"Schedule check: {check.nodeid}"),
        text_element("p", check_line(check)),
        _table("schedule-check", CHECK_HEADERS, check_rows(check)),
        _figure(f"schedule-check-{index}", charts.schedule_chart, check),
    ]


def _load_section(index: int, load: LoadResult) -> list[str]:
    """A load test: its line, its table (tabulate's ``html``, which escapes its cells), the
    legend and its chart."""
    return [
        text_element("h2", f"Under load: {load.key}"),
        text_element("p", load_line(load)),
        element("div", render_loads([load], tablefmt="html"), css="load wrap"),
        text_element("p", LOAD_LEGEND, css="env"),
        _figure(f"load-{index}", charts.load_chart, load),
    ]


def _ranking_section(index: int, ranking: Ranking) -> list[str]:
    """A draft ranking: the choice and why, its table and its chart."""
    best = ranking.best
    choice = f"best: {best}" if best is not None else "no candidate is worth it"
    parts = [
        text_element("h2", f"Draft ranking: {ranking.nodeid}"),
        element("p", f"{esc(choice)} &mdash; {esc(ranking.reason)}"),
        _table("ranking", RANKING_HEADERS, ranking_rows(ranking)),
    ]
    unmeasured = [c.name for c in ranking.candidates if c.result.extra_memory_gib is None]
    if unmeasured:
        why = f"extra memory not measured for {', '.join(unmeasured)}: plotted at 0 GiB"
        parts.append(text_element("p", why, css="env"))
    parts.append(_figure(f"ranking-{index}", charts.ranking_chart, ranking))
    return parts


# --- the top of the page: summary, flags, checklist -----------------------------------------


def _checklist_section(found: list[Checklist]) -> list[str]:
    """The short answer in words (one paragraph per target and proposer), then each
    question's answer and figure."""
    if not found:
        return []
    parts = ["<section id='checklist'>"]
    parts += [
        element("p", text_element("b", f"{c.title}:") + " " + esc(c.summary), css="answer")
        for c in found
    ]
    parts.append("<h2>Worth it? The checklist</h2>")
    for c in found:
        rows = (
            _cell(line.answer, line.answer) + _cell(line.question) + _cell(line.figure)
            for line in c.lines
        )
        table = _boxed_table("checklist", ("answer", "question", "figure"), rows)
        parts.append(element("p", text_element("b", c.title)) + table)
    parts.append("</section>")
    return parts


#: Why a sampling-equivalence check fails on vLLM for CPU (a known limitation, not a bug of the
#: engine under test): the example suites mark it expected to fail there.
CPU_SAMPLING = (
    "vLLM for CPU's speculative sampling is known not to be lossless at temperature > 0 (even "
    "a draft that computes the target's own function shifts the sampled distribution), so on a "
    "CPU this check is expected to fail; the example suites mark it xfail(strict) there, and a "
    "vLLM that fixes it turns them red until the mark is removed"
)


def started_text(session: Mapping[str, Any]) -> str:
    """When the run started (``session.started``, ISO 8601 UTC) as ``2026-12-04 10:15 UTC``;
    a report from before the field existed says so."""
    from datetime import datetime

    value = session.get("started")
    if not value:
        return "not recorded (a report from before pytest-specdecode recorded it)"
    if re.fullmatch(r"\d{4}-\d\d-\d\d", str(value)):
        return str(value)  # a date alone
    try:
        when = datetime.fromisoformat(str(value)).astimezone(UTC)
    except ValueError:
        return str(value)
    return when.strftime("%Y-%m-%d %H:%M UTC")


def _models(entries: Sequence[ReportEntry]) -> str:
    """The targets and proposers of the run by display name (the report keeps the paths)."""
    from ..names import display_name

    results = [e.result for e in entries]
    targets = list(dict.fromkeys(display_name(r.target) for r in results))
    proposers = list(dict.fromkeys(
        display_name(r.draft) if r.draft else r.method for r in results
    ))  # fmt: skip
    if not targets:
        return "no results"
    return f"target {', '.join(targets)}; proposers {', '.join(proposers)}"


def _flags(report: Report, env: Mapping[str, Any]) -> list[str]:
    """The checks a reader must not miss: failed gates and failed equivalence checks, with
    what they mean."""
    flags = []
    cpu = (env.get("device") or {}).get("kind") == "cpu"
    for c in report.distribution_checks:
        if not c.passed:
            test = text_element("code", c.nodeid.rsplit("::", 1)[-1])
            p = finite(c.p_value)
            at = "" if p is None else f" (p = {p:.3g})"
            why = CPU_SAMPLING if cpu else (
                "speculative sampling changed the output distribution: speculation is not "
                "lossless on this engine at this temperature"
            )  # fmt: skip
            said = f"<b>Sampling equivalence failed</b> in {test}{at}: {esc(why)}."
            flags.append(element("p", said, css="flag expected" if cpu else "flag"))
    for r in report.results:
        if r.outcome.passed is False:
            reasons = "; ".join(r.outcome.gate_failures) or (
                "no gate message recorded (an assertion in the test itself: its pytest output "
                "says which)"
            )  # fmt: skip
            said = f"<b>Failed</b>: {text_element('code', label(r))}: {esc(reasons)}."
            flags.append(element("p", said, css="flag"))
    for line in sizing_lines(report):
        if line.startswith("WARNING: "):
            said = "<b>Blind</b>: " + esc(line.removeprefix("WARNING: "))
            flags.append(element("p", said, css="flag"))
    return flags


def _summary_section(report: Report, env: Mapping[str, Any]) -> list[str]:
    """The top of the page: when, which models, on what, how many results said what."""
    results = report.results
    session = report.session or {}
    verdicts: dict[str, int] = defaultdict(int)
    for r in results:
        verdicts[r.result.verdict or "no verdict"] += 1
    counted = ", ".join(f"{n} {v}" for v, n in verdicts.items()) or "none"
    device = env.get("device") or {}
    items = [
        ("run started", started_text(session)),
        ("models", _models(results)),
        ("vLLM", str(env.get("vllm") or "-")),
        ("torch", str(env.get("torch") or "-")),
        ("hardware", str(device.get("name") or device.get("kind") or "-")),
        ("results", f"{len(results)}: {counted}"),
    ]
    rows = "".join(text_element("dt", k) + text_element("dd", v) for k, v in items)
    return ["<section id='summary'>", element("dl", rows), *_flags(report, env), "</section>"]


# --- results, verdicts, baseline ------------------------------------------------------------


#: The class that colours a verdict, and a gate outcome, in the results table: the
#: checklist's answer it amounts to.
_VERDICT_CLASS = {Verdict.WORTH: YES, Verdict.NOT_WORTH: NO, Verdict.INCONCLUSIVE: UNKNOWN}
_GATE_CLASS = {Gate.PASS: YES, Gate.FAIL: NO, Gate.INCONCLUSIVE: UNKNOWN}


def _cell_class(cell: Cell) -> str | None:
    """The class of a results-table cell (None: plain text, or a gate that decided nothing)."""
    if isinstance(cell, Verdict):
        return _VERDICT_CLASS[cell]
    if isinstance(cell, Gate):
        return _GATE_CLASS.get(cell)
    return None


def _results_table(results: Sequence[ReportEntry]) -> str:
    """The results table (:func:`~.table.results_table`), each verdict and gate cell given
    the class that colours it. Cells are laid out as tabulate's ``html`` format does (each
    padded to its column's width: the longest cell, or the header and two spaces) but for a
    coloured one, which holds its words alone."""
    headers, table = results_table(results)
    texts = [[str(cell).strip() for cell in row] for row in table]
    widths = [max([len(h) + 2, *(len(row[i]) for row in texts)]) for i, h in enumerate(headers)]

    def td(cell: Cell, text: str, width: int) -> str:
        css = _cell_class(cell)
        return _cell(text.ljust(width)) if css is None else _cell(text, css)

    head = "".join(text_element("th", h.ljust(w)) for h, w in zip(headers, widths, strict=True))
    body = "".join(
        "\n" + element("tr", "".join(map(td, row, text, widths)))
        for row, text in zip(table, texts, strict=True)
    )
    return f"<table>\n<thead>\n<tr>{head}</tr>\n</thead>\n<tbody>{body}\n</tbody>\n</table>"


def _results_section(results: Sequence[ReportEntry]) -> list[str]:
    """The results table and each result's verdict with its reasons."""
    notes = " notes" if any(r.result.notes for r in results) else ""
    verdicts = [
        element(
            "li",
            f"{text_element('b', label(r))}: {esc(r.result.verdict or '-')} &mdash; "
            f"{esc('; '.join(r.result.verdict_reasons))}",
        )
        for r in results
    ]
    return [
        "<h2>Results</h2>",
        element("div", _results_table(results), id="results", css=f"wrap{notes}"),
        "<h2>Verdicts</h2><ul>",
        *verdicts,
        "</ul>",
    ]


def _baseline_section(report: Report) -> list[str]:
    """The comparison with the baseline (its table, with what each comparison could catch)
    and what each saved result lets a later run see."""
    parts = []
    if report.comparisons is not None:
        parts += [
            "<h2>Comparison with the baseline</h2>",
            _table("comparison", COMPARISON_HEADERS, comparison_rows(report.comparisons)),
        ]
    saved = [line for line in sizing_lines(report) if line.startswith("baseline ")]
    if saved:
        parts.append("<h2>What this baseline can see</h2><ul id='baseline'>")
        parts += [text_element("li", line.removeprefix("baseline ")) for line in saved]
        parts.append("</ul>")
    return parts


def _charts_section(results: Sequence[ReportEntry]) -> list[str]:
    """Speedup per result, and acceptance per position per category."""
    if not results:
        return []
    return [
        "<h2>Charts</h2>",
        _figure("speedup", charts.speedup_chart, results),
        _figure("acceptance", charts.acceptance_chart, results),
    ]


def _distribution_section(report: Report) -> list[str]:
    """A line per sampling-equivalence check."""
    if not report.distribution_checks:
        return []
    return [
        "<h2>Distribution checks (sample_equivalence)</h2><ul id='distributions'>",
        *(text_element("li", distribution_line(c)) for c in report.distribution_checks),
        "</ul>",
    ]


#: The page's head and title.
_HEAD = (
    "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
    "<meta name='viewport' content='width=device-width, initial-scale=1'>",
    "<title>Speculative decoding report</title>",
    f"<style>{STYLE}</style></head><body>",
    "<h1>Speculative decoding report</h1>",
)


def render_html(report: Report) -> str:
    """The whole page for a report."""
    results = report.results
    env = report.environment
    served = bool(env.get("served"))
    parts = [
        *_HEAD,
        *_summary_section(report, env),
        *_checklist_section(checklists(report)),
        *_results_section(results),
        *_baseline_section(report),
        *_charts_section(results),
        *_phase_section(results, served),
    ]
    for i, sweep in enumerate(report.sweeps):
        parts += _sweep_section(i, sweep, served)
    for i, check in enumerate(report.schedule_checks):
        parts += _check_section(i, check)
    if report.schedule_checks or any(s.points for s in report.sweeps):
        parts.append(text_element("p", SCHEDULE_LEGEND, css="env"))
    for i, load in enumerate(report.loads):
        parts += _load_section(i, load)
    for i, ranking in enumerate(report.rankings):
        parts += _ranking_section(i, ranking)
    parts += _distribution_section(report)
    parts.append("</body></html>")
    return "\n".join(parts)
