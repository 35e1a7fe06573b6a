"""A report's figures in the formats of history trackers: Bencher Metric Format (``bmf``),
github-action-benchmark's ``customBiggerIsBetter`` list and its ``customSmallerIsBetter`` list
of the phase figures (``github-action-benchmark-smaller``).

Each result is one benchmark named by its key (``nodeid`` or ``nodeid[label]``, as a
comparison matches results), its phase figures (break-even length with its interval, draft
share, verification cost: lower is better) with it where it has them; each arrival rate of a
load test is one more, named ``<key>@<rate>req/s`` (``<key>@all-at-once`` for an infinite
rate); each concurrency of a schedule check is one more, named ``<nodeid>@c=<concurrency>``.
A result saved as a baseline, or compared with one, also carries each compared figure's
detectable drop (``speedup-detectable-drop``: the smallest drop its rule catches with 95%
probability, a share for a % tolerance; lower is better; left out where not even the
largest drop searched is caught).
A figure that was not measured (null in the report, ``nan`` or None on the typed object) is
left out; every number written is finite. Each renderer takes the typed report
(:class:`~pytest_specdecode.baselines.report.Report`). Which figures, their measure names,
units, direction, ``extra``-line text and format and their 95% intervals come from the figure
table (:data:`~pytest_specdecode.figure_table.FIGURE_TABLE`), which reads them off the typed
objects.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from ..baselines.report import Report, ReportEntry
from ..figure_table import exported, figure, finite, headline
from ..measure.detectable import Detectable
from ..measure.kschedule import ScheduleCheck, ScheduleRow
from ..measure.load import LoadPoint, LoadResult
from ..measure.result import Result
from .table import without_surrogates


def _key(nodeid: str, label: str) -> str:
    return f"{nodeid}[{label}]" if label else nodeid


def benchmark_name(result: ReportEntry | Result) -> str:
    """A result's key: ``nodeid``, or ``nodeid[label]`` for a labelled run."""
    return _key(*result.key)


def load_benchmark_name(load: LoadResult, point: LoadPoint) -> str:
    """One arrival rate of a load test: ``<key>@<rate>req/s``, ``<key>@all-at-once``."""
    at = "all-at-once" if math.isinf(point.rate) else f"{float(point.rate):g}req/s"
    return f"{_key(load.nodeid, load.label)}@{at}"


def _load_points(report: Report) -> list[tuple[str, LoadPoint]]:
    """(benchmark name, point) of every arrival rate of every load test."""
    return [
        (load_benchmark_name(load, point), point) for load in report.loads for point in load.points
    ]


def _measures(figures: Any, part: str) -> dict[str, dict[str, float]]:
    """The finite exported figures of one result (``part`` ``result``), its phase figures
    (``phases``), load point (``load``) or schedule-check row (``schedule``), by measure
    name; a figure with an interval also gets it as lower and upper values. ``figures`` is
    the typed object of that part (None: none, e.g. a result without phase figures)."""
    out: dict[str, dict[str, float]] = {}
    if figures is None:
        return out
    for row in exported(part):
        value = row.number(figures)
        if value is None or row.measure is None:
            continue
        out[row.measure] = {"value": value}
        ci = row.bounds(figures)
        if ci is not None:
            out[row.measure].update(lower_value=ci[0], upper_value=ci[1])
    return out


def schedule_benchmark_name(check: ScheduleCheck, row: ScheduleRow) -> str:
    """One concurrency of a schedule check: ``<nodeid>@c=<concurrency>``."""
    return f"{check.nodeid}@c={row.concurrency}"


def _schedule_rows(report: Report) -> list[tuple[str, ScheduleRow]]:
    """(benchmark name, row) of every concurrency of every schedule check."""
    return [
        (schedule_benchmark_name(check, row), row)
        for check in report.schedule_checks
        for row in check.rows
    ]


def detectable_measure(figure: str) -> str:
    """The measure name of a figure's detectable drop: ``speedup-detectable-drop``."""
    return f"{figure.replace('_', '-')}-detectable-drop"


def _detectable(report: Report, entry: ReportEntry) -> dict[str, Detectable]:
    """The finite detectable drops of one result (:meth:`Report.detectable`), by measure."""
    drops = report.detectable(entry).items()
    return {detectable_measure(f): d for f, d in drops if math.isfinite(d.drop)}


def _drop_unit(name: str, drop: Detectable) -> str:
    """The unit of a figure's detectable drop: ``%`` (of the stored value) for a %
    tolerance, else the figure's own (``x`` for the speedup)."""
    if drop.relative:
        return "%"
    try:
        return figure(name).unit
    except KeyError:  # a figure this version does not know
        return ""


def bmf(report: Report) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format: ``{benchmark: {measure: {"value", "lower_value",
    "upper_value"}}}``; the speedup, the break-even length, the TPOT gain and a schedule
    check's two speedups have bounds (their 95% intervals). The phase figures and the TPOT
    milliseconds are lower-is-better (set a Bencher threshold's upper boundary on them), the
    others higher-is-better."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for entry in report.results:
        measures = _measures(entry.result, "result")
        measures.update(_measures(entry.result.phases, "phases"))
        for measure, drop in _detectable(report, entry).items():
            measures[measure] = {"value": drop.drop}
        if measures:
            out[benchmark_name(entry)] = measures
    for name, point in _load_points(report):
        measures = _measures(point, "load")
        if measures:
            out[name] = measures
    for name, row in _schedule_rows(report):
        # a side not run (where the schedule is off) is left out
        measures = _measures(row, "schedule")
        if measures:
            out[name] = measures
    return out


def _extra(figures: Any, part: str) -> list[str]:
    """The ``extra`` line's parts for one part of a report (its typed object; None: none):
    each exported figure but the headline one, as ``<text> <value>`` in its format (with its
    95% interval where it has one)."""
    extra: list[str] = []
    if figures is None:
        return extra
    for row in exported(part):
        number = row.number(figures)
        if row.headline or number is None:
            continue
        ci = row.bounds(figures)
        bounds = f" (95% CI {ci[0]:{row.fmt}}-{ci[1]:{row.fmt}})" if ci is not None else ""
        extra.append(f"{row.text} {number:{row.fmt}}{bounds}")
    return extra


def _entry(name: str, figures: Any, part: str) -> dict[str, Any] | None:
    """github-action-benchmark's entry of one result, load point or schedule-check row: its
    headline figure, ``<name> <measure>``, with its 95% interval as the range; None when
    that figure was not measured."""
    row = headline(part)
    value = row.number(figures)
    if value is None:
        return None
    entry: dict[str, Any] = {"name": f"{name} {row.measure}", "unit": row.unit, "value": value}
    ci = row.bounds(figures)
    if ci is not None:
        entry["range"] = f"95% CI {ci[0]:.3f}-{ci[1]:.3f}"
    entry["extra"] = ""
    return entry


def github_action_benchmark(report: Report) -> list[dict[str, Any]]:
    """github-action-benchmark's ``customBiggerIsBetter`` input: one entry per result with a
    speedup, ``[{"name": "<key> speedup", "unit": "x", "value", "range", "extra"}]``; the
    range is the 95% interval, the extra line the acceptance and tokens/s of both sides, then
    the phase figures where the result has them (the break-even length with its interval;
    only on the extra line: they are lower-is-better, an entry would alert when they improve,
    so their entries are in :func:`github_action_benchmark_smaller`). Each load point with a
    TPOT gain adds ``<key>@<rate>req/s tpot-speedup``, its extra line the p50 TPOT and
    goodput of both sides; each concurrency a schedule check ran the scheduled engine at adds
    ``<nodeid>@c=<concurrency> scheduled-speedup``, its extra line the scheduled k and the
    best fixed k's speedup."""
    entries = []
    for e in report.results:
        result = e.result
        entry = _entry(benchmark_name(e), result, "result")
        if entry is not None:
            drops = [f"{m} {d.text()}" for m, d in _detectable(report, e).items()]
            extra = _extra(result, "result") + _extra(result.phases, "phases") + drops
            entry["extra"] = "; ".join(extra)
            entries.append(entry)
    for name, point in _load_points(report):
        entry = _entry(name, point, "load")
        if entry is not None:
            entry["extra"] = "; ".join(_extra(point, "load"))
            entries.append(entry)
    fixed = figure("fixed_speedup", "schedule")
    for name, row in _schedule_rows(report):
        entry = _entry(name, row, "schedule")
        if entry is not None:
            value, ci = fixed.number(row), fixed.bounds(row)
            extra = [f"scheduled k={row.scheduled_k}"]
            if value is not None:
                bounds = f" (95% CI {ci[0]:.3f}-{ci[1]:.3f})" if ci is not None else ""
                extra.append(f"best fixed k={row.fixed_k} {value:.3f}x{bounds}")
            entry["extra"] = "; ".join(extra)
            entries.append(entry)
    return entries


def github_action_benchmark_smaller(report: Report) -> list[dict[str, Any]]:
    """github-action-benchmark's ``customSmallerIsBetter`` input: the phase figures, lower
    is better, one entry per result and figure, ``<key> break-even-length`` (its range the
    95% interval, its extra line the measured acceptance length it is set against),
    ``<key> draft-share`` and ``<key> verify-cost``. A result without phase figures (a served
    engine, an older report) has none."""
    entries = []
    for e in report.results:
        for figure_name, drop in report.detectable(e).items():
            if not math.isfinite(drop.drop):
                continue
            # the value and the drop the rule is designed to catch in one unit
            unit = _drop_unit(figure_name, drop)
            scale = 100 if drop.relative else 1
            space = "" if unit in ("%", "x") else " "
            designed = f"{scale * drop.designed:g}{space}{unit}".rstrip()
            entries.append({
                "name": f"{benchmark_name(e)} {detectable_measure(figure_name)}", "unit": unit,
                "value": scale * drop.drop, "extra": f"designed to catch {designed}",
            })  # fmt: skip
        figures = e.result.phases
        if figures is None:
            continue
        for row in exported("phases"):
            value = row.number(figures)
            if value is None or row.higher_is_better:
                continue
            entry = {"name": f"{benchmark_name(e)} {row.measure}",
                     "unit": row.unit, "value": value}  # fmt: skip
            ci = row.bounds(figures)
            if ci is not None:
                entry["range"] = f"95% CI {ci[0]:.3f}-{ci[1]:.3f}"
            measured = finite(figures.acceptance_length)
            if row.name == "break_even_length" and measured is not None:
                entry["extra"] = f"measured acceptance length {measured:.2f}"
            entries.append(entry)
    return entries


#: What a spreadsheet may run as a formula when a cell starts with it (OWASP, CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    """Whether ``text`` is a number and nothing else (``-0.05``; not ``\t1``)."""
    if text != text.strip():
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def csv_cell(value: str | float) -> str | float:
    """One CSV cell: a number as it is; text with every lone surrogate written as its escape
    (``\\ud800``: UTF-8 cannot hold one) and, where it starts with what a spreadsheet would
    run as a formula (``=``, ``+``, ``-``, ``@``, a tab or a carriage return) and is not a
    number, a leading single quote (``'=HYPERLINK(...)``), as spreadsheet exporters write it."""
    if not isinstance(value, str):
        return value
    text: str = without_surrogates(value)
    if text.startswith(_FORMULA_START) and not _is_number(text):
        return "'" + text
    return text


def csv_text(report: Report) -> str:
    """The :func:`bmf` figures as CSV, one line per benchmark and measure: ``benchmark``,
    ``measure``, ``value`` and the ends of its 95% interval (``lower_value``,
    ``upper_value``; empty without one), for a spreadsheet or pandas. Text cells are quoted
    (a carriage return in one stays in its cell) and written by :func:`csv_cell` (one that
    starts like a formula gets a leading ``'``); numbers are not quoted, so stay numbers."""
    out = io.StringIO()
    lines = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    lines.writerow(("benchmark", "measure", "value", "lower_value", "upper_value"))
    for name, measures in bmf(report).items():
        for measure, v in measures.items():
            row = (name, measure, v["value"], v.get("lower_value", ""), v.get("upper_value", ""))
            lines.writerow([csv_cell(cell) for cell in row])
    return out.getvalue()
