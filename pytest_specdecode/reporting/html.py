"""One self-contained HTML file: the table, the verdicts, and charts drawn with matplotlib.

Charts are embedded as inline SVG, so the file works offline with no external script. It is
rendered from a :class:`~pytest_specdecode.baselines.report.Report` (a ``--specdecode-report``
file read with ``Report.from_dict``), so it can be made after the fact:
``python -m pytest_specdecode html report.json report.html``. matplotlib is the optional
extra ``pytest-specdecode[html]``.

Text from the report is drawn as written: matplotlib's math text is off (a ``$`` in a label is a
dollar sign), lone surrogates (which JSON can carry but UTF-8 cannot) are written as their
escape, and a chart that cannot be drawn is replaced by a line saying why, so one bad figure
never costs the page.
"""

from __future__ import annotations

import functools
import html
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, is_dataclass, replace
from datetime import UTC
from typing import Any, ParamSpec, TypeVar, cast

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
    speculative_config_json,
    sweep_line,
    without_surrogates,
)

P = ParamSpec("P")
T = TypeVar("T")


def _charts(draw: Callable[[], list[str]]) -> list[str]:
    """``draw()``'s charts, or one line saying why they could not be drawn (the rest of the
    page still renders)."""
    try:
        return draw()
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - one chart must not cost the page
        why = html.escape(f"{type(exc).__name__}: {exc}")
        return [f"<p class='chart-error'>chart not drawn: {why}</p>"]


def _chart(draw: Callable[..., str], *args: Any) -> str:
    """``draw(*args)``, or a line saying why that chart could not be drawn."""
    return _charts(lambda: [draw(*args)])[0]


def _sweep_break_even(index: int, sweep: Sweep, served: bool) -> list[str]:
    """The sweep's break-even chart, or a line saying it has no phase figures."""
    if not break_even_points(sweep):
        why = SERVED if served else NOT_RECORDED
        return [f"<p class='env'>Break-even against concurrency: {html.escape(why)}.</p>"]
    return [
        "<h3>Break-even against concurrency</h3>",
        "<p class='env'>Speculation pays where a k's measured acceptance length (dashed) lies "
        "above its break-even length L* (solid): each verification step must yield more than "
        "L* = speculative step / baseline step tokens; 95% intervals.</p>",
        f"<div class='chart fit' id='break-even-{index}'>{charts.break_even_chart(sweep)}</div>",
    ]


def _legend() -> str:
    """The phase colours, once for every bar chart on the page, and the break-even mark."""
    items = "".join(
        f"<span><i class='swatch' style='background:{PHASE_COLOURS[p]}'></i>"
        f"{html.escape(PHASE_NAMES[p])}</span>"
        for p in PHASE_COLOURS
    )
    mark = ("<span><i class='mark'></i>break-even: the baseline step &times; the tokens "
            "each speculative step yields (a speculative step shorter than this "
            "pays)</span>")  # fmt: skip
    return f"<div class='legend' id='phase-legend'>{items}{mark}</div>"


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
        segments.append(
            f"<span class='seg' style='width:{width:.2f}%;background:{colour}' "
            f"title='{html.escape(tip)}'>{text}</span>"
        )
    shown = "no decode steps" if total is None else f"{ms(total)} ms"
    marker = ""
    if mark is not None:
        marker = (f"<span class='break-even' style='left:{100 * mark / scale:.2f}%' "
                  f"title='break-even: {ms(mark)} ms'></span>")  # fmt: skip
    return (
        f"<div class='phase-row'><span class='phase-side'>{html.escape(name)}</span>"
        f"<div class='phase-track'>{''.join(segments)}<span class='phase-total'>"
        f"{html.escape(shown)}</span>{marker}</div></div>"
    )


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
    why = f"<p class='phase-text'>{html.escape(said)}</p>" if said else ""
    split = round_split(figures)
    return (
        f"<div class='phase-title'>{html.escape(label(entry))}</div>"
        + _bar("baseline", base, scale, None)
        + _bar("speculative", spec, scale, mark)
        + f"<p class='phase-text'>{html.escape(phase_line(entry))}</p>{why}"
        + f"<p class='phase-text env'>prefill steps (apart): {html.escape(prefill)}</p>"
        + (f"<p class='phase-text env'>{html.escape(split)}</p>" if split else "")
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
        return [*parts, f"<p id='phases'>{html.escape(why)}.</p>"]
    parts += [
        "<p class='env'>Mean milliseconds per decode step, timed inside each engine; on the "
        "speculative side the forward pass is the verification pass over k + 1 positions.</p>",
        _legend(),
        "<div id='phases'>",
    ]
    for i, r in enumerate(results):
        chart = phase_chart(r)
        if not chart:
            why = no_phases([r], served)
            chart = (f"<div class='phase-title'>{html.escape(label(r))}</div>"
                     f"<p class='phase-text'>{html.escape(why)}</p>")  # fmt: skip
        parts.append(f"<div class='phase-chart' id='phases-{i}'>{chart}</div>")
    parts.append("</div>")
    return parts


def _table(css: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return (f"<div class='wrap'><table class='{css}'><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table></div>")  # fmt: skip


def _schedule_part(schedule: KSchedule) -> list[str]:
    """A sweep's k schedule: its line, its table and the config to paste, one line of JSON."""
    return [
        f"<h3>Which k at which batch size</h3><p>{html.escape(schedule_line(schedule))}</p>",
        _table("schedule", SCHEDULE_HEADERS, schedule_rows(schedule)),
        "<p>The speculative config (<code>vllm serve --speculative-config '...'</code>, or "
        "<code>vllm.LLM(speculative_config=...)</code>):</p>",
        f"<pre class='config'>{html.escape(speculative_config_json(schedule))}</pre>",
    ]


def _check_section(index: int, check: ScheduleCheck) -> list[str]:
    return [
        f"<h2>Schedule check: {html.escape(check.nodeid)}</h2>",
        f"<p>{html.escape(check_line(check))}</p>",
        _table("schedule-check", CHECK_HEADERS, check_rows(check)),
        f"<div class='chart' id='schedule-check-{index}'>"
        f"{_chart(charts.schedule_chart, check)}</div>",
    ]


def _load_section(index: int, load: LoadResult) -> list[str]:
    return [
        f"<h2>Under load: {html.escape(load.key)}</h2>",
        f"<p>{html.escape(load_line(load))}</p>",
        f"<div class='load wrap'>{render_loads([load], tablefmt='html')}</div>",
        f"<p class='env'>{html.escape(LOAD_LEGEND)}</p>",
        f"<div class='chart' id='load-{index}'>{_chart(charts.load_chart, load)}</div>",
    ]


def _ranking_section(index: int, ranking: Ranking) -> list[str]:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in RANKING_HEADERS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in ranking_rows(ranking)
    )
    best = ranking.best
    choice = f"best: {best}" if best is not None else "no candidate is worth it"
    parts = [
        f"<h2>Draft ranking: {html.escape(ranking.nodeid)}</h2>",
        f"<p>{html.escape(choice)} &mdash; {html.escape(ranking.reason)}</p>",
        f"<div class='wrap'><table class='ranking'><thead><tr>{head}</tr></thead><tbody>{body}"
        "</tbody></table></div>",
    ]
    unmeasured = [c.name for c in ranking.candidates if c.result.extra_memory_gib is None]
    if unmeasured:
        parts.append(
            f"<p class='env'>extra memory not measured for {html.escape(', '.join(unmeasured))}"
            ": plotted at 0 GiB</p>"
        )
    parts.append(
        f"<div class='chart' id='ranking-{index}'>{_chart(charts.ranking_chart, ranking)}</div>"
    )
    return parts


def _checklist_section(found: list[Checklist]) -> list[str]:
    """The short answer in words (one paragraph per target and proposer), then each
    question's answer and figure."""
    if not found:
        return []
    parts = ["<section id='checklist'>"]
    for c in found:
        parts.append(
            f"<p class='answer'><b>{html.escape(c.title)}:</b> {html.escape(c.summary)}</p>"
        )
    parts.append("<h2>Worth it? The checklist</h2>")
    for c in found:
        rows = "".join(
            f"<tr><td class='{html.escape(line.answer)}'>{html.escape(line.answer)}</td>"
            f"<td>{html.escape(line.question)}</td><td>{html.escape(line.figure)}</td></tr>"
            for line in c.lines
        )
        parts.append(
            f"<p><b>{html.escape(c.title)}</b></p><div class='wrap'><table class='checklist'>"
            f"<thead><tr><th>answer</th><th>question</th><th>figure</th></tr></thead><tbody>"
            f"{rows}</tbody></table></div>"
        )
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
            test = c.nodeid.rsplit("::", 1)[-1]
            p = finite(c.p_value)
            why = CPU_SAMPLING if cpu else (
                "speculative sampling changed the output distribution: speculation is not "
                "lossless on this engine at this temperature"
            )  # fmt: skip
            css = "flag expected" if cpu else "flag"
            flags.append(
                f"<p class='{css}'><b>Sampling equivalence failed</b> in "
                f"<code>{html.escape(test)}</code> (p = {p:.3g}): {html.escape(why)}.</p>"
                if p is not None else
                f"<p class='{css}'><b>Sampling equivalence failed</b> in "
                f"<code>{html.escape(test)}</code>: {html.escape(why)}.</p>"
            )  # fmt: skip
    for r in report.results:
        if r.outcome.passed is False:
            reasons = "; ".join(r.outcome.gate_failures) or (
                "no gate message recorded (an assertion in the test itself: its pytest output "
                "says which)"
            )  # fmt: skip
            flags.append(
                f"<p class='flag'><b>Failed</b>: <code>{html.escape(label(r))}</code>: "
                f"{html.escape(reasons)}.</p>"
            )
    for line in sizing_lines(report):
        if line.startswith("WARNING: "):
            flags.append(
                f"<p class='flag'><b>Blind</b>: {html.escape(line.removeprefix('WARNING: '))}</p>"
            )
    return flags


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
        parts += [f"<li>{html.escape(line.removeprefix('baseline '))}</li>" for line in saved]
        parts.append("</ul>")
    return parts


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
    rows = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in items)
    return ["<section id='summary'>", f"<dl>{rows}</dl>", *_flags(report, env), "</section>"]


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
        if css is None:
            return f"<td>{html.escape(text.ljust(width))}</td>"
        return f"<td class='{css}'>{html.escape(text)}</td>"

    head = "".join(
        f"<th>{html.escape(h.ljust(w))}</th>" for h, w in zip(headers, widths, strict=True)
    )
    body = "".join(
        "\n<tr>" + "".join(map(td, row, text, widths)) + "</tr>"
        for row, text in zip(table, texts, strict=True)
    )
    return f"<table>\n<thead>\n<tr>{head}</tr>\n</thead>\n<tbody>{body}\n</tbody>\n</table>"


def _escaped(value: T) -> T:
    """``value`` (a report, one of its objects, a dict, list or text) with every lone
    surrogate in its text written as its escape (``\\udcff``, :func:`without_surrogates`),
    so it can be drawn and written as UTF-8; what holds none is returned as it is."""
    if isinstance(value, str):
        escaped = without_surrogates(value)
        return value if escaped == value else cast(T, escaped)
    if is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in fields(value):
            old = getattr(value, f.name)
            if (new := _escaped(old)) is not old:
                changes[f.name] = new
        return cast(T, replace(value, **changes)) if changes else value
    if isinstance(value, dict):
        items = {_escaped(k): _escaped(v) for k, v in value.items()}
        same = all(k in value and v is value[k] for k, v in items.items())
        return value if same else cast(T, items)
    if isinstance(value, list | tuple):
        escaped_items = [_escaped(v) for v in value]
        same = all(new is old for new, old in zip(escaped_items, value, strict=True))
        return value if same else cast(T, type(value)(escaped_items))
    return value


def render_html(report: Report) -> str:
    """The whole page for a report."""
    report = _escaped(report)
    results = report.results
    env = report.environment
    served = bool(env.get("served"))
    notes = " notes" if any(r.result.notes for r in results) else ""
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        "<title>Speculative decoding report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>Speculative decoding report</h1>",
        *_summary_section(report, env),
        *_checklist_section(checklists(report)),
        "<h2>Results</h2>",
        f"<div id='results' class='wrap{notes}'>{_results_table(results)}</div>",
        "<h2>Verdicts</h2><ul>",
    ]
    for r in results:
        reasons = "; ".join(r.result.verdict_reasons)
        parts.append(
            f"<li><b>{html.escape(label(r))}</b>: {html.escape(r.result.verdict or '-')}"
            f" &mdash; {html.escape(reasons)}</li>"
        )
    parts.append("</ul>")
    parts += _baseline_section(report)
    if results:
        parts += [
            "<h2>Charts</h2>",
            f"<div class='chart' id='speedup'>{_chart(charts.speedup_chart, results)}</div>",
        ]
        parts.append(
            f"<div class='chart' id='acceptance'>{_chart(charts.acceptance_chart, results)}</div>"
        )
    parts += _phase_section(results, served)
    for i, sweep in enumerate(report.sweeps):
        parts.append(f"<h2>Sweep: {html.escape(sweep.nodeid)}</h2>")
        line = sweep_line(sweep).removeprefix(f"{sweep.nodeid}: ")
        parts.append(f"<p>{html.escape(line)}</p>")
        for j, chart in enumerate(_charts(functools.partial(charts.sweep_charts, sweep))):
            parts.append(f"<div class='chart' id='sweep-{i}-{j}'>{chart}</div>")
        parts += _sweep_break_even(i, sweep, served)
        if sweep.points:  # a sweep that measured something has a schedule
            parts += _schedule_part(sweep.schedule())
    for i, check in enumerate(report.schedule_checks):
        parts += _check_section(i, check)
    if report.schedule_checks or any(s.points for s in report.sweeps):
        parts.append(f"<p class='env'>{html.escape(SCHEDULE_LEGEND)}</p>")
    for i, load in enumerate(report.loads):
        parts += _load_section(i, load)
    for i, ranking in enumerate(report.rankings):
        parts += _ranking_section(i, ranking)
    if report.distribution_checks:
        parts.append("<h2>Distribution checks (sample_equivalence)</h2><ul id='distributions'>")
        parts += [
            f"<li>{html.escape(distribution_line(c))}</li>" for c in report.distribution_checks
        ]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
