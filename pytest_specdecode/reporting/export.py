"""A report's figures in the formats of history trackers: Bencher Metric Format (``bmf``) and
github-action-benchmark's ``customBiggerIsBetter`` list.

Each result is one benchmark named by its key (``nodeid`` or ``nodeid[label]``, as a
comparison matches results). A figure that was not measured (null in the report) is left out;
every number written is finite.
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


#: github-action-benchmark's ``extra`` line: (measure, how it reads, number format).
EXTRA = (
    ("acceptance-rate", "acceptance rate", ".3f"),
    ("mean-acceptance-length", "mean acceptance length", ".2f"),
    ("baseline-tokens-per-second", "baseline tok/s", ".1f"),
    ("speculative-tokens-per-second", "speculative tok/s", ".1f"),
)


def benchmark_name(result: Mapping[str, Any]) -> str:
    """A result's key: ``nodeid``, or ``nodeid[label]`` for a labelled run."""
    label = result.get("label")
    return f"{result['nodeid']}[{label}]" if label else str(result["nodeid"])


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _interval(result: Mapping[str, Any]) -> tuple[float, float] | None:
    """The speedup's 95% interval, when both ends were measured."""
    ci = result.get("speedup_ci") or ()
    ends = [_finite(v) for v in ci] if len(ci) == 2 else [None]
    low, high = ends[0], ends[-1]
    return None if low is None or high is None else (low, high)


def bmf(report: Mapping[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format: ``{benchmark: {measure: {"value", "lower_value",
    "upper_value"}}}``; only the speedup has bounds (its 95% interval)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for result in report.get("results") or []:
        measures: dict[str, dict[str, float]] = {}
        for measure, read in MEASURES.items():
            value = _finite(read(result))
            if value is None:
                continue
            measures[measure] = {"value": value}
            interval = _interval(result) if measure == "speedup" else None
            if interval is not None:
                measures[measure].update(lower_value=interval[0], upper_value=interval[1])
        if measures:
            out[benchmark_name(result)] = measures
    return out


def github_action_benchmark(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """github-action-benchmark's ``customBiggerIsBetter`` input: one entry per result with a
    speedup, ``[{"name": "<key> speedup", "unit": "x", "value", "range", "extra"}]``; the
    range is the 95% interval, the extra line the acceptance and tokens/s of both sides."""
    entries = []
    for result in report.get("results") or []:
        speedup = _finite(result.get("speedup"))
        if speedup is None:
            continue
        entry: dict[str, Any] = {
            "name": f"{benchmark_name(result)} speedup",
            "unit": "x",
            "value": speedup,
        }
        interval = _interval(result)
        if interval is not None:
            entry["range"] = f"95% CI {interval[0]:.3f}-{interval[1]:.3f}"
        extra = [
            f"{text} {value:{fmt}}"
            for measure, text, fmt in EXTRA
            if (value := _finite(MEASURES[measure](result))) is not None
        ]
        entry["extra"] = "; ".join(extra)
        entries.append(entry)
    return entries


#: ``export --format`` name -> the document it writes.
FORMATS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "bmf": bmf,
    "github-action-benchmark": github_action_benchmark,
}
