"""A report's figures in the formats of history trackers: Bencher Metric Format (``bmf``),
github-action-benchmark's ``customBiggerIsBetter`` list and its ``customSmallerIsBetter`` list
of the phase figures (``github-action-benchmark-smaller``).

Each result is one benchmark named by its key (``nodeid`` or ``nodeid[label]``, as a
comparison matches results), its phase figures (break-even length with its interval, draft
share, verification cost: lower is better) with it where it has them; each arrival rate of a
load test is one more, named ``<key>@<rate>req/s`` (``<key>@all-at-once`` for an infinite
rate); each concurrency of a schedule check is one more, named ``<nodeid>@c=<concurrency>``.
A figure that was not measured (null in the report) is left out; every number written is
finite.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

#: BMF measures (Bencher creates a measure the first time its name is seen): name -> how to
#: read it from a result (every one is higher-is-better).
MEASURES: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "speedup": lambda r: r.get("speedup"),
    "acceptance-rate": lambda r: r.get("acceptance_rate"),
    "mean-acceptance-length": lambda r: r.get("mean_acceptance_length"),
    "baseline-tokens-per-second": lambda r: (r.get("baseline") or {}).get("tokens_per_second"),
    "speculative-tokens-per-second": lambda r: (r.get("speculative") or {}).get(
        "tokens_per_second"
    ),
}


#: BMF measures of a result's phase figures (``results[i]["phases"]``), all lower-is-better
#: (set a Bencher threshold's upper boundary on them): the break-even acceptance length L*,
#: the draft's share of a speculative decode step and the verification pass in baseline
#: forward passes.
PHASE_MEASURES: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "break-even-length": lambda p: p.get("break_even_length"),
    "draft-share": lambda p: p.get("draft_share"),
    "verify-cost": lambda p: p.get("verify_cost"),
}
#: Each phase measure's 95% interval in the phase figures.
PHASE_BOUNDS = {"break-even-length": "break_even_ci"}


def _phases(result: Mapping[str, Any]) -> Mapping[str, Any]:
    """A result's phase figures; {} without them (a served engine, an older report)."""
    value = result.get("phases")
    return value if isinstance(value, Mapping) else {}


#: github-action-benchmark's ``extra`` line: (measure, how it reads, number format).
EXTRA = (
    ("acceptance-rate", "acceptance rate", ".3f"),
    ("mean-acceptance-length", "mean acceptance length", ".2f"),
    ("baseline-tokens-per-second", "baseline tok/s", ".1f"),
    ("speculative-tokens-per-second", "speculative tok/s", ".1f"),
)
#: The ``extra`` line's phase figures: (measure, how it reads, number format). Only in the
#: extra line there: that list is ``customBiggerIsBetter`` and these are lower-is-better (an
#: entry would alert when they improve); their entries are in
#: :func:`github_action_benchmark_smaller`.
PHASE_EXTRA = (
    ("break-even-length", "break-even length", ".2f"),
    ("draft-share", "draft share", ".3f"),
    ("verify-cost", "verify cost", ".2f"),
)


def benchmark_name(result: Mapping[str, Any]) -> str:
    """A result's key: ``nodeid``, or ``nodeid[label]`` for a labelled run."""
    label = result.get("label")
    return f"{result['nodeid']}[{label}]" if label else str(result["nodeid"])


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _interval(result: Mapping[str, Any], key: str = "speedup_ci") -> tuple[float, float] | None:
    """The speedup's (or the figure ``key`` names) 95% interval, when both ends were
    measured."""
    ci = result.get(key) or ()
    ends = [_finite(v) for v in ci] if len(ci) == 2 else [None]
    low, high = ends[0], ends[-1]
    return None if low is None or high is None else (low, high)


#: BMF measures of a load test's point (one arrival rate): name -> how to read it from the
#: point's dict. The TPOT gain and goodput are higher-is-better, the TPOT milliseconds
#: lower-is-better (set a Bencher threshold's upper boundary on them).
LOAD_MEASURES: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "tpot-speedup": lambda p: p.get("tpot_speedup"),
    "baseline-tpot-p50-ms": lambda p: _ms((p.get("baseline") or {}).get("tpot")),
    "speculative-tpot-p50-ms": lambda p: _ms((p.get("speculative") or {}).get("tpot")),
    "baseline-goodput": lambda p: (p.get("baseline") or {}).get("goodput"),
    "speculative-goodput": lambda p: (p.get("speculative") or {}).get("goodput"),
}


def _ms(percentiles: Any) -> Any:
    """A latency's p50 in milliseconds (None when not measured)."""
    value = _finite((percentiles or {}).get("50"))
    return None if value is None else value * 1000


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


def _measures(
    figures: Mapping[str, Any],
    measures: Mapping[str, Callable[[Mapping[str, Any]], Any]],
    bounds: Mapping[str, str],
) -> dict[str, dict[str, float]]:
    """The finite ``measures`` of one result, load point or schedule-check row; a measure
    named in ``bounds`` also gets its 95% interval (read from ``figures[bounds[measure]]``) as
    lower and upper values."""
    out: dict[str, dict[str, float]] = {}
    for measure, read in measures.items():
        value = _finite(read(figures))
        if value is None:
            continue
        out[measure] = {"value": value}
        interval = _interval(figures, bounds[measure]) if measure in bounds else None
        if interval is not None:
            out[measure].update(lower_value=interval[0], upper_value=interval[1])
    return out


#: BMF measures of a schedule check's row (one concurrency), both higher-is-better.
SCHEDULE_MEASURES: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "scheduled-speedup": lambda r: r.get("scheduled_speedup"),
    "fixed-speedup": lambda r: r.get("fixed_speedup"),
}
#: Each measure's 95% interval in a schedule check's row.
SCHEDULE_BOUNDS = {
    "scheduled-speedup": "scheduled_speedup_ci",
    "fixed-speedup": "fixed_speedup_ci",
}


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
    check's two speedups have bounds (their 95% intervals)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for result in report.get("results") or []:
        measures = _measures(result, MEASURES, {"speedup": "speedup_ci"})
        measures.update(_measures(_phases(result), PHASE_MEASURES, PHASE_BOUNDS))
        if measures:
            out[benchmark_name(result)] = measures
    for name, point in _load_points(report):
        measures = _measures(point, LOAD_MEASURES, {"tpot-speedup": "tpot_speedup_ci"})
        if measures:
            out[name] = measures
    for name, row in _schedule_rows(report):
        # a side not run (where the schedule is off) is left out
        measures = _measures(row, SCHEDULE_MEASURES, SCHEDULE_BOUNDS)
        if measures:
            out[name] = measures
    return out


#: github-action-benchmark's ``extra`` line of a load point: (measure, how it reads, format).
LOAD_EXTRA = (
    ("baseline-tpot-p50-ms", "baseline p50 TPOT ms", ".1f"),
    ("speculative-tpot-p50-ms", "speculative p50 TPOT ms", ".1f"),
    ("baseline-goodput", "baseline goodput req/s", ".2f"),
    ("speculative-goodput", "speculative goodput req/s", ".2f"),
)


def _entry(
    name: str,
    figures: Mapping[str, Any],
    value: float,
    ci: str,
    measures: Mapping[str, Callable[[Mapping[str, Any]], Any]],
    extras: tuple[tuple[str, str, str], ...],
) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "unit": "x", "value": value}
    interval = _interval(figures, ci)
    if interval is not None:
        entry["range"] = f"95% CI {interval[0]:.3f}-{interval[1]:.3f}"
    extra = [
        f"{text} {number:{fmt}}"
        for measure, text, fmt in extras
        if (number := _finite(measures[measure](figures))) is not None
    ]
    entry["extra"] = "; ".join(extra)
    return entry


def github_action_benchmark(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """github-action-benchmark's ``customBiggerIsBetter`` input: one entry per result with a
    speedup, ``[{"name": "<key> speedup", "unit": "x", "value", "range", "extra"}]``; the
    range is the 95% interval, the extra line the acceptance and tokens/s of both sides, then
    the phase figures where the result has them (the break-even length with its interval).
    Each load point with a TPOT gain adds ``<key>@<rate>req/s tpot-speedup``, its extra line
    the p50 TPOT and goodput of both sides; each concurrency a schedule check ran the
    scheduled engine at adds ``<nodeid>@c=<concurrency> scheduled-speedup``, its extra line
    the scheduled k and the best fixed k's speedup."""
    entries = []
    for result in report.get("results") or []:
        speedup = _finite(result.get("speedup"))
        if speedup is not None:
            name = f"{benchmark_name(result)} speedup"
            entry = _entry(name, result, speedup, "speedup_ci", MEASURES, EXTRA)
            figures = _phases(result)
            extra = [entry["extra"]] if entry["extra"] else []
            for measure, text, fmt in PHASE_EXTRA:
                number = _finite(PHASE_MEASURES[measure](figures))
                if number is None:
                    continue
                ci = _interval(figures, PHASE_BOUNDS[measure]) if measure in PHASE_BOUNDS else None
                bounds = f" (95% CI {ci[0]:{fmt}}-{ci[1]:{fmt}})" if ci is not None else ""
                extra.append(f"{text} {number:{fmt}}{bounds}")
            entry["extra"] = "; ".join(extra)
            entries.append(entry)
    for name, point in _load_points(report):
        gain = _finite(point.get("tpot_speedup"))
        if gain is not None:
            entries.append(_entry(f"{name} tpot-speedup", point, gain, "tpot_speedup_ci",
                                  LOAD_MEASURES, LOAD_EXTRA))  # fmt: skip
    for name, row in _schedule_rows(report):
        scheduled = _finite(row.get("scheduled_speedup"))
        if scheduled is not None:
            entry = _entry(f"{name} scheduled-speedup", row, scheduled, "scheduled_speedup_ci",
                           {}, ())  # fmt: skip
            fixed, ci = _finite(row.get("fixed_speedup")), _interval(row, "fixed_speedup_ci")
            extra = [f"scheduled k={row.get('scheduled_k')}"]
            if fixed is not None:
                bounds = f" (95% CI {ci[0]:.3f}-{ci[1]:.3f})" if ci is not None else ""
                extra.append(f"best fixed k={row.get('fixed_k')} {fixed:.3f}x{bounds}")
            entry["extra"] = "; ".join(extra)
            entries.append(entry)
    return entries


#: Units of the phase measures in github-action-benchmark's smaller-is-better list.
PHASE_UNITS = {
    "break-even-length": "tokens/step",
    "draft-share": "share of a step",
    "verify-cost": "baseline forward passes",
}


def github_action_benchmark_smaller(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """github-action-benchmark's ``customSmallerIsBetter`` input: the phase figures, lower
    is better, one entry per result and figure, ``<key> break-even-length`` (its range the
    95% interval, its extra line the measured acceptance length it is set against),
    ``<key> draft-share`` and ``<key> verify-cost``. A result without phase figures (a served
    engine, an older report) has none."""
    entries = []
    for result in report.get("results") or []:
        figures = _phases(result)
        for measure, read in PHASE_MEASURES.items():
            value = _finite(read(figures))
            if value is None:
                continue
            entry = {"name": f"{benchmark_name(result)} {measure}",
                     "unit": PHASE_UNITS[measure], "value": value}  # fmt: skip
            ci = _interval(figures, PHASE_BOUNDS[measure]) if measure in PHASE_BOUNDS else None
            if ci is not None:
                entry["range"] = f"95% CI {ci[0]:.3f}-{ci[1]:.3f}"
            measured = _finite(figures.get("acceptance_length"))
            if measure == "break-even-length" and measured is not None:
                entry["extra"] = f"measured acceptance length {measured:.2f}"
            entries.append(entry)
    return entries


#: ``export --format`` name -> the document it writes.
FORMATS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "bmf": bmf,
    "github-action-benchmark": github_action_benchmark,
    "github-action-benchmark-smaller": github_action_benchmark_smaller,
}
