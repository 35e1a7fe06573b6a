"""The "worth it?" checklist: the talk's questions answered from a session's figures.

:func:`checklists` reads a :class:`~pytest_specdecode.baselines.report.Report` (its results,
sweeps, loads, rankings and schedule checks; a ``--specdecode-report`` file read with
``Report.from_dict``) and, for each target and proposer measured, answers each
question yes, no or unknown with the figure behind it:

* spare memory: what the draft (or head) costs, and the KV cache left per sequence at the
  largest batch measured (a request needs at least ``max_tokens`` slots beside its prompt);
* batch size: where the gain ends (a sweep's crossover, or one test's runs at several batch
  sizes), and a sweep's k schedule (which k at which batch size, and whether its
  ``check_schedule`` held);
* workload: the speedup and acceptance of each category;
* traffic: the arrival rate up to which speculation lowers p50 TPOT (``specdecode.load``);
* context: long prompts against short ones (runs labelled or categorised ``long``/``short``);
* choice of draft: from inside the speculative engine, the draft's share of each step, the
  cost ratio and the verification pass's cost, and whether the measured acceptance length
  clears the break-even length (a served engine has no phase figures: it says so);
* batch size also quotes the break-even length against the measured acceptance length at each
  concurrency, where the runs have phase figures;
* choice: where the proposer ranked, when ``choose_draft`` compared it with others;
* prefix cache kept: whether the speculative side's prefix-cache hit rate is clearly below
  the baseline's on the same requests (then its speedup mixes two effects).

A pure function of the report: it works on a saved report as well as in the plugin.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..baselines.report import Report, ReportEntry
from ..engines.methods import NO_MODEL, is_head
from ..figure_table import finite, real
from ..measure.cache import cache_note, clearly_below, gap_text, rates_text
from ..measure.choice import Candidate, Ranking
from ..measure.judge import verdict_of
from ..measure.kschedule import KSchedule, ScheduleCheck
from ..measure.load import LoadPoint, LoadResult, ms_text, rate_text
from ..measure.phases import PhaseSummary
from ..measure.result import Result
from ..measure.stats import percentile
from ..measure.sweep import Sweep
from ..measure.verdict import Verdict, by_interval
from ..names import display_name
from .fit import wrap
from .phases import (
    NOT_RECORDED,
    explanation,
    names_yield,
    no_phases,
    pair,
    pays,
    phases,
    step_yield,
    with_interval,
)

YES, NO, UNKNOWN = "yes", "no", "unknown"

#: extra memory below this is "none to speak of"
NEGLIGIBLE_GIB = 0.05

_LONG = re.compile(r"\blong\b|long[_ -]?context", re.IGNORECASE)
_SHORT = re.compile(r"\bshort\b", re.IGNORECASE)

#: What the questions read of a run: its result (a report entry's, a sweep point's).
Row = Result


@dataclass(frozen=True)
class Line:
    """One question: its answer (``yes``, ``no`` or ``unknown``) and the figure behind it."""

    question: str
    answer: str
    figure: str

    def to_dict(self) -> dict[str, str]:
        return {"question": self.question, "answer": self.answer, "figure": self.figure}


@dataclass(frozen=True)
class Checklist:
    """The checklist of one target and proposer (method, plus the draft where there is one);
    ``summary`` is its short answer in words."""

    target: str
    method: str
    draft: str | None
    lines: tuple[Line, ...]
    summary: str

    @property
    def proposer(self) -> str:
        return f"{self.method} ({display_name(self.draft)})" if self.draft else self.method

    @property
    def title(self) -> str:
        return f"{self.proposer} on {display_name(self.target)}"

    def text(self, width: int | None = None) -> list[str]:
        """Plain-text lines: the title and summary, then one line per question; with a
        ``width`` (a terminal's), each wrapped to it under its own text."""
        column = max((len(line.question) for line in self.lines), default=0)
        out = wrap(f"{self.title}: {self.summary}", width)
        for line in self.lines:
            text = f"  {line.answer.upper():<7} {line.question:<{column}}  {line.figure}"
            out += wrap(text, width, 2 + 8 + column + 2)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "method": self.method,
            "draft": self.draft,
            "proposer": self.proposer,
            "summary": self.summary,
            "lines": [line.to_dict() for line in self.lines],
        }


def checklists(report: Report) -> list[Checklist]:
    """One :class:`Checklist` per (target, method, draft) measured in ``report``, in the
    order they first appear; a proposer measured only under traffic has the traffic line
    alone."""
    results = [entry.result for entry in report.results]
    groups: dict[tuple[str, str, str | None], list[Row]] = defaultdict(list)
    for r in results:
        groups[_group(r)].append(r)
    loads: dict[tuple[str, str, str | None], list[LoadResult]] = defaultdict(list)
    for load in report.loads:
        if load.points:
            loads[_load_group(load)].append(load)
    sweeps = list(report.sweeps)
    checks = [c for c in report.schedule_checks if c.rows]
    rankings = list(report.rankings)
    served = bool(report.environment.get("served"))
    by_key = {r.key: r for r in results}
    out = []
    for key, rows in groups.items():
        nodeids = {r.nodeid for r in rows}
        mine = [s for s in sweeps if s.nodeid in nodeids]
        batch_size = _scheduled(_batch(rows, mine), mine, checks)
        batch_size = _break_even(batch_size, _curves(rows, mine))
        answers = [_memory(rows), batch_size, _traffic(loads.get(key, []))]
        answers += _workloads(rows)
        answers += [_context(rows), _draft(rows, served)]
        answers += _cache(rows)
        answers += _choices(key, rankings, by_key)
        lines = tuple(a.line for a in answers)
        out.append(Checklist(key[0], key[1], key[2], lines, _summary(answers)))
    for key, alone in loads.items():
        if key not in groups:
            answer = _traffic(alone)
            out.append(Checklist(key[0], key[1], key[2], (answer.line,), _summary([answer])))
    return out


@dataclass(frozen=True)
class _Answer:
    line: Line
    phrase: str | None = None  # its part of the summary, if any
    lead: str = ""  # words shared by the parts that follow one another ("worth it for")
    order: tuple[int, float] = (0, 0.0)  # where that part goes (lower first)


def _group(r: Row) -> tuple[str, str, str | None]:
    return r.target, r.method, r.draft or None


def _summary(answers: Sequence[_Answer]) -> str:
    parts: list[tuple[str, list[str]]] = []
    for a in sorted(answers, key=lambda a: a.order):
        if not a.phrase:
            continue
        if a.lead and parts and parts[-1][0] == a.lead:
            parts[-1][1].append(a.phrase)
        else:
            parts.append((a.lead, [a.phrase]))
    if not parts:
        return "nothing decisive measured"
    return "; ".join(f"{lead} {', '.join(p)}" if lead else p[0] for lead, p in parts)


# --- figures of one result -------------------------------------------------------------------


def _ci(r: Row | Candidate) -> tuple[float | None, float | None]:
    """The speedup's interval ends, each a number or None (unknown)."""
    low, high = r.speedup_ci
    return finite(low), finite(high)


def _speedup(r: Row | Candidate) -> float:
    value = finite(r.speedup)
    return value if value is not None else float("-inf")


def _x(value: Any) -> str:
    number = finite(value)
    return "-" if number is None else f"{number:.2f}x"


def _figure(r: Row | Candidate | None) -> str:
    """Speedup with its interval: ``1.85x [1.61-2.13]``."""
    if r is None:
        return "-"
    low, high = _ci(r)
    if low is None and high is None:
        return _x(r.speedup)
    lo = "-" if low is None else f"{low:.2f}"
    hi = "-" if high is None else f"{high:.2f}"
    return f"{_x(r.speedup)} [{lo}-{hi}]"


def batch(r: ReportEntry | Result) -> int | None:
    """Requests in flight: the run's concurrency, or all its prompts at once."""
    result = r.result if isinstance(r, ReportEntry) else r
    value = result.concurrency or result.num_prompts
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _name(r: Row | LoadResult) -> str:
    test = r.nodeid.rsplit("::", 1)[-1]
    return f"{test} [{r.label}]" if r.label else test


def spread(values: Iterable[Any]) -> tuple[float, float, float] | None:
    """(p10, p50, p90) of the numbers in ``values`` (linear interpolation between order
    statistics); None when there are none."""
    data = sorted(float(v) for v in values if real(v) is not None)
    if not data:
        return None
    return percentile(data, 10), percentile(data, 50), percentile(data, 90)


# --- the questions ---------------------------------------------------------------------------

SPARE_MEMORY = "spare memory"
BATCH_SIZE = "batch size"
CONTEXT = "context"


def _memory(rows: Sequence[Row]) -> _Answer:
    extras = [v for v in (finite(r.extra_memory_gib) for r in rows) if v is not None]
    method = rows[0].method
    if extras:
        what = "proposer" if method in NO_MODEL else "head" if is_head(method) else "draft"
        cost = f"the {what} costs {max(extras):.2f} GiB"
    elif method in NO_MODEL:
        cost = f"{method} has no draft model (extra memory not measured)"
    else:
        cost = "extra memory not measured"
    with_kv = [r for r in rows if _kv(r, "speculative") is not None and batch(r)]
    if not with_kv:
        if method in NO_MODEL and not extras:
            figure = f"{method} has no draft model: no draft weights or KV cache to hold"
            return _Answer(Line(SPARE_MEMORY, YES, f"{figure} (extra memory not measured)"))
        if extras and max(extras) <= NEGLIGIBLE_GIB:
            return _Answer(Line(SPARE_MEMORY, YES, f"{cost}: none to speak of"))
        return _Answer(Line(SPARE_MEMORY, UNKNOWN, f"{cost}; KV cache capacity not reported"))
    r = max(with_kv, key=lambda row: batch(row) or 0)
    spec_kv, base_kv, size = _kv(r, "speculative"), _kv(r, "baseline"), batch(r)
    assert spec_kv is not None and size
    per_sequence = spec_kv // size
    need = int(finite(r.max_tokens) or 0)
    kv = f"KV cache {spec_kv:,} tokens"
    if base_kv:
        kv = f"KV cache {base_kv:,} -> {spec_kv:,} tokens ({spec_kv / base_kv - 1:+.0%})"
    figure = (
        f"{cost}; {kv}: {per_sequence:,} per sequence at batch {size} (a request needs "
        f"{need} + its prompt)"
    )
    if per_sequence < need:
        return _Answer(
            Line(SPARE_MEMORY, NO, figure),
            f"too little KV cache left at batch {size}",
            order=(5, 0.0),
        )
    return _Answer(Line(SPARE_MEMORY, YES, figure))


def _kv(r: Row, side: str) -> int | None:
    value = finite(getattr(r, side).kv_cache_tokens)
    return int(value) if value is not None and value > 0 else None


@dataclass(frozen=True)
class _Curve:
    """Speedup against batch size for one test: the best run at each batch, smallest first."""

    nodeid: str
    points: tuple[tuple[int, Row], ...]
    crossover: int | None  # a sweep's own, when it names one


def _curves(rows: Sequence[Row], sweeps: Sequence[Sweep]) -> list[_Curve]:
    curves = []
    swept = set()
    for s in sweeps:
        best: dict[int, Row] = {}
        for _, c, p in s.points:
            if c not in best or _speedup(p) > _speedup(best[c]):
                best[c] = p
        if len(best) > 1:
            curves.append(_Curve(s.nodeid, tuple(sorted(best.items())), s.crossover()))
            swept.add(s.nodeid)
    by_test: dict[str, dict[int, Row]] = defaultdict(dict)
    for r in rows:
        nodeid, size = r.nodeid, batch(r)
        if nodeid in swept or size is None:
            continue
        points = by_test[nodeid]
        if size not in points or _speedup(r) > _speedup(points[size]):
            points[size] = r
    for nodeid, points in by_test.items():
        if len(points) > 1:
            curves.append(_Curve(nodeid, tuple(sorted(points.items())), None))
    return curves


def _batch(rows: Sequence[Row], sweeps: Sequence[Sweep]) -> _Answer:
    curves = _curves(rows, sweeps)
    if not curves:
        sizes = sorted({b for b in (batch(r) for r in rows) if b is not None})
        shown = ", ".join(str(b) for b in sizes) or "-"
        figure = (
            f"measured only at batch {shown} in each test; measure one test at several "
            "concurrencies (specdecode.sweep) to find where the gain ends"
        )
        return _Answer(Line(BATCH_SIZE, UNKNOWN, figure))
    ends: list[tuple[int, str]] = []
    lasts: list[tuple[int, str, bool]] = []
    for curve in curves:
        test = curve.nodeid.rsplit("::", 1)[-1]
        points = curve.points
        end = curve.crossover
        if end is None:
            end = next(
                (c for c, p in points if by_interval(p.speedup_ci) is Verdict.NOT_WORTH), None
            )
        if end is not None:
            at = dict(points).get(end)
            shown = f" ({_figure(at)})" if at is not None else ""
            before = [(c, p) for c, p in points if c < end]
            if before:
                c, p = before[-1]
                figure = f"gone by batch {end}{shown} in {test}; {_figure(p)} at batch {c}"
                ends.append((end, figure))
            else:
                ends.append((end, f"slower already at batch {end}{shown} in {test}"))
            continue
        c, p = points[-1]
        first_c, first = points[0]
        figure = (
            f"{_figure(p)} at batch {c}, the largest measured in {test} ({_figure(first)} at "
            f"batch {first_c})"
        )
        lasts.append((c, figure, by_interval(p.speedup_ci) is Verdict.WORTH))
    if ends:
        end, figure = min(ends)
        return _Answer(Line(BATCH_SIZE, NO, figure), f"gone by batch {end}", order=(3, 0.0))
    c, figure, pays = max(lasts)
    if pays:
        best = max((p for curve in curves for size, p in curve.points if size == c), key=_speedup)
        phrase = f"still {_x(best.speedup)} at batch {c}"
        return _Answer(Line(BATCH_SIZE, YES, f"still {figure}"), phrase, order=(3, 0.0))
    return _Answer(Line(BATCH_SIZE, UNKNOWN, f"{figure}: the interval at batch {c} contains 1.0"))


def _schedule(sweep: Sweep) -> KSchedule | None:
    """A sweep's k schedule (None for a sweep that measured nothing)."""
    return sweep.schedule() if sweep.points else None


def _checked(check: ScheduleCheck) -> str:
    """Whether a schedule check held: where, or the rows where it did not."""
    if check.holds:
        where = ", ".join(f"c={row.concurrency}" for row in check.rows)
        return f"check_schedule held at {where} (within {check.tolerance:.0%} of the best fixed k)"
    return "check_schedule did not hold: " + "; ".join(row.describe() for row in check.failing)


def _scheduled(
    answer: _Answer, sweeps: Sequence[Sweep], checks: Sequence[ScheduleCheck]
) -> _Answer:
    """The batch-size answer led by each sweep's k schedule (as ``KSchedule.summary()`` says
    it) and whether its check held. Where the curves leave the answer unknown, the schedule
    gives it: yes where some batch size's chosen k pays (its interval above 1.0), no where
    speculation is off at every batch size measured."""
    texts, schedules = [], []
    for sweep in sweeps:
        schedule = _schedule(sweep)
        if schedule is None:
            continue
        schedules.append(schedule)
        test = sweep.nodeid.rsplit("::", 1)[-1]
        text = f"{schedule.summary()} in {test}"
        mine = [c for c in checks if c.schedule.nodeid == schedule.nodeid]
        texts.append("; ".join([text, *(_checked(c) for c in mine)]))
    if not schedules:
        return answer
    line = answer.line
    if line.answer != UNKNOWN:
        figure = "; ".join([*texts, line.figure])
        return _Answer(Line(BATCH_SIZE, line.answer, figure), answer.phrase, answer.lead,
                       answer.order)  # fmt: skip
    figure = "; ".join(texts)
    choices = [c for schedule in schedules for c in schedule.choices]
    paying = [c for c in choices if c.k and c.speedup_ci[0] > 1.0]
    if paying:
        top = max(paying, key=lambda c: (c.concurrency, c.speedup))
        phrase = f"still {_x(top.speedup)} at batch {top.concurrency} with k={top.k}"
        return _Answer(Line(BATCH_SIZE, YES, figure), phrase, order=(3, 0.0))
    if all(c.k == 0 for c in choices):
        largest = max(c.concurrency for c in choices)
        phrase = f"off at every batch size up to {largest}"
        return _Answer(Line(BATCH_SIZE, NO, figure), phrase, order=(3, 0.0))
    return _Answer(Line(BATCH_SIZE, UNKNOWN, f"{figure}: no chosen k's interval lies above 1.0"))


def _load_group(load: LoadResult) -> tuple[str, str, str | None]:
    """A load test's (target, method, draft), as :func:`_group` reads a result's."""
    return load.target, load.method, load.draft


def _tpot(point: LoadPoint) -> str:
    """``p50 TPOT 24.0 ms -> 12.0 ms, gain 2.00x [1.93-2.11]`` at one rate."""

    def num(value: float) -> str:
        return "-" if math.isnan(value) else f"{value:.2f}"

    low, high = point.tpot_speedup_ci
    return (
        f"p50 TPOT {ms_text(point.baseline.tpot, 50)} -> {ms_text(point.speculative.tpot, 50)}, "
        "gain "
        f"{num(point.tpot_speedup)}x [{num(low)}-{num(high)}]"
    )


TRAFFIC = "traffic"


def _traffic(loads: Sequence[LoadResult]) -> _Answer:
    """Up to which arrival rate speculation lowers p50 TPOT (its interval above 1.0), per
    load test; yes when it pays at some rate, no when it pays at none and is slower at one."""
    if not loads:
        figure = (
            "not measured under traffic; send requests at arrival rates with "
            "specdecode.load(prompts, max_tokens=..., rates=[...], requests=...) to find the "
            "rate at which the gain ends"
        )
        return _Answer(Line(TRAFFIC, UNKNOWN, figure))
    figures, answers = [], []
    for load in loads:
        test = _name(load)
        top, cross = load.pays_up_to, load.crossover_rate
        if top is not None:
            at_top = _tpot(load.at(top))
            if cross is not None:
                figure = (
                    f"speculation pays up to {rate_text(top)} ({at_top}); not at "
                    f"{rate_text(cross)} ({_tpot(load.at(cross))})"
                )
                phrase = f"pays up to {rate_text(top)} under traffic"
            elif math.isinf(top):
                figure = f"speculation pays at every rate measured, all at once included ({at_top})"
                phrase = f"still {_x(load.at(top).tpot_speedup)} under traffic, all at once"
            else:
                figure = (
                    f"speculation pays up to {rate_text(top)}, the highest rate measured ({at_top})"
                )
                phrase = f"still {_x(load.at(top).tpot_speedup)} under traffic at {rate_text(top)}"
            answers.append((YES, phrase))
        else:
            assert cross is not None
            figure = (
                f"speculation does not pay at any measured rate (at {rate_text(cross)}: "
                f"{_tpot(load.at(cross))})"
            )
            slower = [p for p in load.points if p.tpot_speedup_ci[1] < 1.0]
            if slower:
                phrase = f"not under traffic: {_x(slower[0].tpot_speedup)} at "
                answers.append((NO, phrase + rate_text(slower[0].rate)))
            else:
                answers.append((UNKNOWN, ""))
        figures.append(f"{figure} in {test}")
    for wanted in (YES, NO):
        if any(a == wanted for a, _ in answers):
            phrase = next(p for a, p in answers if a == wanted)
            return _Answer(Line(TRAFFIC, wanted, "; ".join(figures)), phrase, order=(3, 1.0))
    return _Answer(
        Line(TRAFFIC, UNKNOWN, "; ".join(figures) + ": the interval contains 1.0 at every rate")
    )


def _workloads(rows: Sequence[Row]) -> list[_Answer]:
    by_category: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_category[r.category or "-"].append(r)
    return [_workload(category, runs) for category, runs in by_category.items()]


def _describe(r: Row, *, spread_too: bool = False) -> str:
    text = f"{r.label}: " if r.label else ""
    text += f"{_figure(r)} at batch {batch(r) or '-'}"
    rate = finite(r.acceptance_rate)
    if rate is not None:
        text += f", acceptance {rate:.2f}"
    lengths = spread(r.request_acceptance or []) if spread_too else None
    if lengths is not None:
        text += ", per-prompt accept len p10/p50/p90 {:.1f}/{:.1f}/{:.1f}".format(*lengths)
    return text


def _workload(category: str, runs: Sequence[Row]) -> _Answer:
    ordered = sorted(runs, key=_speedup, reverse=True)
    verdicts = [verdict_of(r) for r in ordered]
    shown = "; ".join(_describe(r, spread_too=i == 0) for i, r in enumerate(ordered[:3]))
    if len(ordered) > 3:
        shown += f"; and {len(ordered) - 3} more"
    question = f"workload: {category}"
    top = ordered[0]
    if Verdict.WORTH in verdicts:
        best = ordered[verdicts.index(Verdict.WORTH)]
        phrase = f"{category} at batch {batch(best) or '-'}: {_x(best.speedup)}"
        return _Answer(Line(question, YES, shown), phrase, "worth it for", (0, -_speedup(best)))
    if all(v == Verdict.NOT_WORTH for v in verdicts):
        phrase = f"{category}: {_x(top.speedup)}"
        return _Answer(Line(question, NO, shown), phrase, "not for", (2, -_speedup(top)))
    known = finite(top.speedup) is not None
    unclear = f"{category}: {_figure(top)}" if known else None
    return _Answer(Line(question, UNKNOWN, shown), unclear, "unclear for", (1, -_speedup(top)))


def _context(rows: Sequence[Row]) -> _Answer:
    long = [r for r in rows if _is_long(r)]
    short = [r for r in rows if _SHORT.search(r.label)]
    if not long:
        figure = (
            "no long-prompt run measured (label a run 'long prompt', or use the category "
            "long_context, beside a 'short prompt' run)"
        )
        return _Answer(Line(CONTEXT, UNKNOWN, figure))
    parts = []
    for r in sorted(long, key=_speedup):
        text = f"{_figure(r)} behind long prompts ({_name(r)})"
        other = next((s for s in short if s.nodeid == r.nodeid), None)
        other = other or (short[0] if short else None)
        ratio = None
        if other is not None:
            ratio = _speedup(r) / _speedup(other) if _speedup(other) > 0 else None
            text += f" against {_figure(other)} on short ones"
            if ratio is not None:
                text += f": {ratio:.2f} of the short-prompt speedup"
        parts.append(text)
    figure = "; ".join(parts)
    verdicts = {verdict_of(r) for r in long}
    worst = min(long, key=_speedup)
    if verdicts == {Verdict.WORTH}:
        phrase = f"holds behind long prompts: {_x(worst.speedup)}"
        return _Answer(Line(CONTEXT, YES, figure), phrase, order=(4, 0.0))
    if Verdict.NOT_WORTH in verdicts:
        phrase = f"not behind long prompts: {_x(worst.speedup)}"
        return _Answer(Line(CONTEXT, NO, figure), phrase, order=(4, 0.0))
    return _Answer(Line(CONTEXT, UNKNOWN, figure))


def _is_long(r: Row) -> bool:
    if _SHORT.search(r.label):
        return False
    return bool(_LONG.search(r.label) or _LONG.search(r.category))


DRAFT_CHOICE = "choice of draft"


def _draft(rows: Sequence[Row], served: bool) -> _Answer:
    """From inside the speculative engine: what the proposal costs of each step (its share,
    the cost ratio per drafted token, the verification pass in baseline steps) and whether the
    measured acceptance length clears the break-even length. Yes where some run's does (their
    intervals apart), no where every run's falls below it (with the term that dominates)."""
    measured = [r for r in rows if phases(r) is not None]
    if not measured:
        figure = no_phases(rows, served)
        if figure == NOT_RECORDED:
            figure += " (a report from before phase timing)"
        return _Answer(Line(DRAFT_CHOICE, UNKNOWN, figure))
    ordered = sorted(measured, key=_speedup, reverse=True)
    shown = "; ".join(_costs(r) for r in ordered[:3])
    if len(ordered) > 3:
        shown += f"; and {len(ordered) - 3} more"
    verdicts = [pays(figures, r) for r in ordered if (figures := phases(r)) is not None]
    if True in verdicts:
        return _Answer(Line(DRAFT_CHOICE, YES, shown))
    if all(v is False for v in verdicts):
        why = explanation(ordered[0])
        phrase = "the proposal does not pay for itself" + (f": {why}" if why else "")
        return _Answer(Line(DRAFT_CHOICE, NO, shown), phrase, order=(5, 1.0))
    return _Answer(Line(DRAFT_CHOICE, UNKNOWN, f"{shown}: the intervals overlap"))


PREFIX_CACHE = "prefix cache kept"


def _cache(rows: Sequence[Row]) -> list[_Answer]:
    """Whether the speculative side keeps the baseline's prefix-cache hits on the same
    requests: no where some run's hit rate is clearly below the baseline's (the gap's 95%
    interval wholly below :data:`~pytest_specdecode.measure.cache.CACHE_GAP_MARGIN`: its
    speedup mixes two effects), yes where none is; no line where no run has both sides' hit
    rates (a report from before the cache was counted)."""
    both = [
        r
        for r in rows
        if finite(r.baseline.prefix_cache_hit_rate) is not None
        and finite(r.speculative.prefix_cache_hit_rate) is not None
    ]
    if not both:
        return []
    costly = [r for r in both if clearly_below(r.prefix_cache_gap_ci)]
    shown = costly or both
    figure = "; ".join(_cache_figure(r) for r in shown[:3])
    if len(shown) > 3:
        figure += f"; and {len(shown) - 3} more"
    if costly:
        worst = min(costly, key=lambda r: r.prefix_cache_gap or 0.0)
        note = cache_note(
            worst.baseline.prefix_cache_hit_rate, worst.speculative.prefix_cache_hit_rate
        )
        phrase = (
            f"speculation costs the prefix cache ({_name(worst)}: {note}), so its speedup "
            "mixes two effects"
        )
        figure += ": the speedup mixes speculation's gain with the prefill the lost hits cost"
        return [_Answer(Line(PREFIX_CACHE, NO, figure), phrase, order=(5, 2.0))]
    if any(r.prefix_cache_gap_ci is not None for r in both):
        return [_Answer(Line(PREFIX_CACHE, YES, figure))]
    return [_Answer(Line(PREFIX_CACHE, UNKNOWN, f"{figure} (too few rounds for an interval)"))]


def _cache_figure(r: Row) -> str:
    """``test_a: hit rate 0.92 baseline, 0.41 speculative, difference -0.51 [-0.55 to
    -0.47]``."""
    rates = rates_text(r.baseline.prefix_cache_hit_rate, r.speculative.prefix_cache_hit_rate)
    gap = gap_text(r.prefix_cache_gap, r.prefix_cache_gap_ci)
    return f"{_name(r)}: hit rate {rates}, difference {gap}"


def _costs(r: Row) -> str:
    """``test_a: draft proposal 37% of each speculative step (cost ratio 0.12), verification
    pass 1.21 baseline steps; acceptance length 3.40 [3.20-3.60] against break-even 2.10
    [1.90-2.30]`` (and the dominant term where it does not clear it)."""
    figures = phases(r)
    assert figures is not None
    proposal = "proposal" if r.method in NO_MODEL else "draft proposal"
    share, cost = finite(figures.draft_share), finite(r.cost_ratio)
    verify = finite(figures.verify_cost)
    parts = []
    if share is not None:
        ratio = f" (cost ratio {cost:.2f})" if cost is not None else ""
        parts.append(f"{proposal} {share:.0%} of each speculative step{ratio}")
    if verify is not None:
        parts.append(f"verification pass {verify:.2f} baseline steps")
    text = f"{_name(r)}: {', '.join(parts) or 'phase shares not measured'}; {_lengths(figures, r)}"
    why = explanation(r)
    return text + (f" ({why})" if why and pays(figures, r) is False else "")


def _break_even_and_measured(figures: PhaseSummary) -> tuple[str, str]:
    """``("2.10 [1.90-2.30]", "3.40 [3.20-3.60]")``: the break-even and the measured
    acceptance length, each with its interval."""
    return (
        with_interval(finite(figures.break_even_length), pair(figures.break_even_ci), ".2f"),
        with_interval(finite(figures.acceptance_length), pair(figures.acceptance_length_ci),
                      ".2f"),
    )  # fmt: skip


def _lengths(figures: PhaseSummary, row: Row | None = None) -> str:
    """``acceptance length 3.40 [3.20-3.60] against break-even 2.10 [1.90-2.30]``; where the
    step ratio differs from the acceptance length, ``step ratio 1.46 (acceptance length 3.68
    [3.50-3.86] counts only the steps with drafts) against break-even 1.52 [1.45-1.60]``."""
    be, measured = _break_even_and_measured(figures)
    tokens = step_yield(figures, row)
    if tokens is not None and names_yield(figures, row):
        return (
            f"step ratio {tokens:.2f} (acceptance length {measured} counts only the steps "
            f"with drafts) against break-even {be}"
        )
    return f"acceptance length {measured} against break-even {be}"


def _pair(figures: PhaseSummary) -> str:
    """``2.10 [1.90-2.30] vs 3.40 [3.20-3.60]``: the break-even, then the measured length;
    where the step ratio differs from it, ``1.52 [1.45-1.60] vs step ratio 1.46 (acceptance
    length 3.68 [3.50-3.86])``."""
    be, measured = _break_even_and_measured(figures)
    tokens = step_yield(figures)
    if tokens is not None and names_yield(figures):
        return f"{be} vs step ratio {tokens:.2f} (acceptance length {measured})"
    return f"{be} vs {measured}"


def _break_even(answer: _Answer, curves: Sequence[_Curve]) -> _Answer:
    """The batch-size answer with, per test measured at several batch sizes, the break-even
    length against the measured acceptance length at each (the best k's, in a sweep)."""
    texts = []
    for curve in curves:
        at = [
            f"c={c} (k={p.num_speculative_tokens}) {_pair(figures)}"
            for c, p in curve.points
            if (figures := phases(p)) is not None
        ]
        if at:
            test = curve.nodeid.rsplit("::", 1)[-1]
            texts.append(f"break-even vs measured acceptance length in {test}: " + "; ".join(at))
    if not texts:
        return answer
    line = answer.line
    figure = "; ".join([line.figure, *texts])
    return _Answer(Line(line.question, line.answer, figure), answer.phrase, answer.lead,
                   answer.order)  # fmt: skip


def _choices(
    key: tuple[str, str, str | None],
    rankings: Sequence[Ranking],
    by_key: Mapping[tuple[str, str], Row],
) -> list[_Answer]:
    out = []
    for ranking in rankings:
        candidates = ranking.candidates
        for place, c in enumerate(candidates, start=1):
            r = by_key.get((ranking.nodeid, c.name))
            if r is None or _group(r) != key:
                continue
            out.append(_choice(ranking, candidates, place, c))
    return out


def _choice(ranking: Ranking, candidates: Sequence[Candidate], place: int, c: Candidate) -> _Answer:
    name, best = c.name, ranking.best
    question = f"choice: {name}"
    test = ranking.nodeid.rsplit("::", 1)[-1]
    figure = f"{name} ranks {place} of {len(candidates)} in {test}: {_figure(c)}"
    if best == name:
        return _Answer(Line(question, YES, f"{figure}; the best worth it"))
    if best is None:
        return _Answer(Line(question, UNKNOWN, f"{figure}; no candidate is worth it"))
    other = next((o for o in candidates if o.name == best), None)
    figure += f"; best: {best} {_figure(other)}"
    if c.tied or candidates[0].name == name:
        return _Answer(Line(question, UNKNOWN, f"{figure} (within the 95% interval)"))
    return _Answer(Line(question, NO, figure))
