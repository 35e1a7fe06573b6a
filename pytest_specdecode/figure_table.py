"""The figure table: one row per figure a report carries, with what every reader of it needs
(where it is read from, how tables and lines call it, its unit, direction and number format,
whether the regression rule compares it and on which scale, its export measure and its JUnit
XML property), and one way to read a number or a 95% interval out of report data: from a
typed object (:meth:`Figure.number`, :meth:`Figure.bounds`: a ``Result``, its
``PhaseSummary``, a ``LoadPoint``, a ``ScheduleRow``) or from its dict form
(:meth:`Figure.value`, :func:`interval`).

Its readers ask it: the tolerances (:mod:`pytest_specdecode.tolerances`: which figures can be
compared, on a log scale or not), the summary table's headers and cells, the JUnit XML
properties and the history-tracker exports. A new figure is one row here, plus where it is
measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

#: Where a figure lives in a report: a result (``results[i]``), a result's phase figures
#: (``results[i]["phases"]``), a load test's point (``loads[i]["points"][j]``) or a schedule
#: check's row (``schedule_checks[i]["rows"][j]``).
PARTS = ("result", "phases", "load", "schedule")


@dataclass(frozen=True)
class Figure:
    """One figure of a report."""

    #: its key in the report (``speedup``), also its name in a tolerance (``speedup:5%``)
    name: str
    #: which part of a report holds it (one of :data:`PARTS`)
    part: str
    #: how it reads in lines and the export's ``extra`` line (``baseline tok/s``)
    text: str
    #: its unit (github-action-benchmark's ``unit`` where it has an entry of its own)
    unit: str
    #: a larger value is better (speedups, rates) or worse (costs, latencies)
    higher_is_better: bool
    #: its number format in the export's ``extra`` line
    fmt: str = ".3f"
    #: the keys from its part to its value, when not just ``(name,)``
    path: tuple[str, ...] = ()
    #: a factor its value is shown and exported in (seconds to milliseconds: 1000)
    scale: float = 1.0
    #: the key of its 95% interval in the same part (``speedup_ci``), if it has one
    ci: str | None = None
    #: the summary table's column header, if the table shows it
    header: str | None = None
    #: its number format in the summary table
    cell_fmt: str = ".2f"
    #: the regression rule (``--specdecode-compare-fail``) can compare it
    comparable: bool = False
    #: the regression rule compares it on a log scale (ratios and rates)
    log_scale: bool = False
    #: its measure name in the exports (``acceptance-rate``), None: not exported
    measure: str | None = None
    #: the one figure of its part that github-action-benchmark's bigger-is-better list gives
    #: an entry of its own (the others go on its ``extra`` line)
    headline: bool = False
    #: its JUnit XML property (``specdecode[label].<junit>``), None: not a property; its
    #: interval's ends are ``<ci>_low`` and ``<ci>_high``
    junit: str | None = None
    #: the decimals its JUnit XML property is rounded to
    digits: int = 4

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys from its part to its value."""
        return self.path or (self.name,)

    def read(self, data: Mapping[str, Any]) -> Any:
        """Its raw value in its part's dict form (None where a key is missing)."""
        value: Any = data
        for key in self.keys:
            value = value.get(key) if isinstance(value, Mapping) else None
        return value

    def value(self, data: Mapping[str, Any]) -> float | None:
        """Its finite value in its part's dict form, in its :attr:`scale`; None when not
        measured."""
        value = finite(self.read(data))
        return value if value is None or self.scale == 1 else finite(value * self.scale)

    def attribute(self, obj: Any) -> Any:
        """Its raw value on its part's typed object (a ``Result``:
        ``result.baseline.tokens_per_second``; a ``PhaseSummary``, a ``LoadPoint``: its
        summary's percentiles by the int ``50``; a ``ScheduleRow``); None where it is
        missing."""
        for key in self.keys:
            if obj is None:
                return None
            if isinstance(obj, Mapping):
                obj = obj.get(int(key)) if key.isdigit() and int(key) in obj else obj.get(key)
            else:
                obj = getattr(obj, key, None)
        return obj

    def number(self, obj: Any) -> float | None:
        """Its finite value on its part's typed object, in its :attr:`scale`; None when not
        measured (None or ``nan`` there)."""
        value = finite(self.attribute(obj))
        return value if value is None or self.scale == 1 else finite(value * self.scale)

    def bounds(self, obj: Any) -> tuple[float, float] | None:
        """Its 95% interval on its part's typed object (both ends finite); None without one."""
        return None if self.ci is None else pair(getattr(obj, self.ci, None))


#: Every figure, by part; within a part in the order the exports and the tolerances list them.
FIGURE_TABLE: tuple[Figure, ...] = (
    # --- a result -------------------------------------------------------------------------
    Figure("speedup", "result", "speedup", "x", True, ".3f", ci="speedup_ci",
           header="speedup [95% CI]", comparable=True, log_scale=True, measure="speedup",
           headline=True, junit="speedup"),
    Figure("acceptance_rate", "result", "acceptance rate", "accepted / draft tokens", True,
           ".3f", header="accept rate", comparable=True, measure="acceptance-rate",
           junit="acceptance_rate"),
    Figure("mean_acceptance_length", "result", "mean acceptance length", "tokens/step", True,
           ".2f", header="accept len", comparable=True, measure="mean-acceptance-length",
           junit="mean_acceptance_length"),
    Figure("baseline_tokens_per_second", "result", "baseline tok/s", "tok/s", True, ".1f",
           path=("baseline", "tokens_per_second"), header="base tok/s", cell_fmt=".1f",
           comparable=True, log_scale=True, measure="baseline-tokens-per-second",
           junit="baseline_tokens_per_second", digits=2),
    Figure("speculative_tokens_per_second", "result", "speculative tok/s", "tok/s", True,
           ".1f", path=("speculative", "tokens_per_second"), header="spec tok/s",
           cell_fmt=".1f", comparable=True, log_scale=True,
           measure="speculative-tokens-per-second", junit="speculative_tokens_per_second",
           digits=2),
    Figure("match_rate", "result", "match rate", "share of prompts", True, header="match",
           comparable=True, junit="match_rate"),
    Figure("alpha", "result", "alpha", "per-token acceptance", True, header="alpha"),
    Figure("efficiency", "result", "efficiency", "of the tokens per step allowed", True,
           header="eff."),
    Figure("cost_ratio", "result", "cost ratio", "draft step / target step", False,
           header="cost ratio"),
    Figure("extra_memory_gib", "result", "extra memory", "GiB", False, header="extra GiB"),
    Figure("baseline_prefix_cache_hit_rate", "result", "baseline cache hit rate",
           "cached / looked-up prompt tokens", True, ".3f",
           path=("baseline", "prefix_cache_hit_rate"), header="base cache hit",
           measure="baseline-prefix-cache-hit-rate", junit="baseline_prefix_cache_hit_rate"),
    Figure("speculative_prefix_cache_hit_rate", "result", "speculative cache hit rate",
           "cached / looked-up prompt tokens", True, ".3f",
           path=("speculative", "prefix_cache_hit_rate"), header="spec cache hit",
           measure="speculative-prefix-cache-hit-rate",
           junit="speculative_prefix_cache_hit_rate"),
    Figure("prefix_cache_gap", "result", "cache hit rate gap", "speculative - baseline", True,
           ".3f", ci="prefix_cache_gap_ci", measure="prefix-cache-gap",
           junit="prefix_cache_gap"),
    # --- a result's phase figures ---------------------------------------------------------
    Figure("break_even_length", "phases", "break-even length", "tokens/step", False, ".2f",
           ci="break_even_ci", measure="break-even-length", junit="break_even_length"),
    Figure("draft_share", "phases", "draft share", "share of a step", False, ".3f",
           measure="draft-share", junit="draft_share"),
    Figure("verify_cost", "phases", "verify cost", "baseline forward passes", False, ".2f",
           measure="verify-cost"),
    # --- a load test's point --------------------------------------------------------------
    Figure("tpot_speedup", "load", "TPOT gain", "x", True, ci="tpot_speedup_ci",
           measure="tpot-speedup", headline=True),
    Figure("baseline_tpot_p50", "load", "baseline p50 TPOT ms", "ms", False, ".1f",
           path=("baseline", "tpot", "50"), scale=1000, measure="baseline-tpot-p50-ms"),
    Figure("speculative_tpot_p50", "load", "speculative p50 TPOT ms", "ms", False, ".1f",
           path=("speculative", "tpot", "50"), scale=1000, measure="speculative-tpot-p50-ms"),
    Figure("baseline_goodput", "load", "baseline goodput req/s", "req/s", True, ".2f",
           path=("baseline", "goodput"), measure="baseline-goodput"),
    Figure("speculative_goodput", "load", "speculative goodput req/s", "req/s", True, ".2f",
           path=("speculative", "goodput"), measure="speculative-goodput"),
    Figure("baseline_prefix_cache_hit_rate", "load", "baseline cache hit rate",
           "cached / looked-up prompt tokens", True, ".3f",
           measure="baseline-load-cache-hit-rate"),
    Figure("speculative_prefix_cache_hit_rate", "load", "speculative cache hit rate",
           "cached / looked-up prompt tokens", True, ".3f",
           measure="speculative-load-cache-hit-rate"),
    Figure("prefix_cache_gap", "load", "cache hit rate gap", "speculative - baseline", True,
           ".3f", ci="prefix_cache_gap_ci", measure="load-cache-hit-gap"),
    # --- a schedule check's row -----------------------------------------------------------
    Figure("scheduled_speedup", "schedule", "scheduled speedup", "x", True,
           ci="scheduled_speedup_ci", measure="scheduled-speedup", headline=True),
    Figure("fixed_speedup", "schedule", "best fixed k's speedup", "x", True,
           ci="fixed_speedup_ci", measure="fixed-speedup"),
)  # fmt: skip


def figures(part: str | None = None, which: Callable[[Figure], Any] | None = None) -> list[Figure]:
    """The rows of one part (all parts: None), in table order; only those ``which`` accepts."""
    return [
        f for f in FIGURE_TABLE if (part is None or f.part == part) and (which is None or which(f))
    ]


def figure(name: str, part: str = "result") -> Figure:
    """The row of one figure; KeyError for a figure the table does not have."""
    found = next((f for f in FIGURE_TABLE if f.name == name and f.part == part), None)
    if found is None:
        raise KeyError(f"no figure {name!r} in the figure table's {part!r} part")
    return found


def comparable() -> list[Figure]:
    """The figures the regression rule can compare, in the order tolerances list them."""
    return figures(which=lambda f: f.comparable)


def exported(part: str) -> list[Figure]:
    """The figures of one part the exports write, in their order."""
    return figures(part, lambda f: f.measure is not None)


def headline(part: str) -> Figure:
    """The figure of ``part`` with an entry of its own in github-action-benchmark's list."""
    return next(f for f in exported(part) if f.headline)


def header(name: str) -> str:
    """The summary table's column header of a result's figure."""
    text = figure(name).header
    if text is None:
        raise KeyError(f"the summary table has no column for {name!r}")
    return text


# --- numbers in report data -------------------------------------------------------------------


def real(value: Any) -> float | None:
    """A number in report data (not a bool, not text) as a float; None otherwise. NaN and the
    infinities stay (a file this package writes has neither: see :func:`finite`)."""
    if isinstance(value, Real) and not isinstance(value, bool):
        return float(value)
    return None


def finite(value: Any) -> float | None:
    """A finite number in report data as a float; None otherwise (null, text, a bool, NaN or
    an infinity, e.g. in a file written by hand)."""
    number = real(value)
    return number if number is not None and math.isfinite(number) else None


def ends(
    data: Mapping[str, Any], key: str, read: Callable[[Any], float | None] = finite
) -> tuple[float | None, float | None]:
    """The two ends of the 95% interval ``data[key]``, each read with ``read`` (None where it
    is not a number); (None, None) when ``data[key]`` is not a pair."""
    return pair_ends(data.get(key), read)


def pair_ends(
    ci: Any, read: Callable[[Any], float | None] = finite
) -> tuple[float | None, float | None]:
    """The two ends of the 95% interval ``ci`` (a pair, e.g. a typed object's
    ``speedup_ci``), each read with ``read``; (None, None) when ``ci`` is not a pair."""
    if not isinstance(ci, Sequence) or isinstance(ci, str) or len(ci) != 2:
        return None, None
    return read(ci[0]), read(ci[1])


def pair(ci: Any, read: Callable[[Any], float | None] = finite) -> tuple[float, float] | None:
    """The 95% interval ``ci`` (two numbers, each read with ``read``); None unless both ends
    are numbers."""
    low, high = pair_ends(ci, read)
    return None if low is None or high is None else (low, high)


def interval(
    data: Mapping[str, Any], key: str, read: Callable[[Any], float | None] = finite
) -> tuple[float, float] | None:
    """The 95% interval ``data[key]`` (two numbers, each read with ``read``); None unless
    both ends are numbers."""
    return pair(data.get(key), read)
