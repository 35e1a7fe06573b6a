"""A report's figures in the formats of history trackers: Bencher Metric Format (``bmf``),
github-action-benchmark's ``customBiggerIsBetter`` list and its ``customSmallerIsBetter`` list
of the phase figures (``github-action-benchmark-smaller``).

Each result is one benchmark named by its key (``nodeid`` or ``nodeid[label]``, as a
comparison matches results), its phase figures (break-even length with its interval, draft
share, verification cost: lower is better) with it where it has them; each arrival rate of a
load test is one more, named ``<key>@<rate>req/s`` (``<key>@all-at-once`` for an infinite
rate); each concurrency of a schedule check is one more, named ``<nodeid>@c=<concurrency>``.
A figure that was not measured (null in the report) is left out; every number written is
finite. Which figures, their measure names, units, direction, ``extra``-line text and format
and their 95% intervals come from the figure table
(:data:`~pytest_specdecode.figure_table.FIGURE_TABLE`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

from ..figure_table import exported, figure, finite, headline, interval


def _phases(result: Mapping[str, Any]) -> Mapping[str, Any]:
    """A result's phase figures; {} without them (a served engine, an older report)."""
    value = result.get("phases")
    return value if isinstance(value, Mapping) else {}


def benchmark_name(result: Mapping[str, Any]) -> str:
    """A result's key: ``nodeid``, or ``nodeid[label]`` for a labelled run."""
    label = result.get("label")
    return f"{result['nodeid']}[{label}]" if label else str(result["nodeid"])


def load_benchmark_name(load: Mapping[str, Any], point: Mapping[str, Any]) -> str:
    """One arrival rate of a load test: ``<key>@<rate>req/s``, ``<key>@all-at-once``."""
    rate = point["rate"]
    at = "all-at-once" if rate == "inf" else f"{float(rate):g}req/s"
    return f"{benchmark_name(load)}@{at}"


def _load_points(report: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(benchmark name, point dict) of every arrival rate of every load test."""
    return [
        (load_benchmark_name(load, point), point)
        for load in report.get("loads") or []
        for point in load.get("points") or []
    ]


def _measures(figures: Mapping[str, Any], part: str) -> dict[str, dict[str, float]]:
    """The finite exported figures of one result (``part`` ``result``), its phase figures
    (``phases``), load point (``load``) or schedule-check row (``schedule``), by measure
    name; a figure with an interval also gets it as lower and upper values."""
    out: dict[str, dict[str, float]] = {}
    for row in exported(part):
        value = row.value(figures)
        if value is None or row.measure is None:
            continue
        out[row.measure] = {"value": value}
        ci = interval(figures, row.ci) if row.ci else None
        if ci is not None:
            out[row.measure].update(lower_value=ci[0], upper_value=ci[1])
    return out


def schedule_benchmark_name(check: Mapping[str, Any], row: Mapping[str, Any]) -> str:
    """One concurrency of a schedule check: ``<nodeid>@c=<concurrency>``."""
    return f"{check['nodeid']}@c={row['concurrency']}"


def _schedule_rows(report: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(benchmark name, row dict) of every concurrency of every schedule check."""
    return [
        (schedule_benchmark_name(check, row), row)
        for check in report.get("schedule_checks") or []
        for row in check.get("rows") or []
    ]


def bmf(report: Mapping[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format: ``{benchmark: {measure: {"value", "lower_value",
    "upper_value"}}}``; the speedup, the break-even length, the TPOT gain and a schedule
    check's two speedups have bounds (their 95% intervals). The phase figures and the TPOT
    milliseconds are lower-is-better (set a Bencher threshold's upper boundary on them), the
    others higher-is-better."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for result in report.get("results") or []:
        measures = _measures(result, "result")
        measures.update(_measures(_phases(result), "phases"))
        if measures:
            out[benchmark_name(result)] = measures
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


def _extra(figures: Mapping[str, Any], part: str) -> list[str]:
    """The ``extra`` line's parts for one part of a report: each exported figure but the
    headline one, as ``<text> <value>`` in its format (with its 95% interval where it has
    one)."""
    extra = []
    for row in exported(part):
        number = row.value(figures)
        if row.headline or number is None:
            continue
        ci = interval(figures, row.ci) if row.ci else None
        bounds = f" (95% CI {ci[0]:{row.fmt}}-{ci[1]:{row.fmt}})" if ci is not None else ""
        extra.append(f"{row.text} {number:{row.fmt}}{bounds}")
    return extra


def _entry(name: str, figures: Mapping[str, Any], part: str) -> dict[str, Any] | None:
    """github-action-benchmark's entry of one result, load point or schedule-check row: its
    headline figure, ``<name> <measure>``, with its 95% interval as the range; None when
    that figure was not measured."""
    row = headline(part)
    value = row.value(figures)
    if value is None:
        return None
    entry: dict[str, Any] = {"name": f"{name} {row.measure}", "unit": row.unit, "value": value}
    ci = interval(figures, row.ci) if row.ci else None
    if ci is not None:
        entry["range"] = f"95% CI {ci[0]:.3f}-{ci[1]:.3f}"
    entry["extra"] = ""
    return entry


def github_action_benchmark(report: Mapping[str, Any]) -> list[dict[str, Any]]:
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
    for result in report.get("results") or []:
        entry = _entry(benchmark_name(result), result, "result")
        if entry is not None:
            entry["extra"] = "; ".join(_extra(result, "result") + _extra(_phases(result), "phases"))
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
            value, ci = fixed.value(row), interval(row, fixed.ci) if fixed.ci else None
            extra = [f"scheduled k={row.get('scheduled_k')}"]
            if value is not None:
                bounds = f" (95% CI {ci[0]:.3f}-{ci[1]:.3f})" if ci is not None else ""
                extra.append(f"best fixed k={row.get('fixed_k')} {value:.3f}x{bounds}")
            entry["extra"] = "; ".join(extra)
            entries.append(entry)
    return entries


def github_action_benchmark_smaller(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """github-action-benchmark's ``customSmallerIsBetter`` input: the phase figures, lower
    is better, one entry per result and figure, ``<key> break-even-length`` (its range the
    95% interval, its extra line the measured acceptance length it is set against),
    ``<key> draft-share`` and ``<key> verify-cost``. A result without phase figures (a served
    engine, an older report) has none."""
    entries = []
    for result in report.get("results") or []:
        figures = _phases(result)
        for row in exported("phases"):
            value = row.value(figures)
            if value is None or row.higher_is_better:
                continue
            entry = {"name": f"{benchmark_name(result)} {row.measure}",
                     "unit": row.unit, "value": value}  # fmt: skip
            ci = interval(figures, row.ci) if row.ci else None
            if ci is not None:
                entry["range"] = f"95% CI {ci[0]:.3f}-{ci[1]:.3f}"
            measured = finite(figures.get("acceptance_length"))
            if row.name == "break_even_length" and measured is not None:
                entry["extra"] = f"measured acceptance length {measured:.2f}"
            entries.append(entry)
    return entries


def csv_text(report: Mapping[str, Any]) -> str:
    """The :func:`bmf` figures as CSV, one line per benchmark and measure: ``benchmark``,
    ``measure``, ``value`` and the ends of its 95% interval (``lower_value``,
    ``upper_value``; empty without one), for a spreadsheet or pandas."""
    out = io.StringIO()
    lines = csv.writer(out, lineterminator="\n")
    lines.writerow(("benchmark", "measure", "value", "lower_value", "upper_value"))
    for name, measures in bmf(report).items():
        for measure, v in measures.items():
            lines.writerow((name, measure, v["value"], v.get("lower_value", ""),
                            v.get("upper_value", "")))  # fmt: skip
    return out.getvalue()
