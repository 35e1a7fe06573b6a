"""The summary table and the lines beside it; works on the typed report model
(:class:`~pytest_specdecode.baselines.report.Report` and what it holds), outside pytest too
(e.g. on a saved report read with ``Report.from_dict``)."""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from tabulate import tabulate

from ..baselines.compare import result_key
from ..baselines.report import Report, ReportEntry
from ..figure_table import figure, header, real
from ..measure.choice import Ranking
from ..measure.detectable import Detectable
from ..measure.equivalence import DistributionCheck
from ..measure.kschedule import KSchedule, ScheduleCheck
from ..measure.load import LoadResult, LoadSummary, rate_text
from ..measure.result import Result
from ..measure.sweep import Sweep
from ..measure.verdict import Verdict
from .checklist import spread
from .fit import compact_table, fit_columns, longest, wrap
from .phases import SERVED, phase_line, phases

#: Characters a terminal may act on rather than show: C0 and C1 controls, DEL, bidirectional
#: overrides and isolates, line and paragraph separators; and lone surrogates (JSON can carry
#: them, UTF-8 cannot: printing or writing one raises).
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)
_CONTROL_BUT_NEWLINE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Markdown table formats, whose cells escape ``|``, ``$`` (GitHub's math) and HTML
#: (:func:`_tabulate`).
MARKDOWN = ("github", "pipe")
_MARKDOWN_CELL = str.maketrans({"|": "\\|", "$": "\\$", "&": "&amp;", "<": "&lt;", ">": "&gt;"})
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def printable(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character written as its escape (ESC as ``\\x1b``), so that
    text read from a file (a baseline's test ids, labels, notes) cannot drive the terminal."""
    pattern = _CONTROL_BUT_NEWLINE if keep_newlines else _CONTROL
    return pattern.sub(_escape, str(text))


def without_surrogates(value: Any) -> Any:
    """``value`` (a report dict, list or text) with every lone surrogate in its text written
    as its escape (``\\udcff``), so it can be drawn and written as UTF-8."""
    if isinstance(value, str):
        return _SURROGATE.sub(_escape, value)
    if isinstance(value, Mapping):
        return {without_surrogates(k): without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_surrogates(v) for v in value]
    return value


def _tabulate(table: Sequence[Sequence[str]], headers: Sequence[str], tablefmt: str) -> str:
    """``tabulate`` with numbers kept as text; in a Markdown format each cell's ``|``, ``$``
    and HTML are escaped, so a test id or label can neither shift the columns nor add
    markup."""
    if tablefmt in MARKDOWN:
        table = [[cell.translate(_MARKDOWN_CELL) for cell in row] for row in table]
    return tabulate(table, headers=headers, tablefmt=tablefmt, disable_numparse=True)


#: The summary table's columns; a column of a figure is headed as its row in the figure table
#: says.
HEADERS = (
    "test",
    "category",
    "method (k)",
    header("baseline_tokens_per_second"),
    header("speculative_tokens_per_second"),
    header("speedup"),
    header("acceptance_rate"),
    header("mean_acceptance_length"),
    header("alpha"),
    header("efficiency"),
    header("match_rate"),
    "mode",
    "verdict",
    "result",
)


def label(row: ReportEntry | Result | LoadResult) -> str:
    """How a result (or a load test) is named in tables and charts: the test's name and the
    run's label."""
    named = row.result if isinstance(row, ReportEntry) else row
    name = named.nodeid.rsplit("::", 1)[-1]
    return f"{name} [{named.label}]" if named.label else name


def _known(value: Any) -> Any:
    """A figure of the typed model as its dict form has it: a non-finite number (unknown) as
    None."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _num(value: Any, fmt: str) -> str:
    value = _known(value)
    if value is None:
        return "-"
    if real(value) is not None:
        return format(value, fmt)
    return str(value)


def _cell(r: Result, name: str) -> str:
    """A result's (or candidate's) figure in the table's format for it; with its 95% interval
    and unit where it has an interval (``1.80x [1.76-1.83]``)."""
    row = figure(name)
    text = _num(row.attribute(r), row.cell_fmt)
    if row.ci is None:
        return text
    low, high = getattr(r, row.ci) or (None, None)
    return f"{text}{row.unit} [{_num(low, row.cell_fmt)}-{_num(high, row.cell_fmt)}]"


class Gate(StrEnum):
    """How a result's test judged it, as the summary table's ``result`` column says."""

    PASS = "pass"
    FAIL = "FAIL"
    INCONCLUSIVE = "inconclusive"  # an adaptive measurement that could not decide
    UNKNOWN = "?"  # the test did not decide (skipped, not run, or no outcome recorded)


def gate(row: ReportEntry) -> Gate:
    """The result's gate outcome (:class:`Gate`)."""
    if row.result.inconclusive:
        return Gate.INCONCLUSIVE
    passed = row.outcome.passed
    return Gate.UNKNOWN if passed is None else (Gate.PASS if passed else Gate.FAIL)


#: Notes the report keeps but the table's notes column leaves out: the parts of the extra
#: memory (the ranking's ``extra GiB`` and the checklist's spare-memory line give the figure).
HIDDEN_NOTES = frozenset({"memory"})


def _notes(result: Result) -> str:
    notes = (result.notes or {}).items()
    return ", ".join(f"{k}={v}" for k, v in notes if k not in HIDDEN_NOTES)


def _spread(result: Result) -> str:
    """The per-prompt acceptance lengths' p10/p50/p90, or "" when the result has none."""
    values = spread(result.request_acceptance or [])
    return "" if values is None else "{:.2f}/{:.2f}/{:.2f}".format(*values)


#: A cell of the summary table: text, or a verdict or gate outcome (shown as its words; the
#: HTML page colours it).
Cell = str | Verdict | Gate


def rows(results: Iterable[ReportEntry]) -> list[list[str]]:
    """One table row per report entry, as text."""
    return [[printable(cell) for cell in _cells(r)] for r in results]


def _typed(results: Iterable[ReportEntry]) -> list[list[Cell]]:
    """One table row per report entry: text escaped (:func:`printable`), verdicts and gate
    outcomes kept as themselves."""
    return [
        [cell if isinstance(cell, Verdict | Gate) else printable(cell) for cell in _cells(r)]
        for r in results
    ]


def _cells(entry: ReportEntry) -> list[Cell]:
    r = entry.result
    return [
        label(r),
        r.category,
        f"{r.method} ({r.num_speculative_tokens})",
        _cell(r, "baseline_tokens_per_second"),
        _cell(r, "speculative_tokens_per_second"),
        _cell(r, "speedup"),
        _cell(r, "acceptance_rate"),
        _cell(r, "mean_acceptance_length"),
        _spread(r),
        _cell(r, "alpha"),
        _cell(r, "efficiency"),
        _cell(r, "match_rate"),
        _cache_cell(r, "baseline_prefix_cache_hit_rate"),
        _cache_cell(r, "speculative_prefix_cache_hit_rate"),
        r.mode,
        r.verdict or "-",
        gate(entry),
        _notes(r),
    ]


def _cache_cell(r: Result, name: str) -> str:
    """A side's prefix-cache hit rate, or "" where it looked up no prompt token (a result
    from before the cache was counted)."""
    return "" if figure(name).number(r) is None else _cell(r, name)


#: Columns shown only when some result fills them: (position in a row, header).
OPTIONAL = (
    (8, "accept len p10/p50/p90"),
    (12, header("baseline_prefix_cache_hit_rate")),
    (13, header("speculative_prefix_cache_hit_rate")),
    (17, "notes"),
)
#: The columns a terminal's summary table keeps however narrow the terminal (by header)...
NARROW_KEEP = ("test", "method (k)", header("speedup"), "verdict", "result")
#: ...and the others, in the order they come back as it widens. A column that does not fit
#: goes, as ``header value``, to a line under each row: nothing the table holds is lost.
NARROW_ORDER = (
    header("acceptance_rate"),
    header("mean_acceptance_length"),
    header("match_rate"),
    "category",
    header("baseline_tokens_per_second"),
    header("speculative_tokens_per_second"),
    "mode",
    header("alpha"),
    header("efficiency"),
    "accept len p10/p50/p90",
    header("baseline_prefix_cache_hit_rate"),
    header("speculative_prefix_cache_hit_rate"),
    "notes",
)
#: The narrowest the test column is wrapped to when the kept columns do not fit.
MIN_TEST_WIDTH = 12


def results_table(results: Iterable[ReportEntry]) -> tuple[list[str], list[list[Cell]]]:
    """The summary table's headers and rows (:data:`Cell`), with the :data:`OPTIONAL` columns
    only where some result fills them."""
    table = _typed(results)
    headers = list(HEADERS)
    for index, title in OPTIONAL:  # every column, in row order
        headers.insert(index, title)
    empty = {index for index, _ in OPTIONAL if not any(row[index] for row in table)}
    shown = [i for i in range(len(headers)) if i not in empty]
    return [headers[i] for i in shown], [[row[i] for i in shown] for row in table]


def _table(results: Iterable[ReportEntry]) -> tuple[list[str], list[list[str]]]:
    """:func:`results_table` as text."""
    headers, table = results_table(results)
    return headers, [[str(cell) for cell in row] for row in table]


def render(results: Iterable[ReportEntry], tablefmt: str = "simple") -> str:
    """The summary table as text (``tablefmt="github"`` gives Markdown), every column. The
    per-prompt acceptance length spread and a ``notes`` column appear when any result has
    them."""
    headers, table = _table(results)
    return _tabulate(table, headers, tablefmt)


def render_fitted(results: Sequence[ReportEntry], width: int) -> tuple[str, int, list[str]]:
    """The summary table for a terminal of ``width`` characters: every column where they all
    fit as :func:`render` draws them; otherwise a compact table (two-line headers) of
    :data:`NARROW_KEEP` and what fits of :data:`NARROW_ORDER`, the test column wrapped when even
    those do not fit. Returns the table, the number of its header lines (2 or 3) and, per
    result, the cells left out as ``header value; ...`` ("" when none)."""
    headers, table = _table(results)
    full = _tabulate(table, headers, "simple")
    if longest(full) <= width:
        return full, 2, [""] * len(table)

    def render_columns(columns: list[int], test: int | None = None) -> str:
        return compact_table(
            [headers[i] for i in columns], [[row[i] for i in columns] for row in table], test
        )

    shown = fit_columns(headers, width, NARROW_KEEP, NARROW_ORDER, render_columns)
    extras = [
        "; ".join(f"{headers[i]} {row[i]}" for i in range(len(headers))
                  if i not in shown and row[i] not in ("", "-"))
        for row in table
    ]  # fmt: skip
    text = render_columns(shown)
    over = longest(text) - width
    if over > 0:  # the test names are what is long: wrap them
        test = max(len(row[0]) for row in table)
        text = render_columns(shown, max(MIN_TEST_WIDTH, test - over))
    return text, 3, extras


def render_with_phases(
    results: Sequence[ReportEntry], *, served: bool = False, width: int | None = None
) -> list[str]:
    """The summary table with each result's phase line under its row (:func:`phase_line
    <pytest_specdecode.reporting.phases.phase_line>`); when no result has phase figures, the
    table alone, and for served engines one line under it that says they have none. With a
    ``width`` (a terminal's), the table fits it (:func:`render_fitted`): the cells left out
    go to a line under their row, and the lines under a row are wrapped."""
    if width is None:
        table, heading, extras = render(results), 2, [""] * len(results)
    else:
        table, heading, extras = render_fitted(results, width)
    timed = any(phases(r) is not None for r in results)
    tail = [f"phases: {SERVED}"] if served and not timed else []
    if not timed and not any(extras):
        return [table, *tail]
    lines = table.split("\n")
    head, body = lines[:heading], lines[heading:]
    if len(body) != len(results):  # a row over several lines: the lines under it go below
        out = [table]
        for r, extra in zip(results, extras, strict=True):
            name = printable(label(r))
            if extra:
                out += wrap(f"{name}: {extra}", width)
            if timed:
                out += wrap(f"{name}: {printable(phase_line(r, served=served))}", width)
        return [*out, *tail]
    out = head
    for text, r, extra in zip(body, results, extras, strict=True):
        out.append(text)
        if extra:
            out += wrap(f"  {extra}", width, 4)
        if timed:
            out += wrap(f"  {printable(phase_line(r, served=served))}", width, 4)
    return ["\n".join(out), *tail]


def phase_markdown(results: Sequence[ReportEntry], *, served: bool = False) -> list[str]:
    """The phase lines as a Markdown list, one item per result; when no result has phase
    figures, nothing, or for served engines a line that says they have none."""
    if not any(phases(r) is not None for r in results):
        return [f"Phases: {SERVED}."] if served else []
    return [f"- `{_code(label(r))}`: {printable(phase_line(r, served=served))}" for r in results]


def _code(text: str) -> str:
    """Text for a Markdown code span (a backtick would end it)."""
    return printable(text).replace("`", "'")


RANKING_HEADERS = (
    "rank", "candidate", "method (k)", header("speedup"), header("acceptance_rate"),
    header("mean_acceptance_length"), header("alpha"), header("cost_ratio"),
    header("extra_memory_gib"), "verdict", "choice",
)  # fmt: skip


def ranking_rows(ranking: Ranking) -> list[list[str]]:
    """One row per candidate of a ranking, fastest first; the last cell marks the best one
    and those tied with the fastest."""
    out = []
    best = ranking.best
    for place, c in enumerate(ranking.candidates, start=1):
        r = c.result
        marks = ["best"] * (c.name == best) + ["tied"] * c.tied
        cells = [
            str(place),
            c.name,
            f"{r.method} ({r.num_speculative_tokens})",
            _cell(r, "speedup"),
            _cell(r, "acceptance_rate"),
            _cell(r, "mean_acceptance_length"),
            _cell(r, "alpha"),
            _cell(r, "cost_ratio"),
            _cell(r, "extra_memory_gib"),
            r.verdict or "-",
            ", ".join(marks),
        ]
        out.append([printable(cell) for cell in cells])
    return out


def ranking_line(ranking: Ranking) -> str:
    """One line: the candidates in order, ties marked, and the choice, as
    ``Ranking.summary()`` says it (escaped for a terminal)."""
    return printable(ranking.summary())


def sweep_line(sweep: Sweep) -> str:
    """One line: the best k per concurrency and the crossover (the sweep's only wording; a
    figure not known, as in a hand-written report, is ``-``)."""
    best = ", ".join(
        f"c={c}: k={k} ({_num(r.speedup, '.2f')}x)" for c, (k, r) in sorted(sweep.best_k().items())
    )
    crossover = sweep.crossover()
    tail = (
        f"speedup's interval drops below 1.0 at concurrency {crossover}"
        if crossover is not None
        else "no crossover: speculation still pays at concurrency "
        + str(max(sweep.concurrencies, default="-"))
    )
    return printable(f"{sweep.name}: best k per concurrency: {best}; {tail}")


def _interval(value: float | None, ci: Sequence[float] | None) -> str:
    """``1.80x [1.76-1.83]``; ``-`` when not measured."""
    if value is None:
        return "-"
    low, high = ci if ci is not None else (None, None)
    return f"{_fixed(value, '.2f')}x [{_fixed(low, '.2f')}-{_fixed(high, '.2f')}]"


def _k(k: int) -> str:
    return "0 (off)" if k == 0 else str(k)


SCHEDULE_HEADERS = (
    "batch sizes", "measured at", "k", "speedup [95% CI]", "best k", "best speedup [95% CI]",
)  # fmt: skip


def schedule_rows(schedule: KSchedule) -> list[list[str]]:
    """One row per concurrency a sweep measured, from its k schedule (``Sweep.schedule()``):
    the batch-size range that runs its choice ("in a gap" where the ranges leave it out), the
    k chosen there (0: speculation off, the target alone), that k's speedup and the best
    k's, each with its 95% interval."""
    out = []
    for choice in schedule.choices:
        held = [f"{s}-{e}" if s != e else str(s) for s, e, _ in schedule.entries
                if s <= choice.concurrency <= e]  # fmt: skip
        cells = [
            held[0] if held else "in a gap",
            f"c={choice.concurrency}",
            _k(choice.k),
            "off" if choice.k == 0 else _interval(choice.speedup, choice.speedup_ci),
            str(choice.best_k),
            _interval(choice.best_speedup, choice.best_speedup_ci),
        ]
        out.append([printable(cell) for cell in cells])
    return out


def render_schedule(schedule: KSchedule, tablefmt: str = "simple") -> str:
    """A sweep's k schedule as a table (:func:`schedule_rows`)."""
    return _tabulate(schedule_rows(schedule), SCHEDULE_HEADERS, tablefmt)


def schedule_line(schedule: KSchedule) -> str:
    """Which k at which batch size (as ``KSchedule.summary()`` says it)."""
    return printable(f"{schedule.nodeid}: {schedule.summary()}")


def speculative_config_json(schedule: KSchedule) -> str:
    """The schedule's speculative config as one line of JSON, for
    ``vllm serve --speculative-config`` or ``vllm.LLM(speculative_config=json.loads(...))``."""
    return json.dumps(schedule.speculative_config)


def config_line(schedule: KSchedule) -> str:
    """``--speculative-config '<json>'``, quoted for a shell."""
    return printable(f"--speculative-config {shlex.quote(speculative_config_json(schedule))}")


CHECK_HEADERS = (
    "concurrency", "scheduled k", "schedule speedup [95% CI]", "fixed best k",
    "fixed speedup [95% CI]", "schedule/fixed [95% CI]", "holds",
)  # fmt: skip


def check_rows(check: ScheduleCheck) -> list[list[str]]:
    """One row per concurrency checked, from a schedule check: the scheduled k and the best
    fixed k, each one's speedup over the baseline with its 95% interval (``-``: not run, as
    where the schedule is off), the interval of their ratio that decides (``same engine``: a
    uniform schedule of the best k, run once) and whether the schedule holds there."""
    out = []
    for row in check.rows:
        cells = [
            str(row.concurrency),
            _k(row.scheduled_k),
            _interval(row.scheduled_speedup, row.scheduled_speedup_ci),
            str(row.fixed_k),
            _interval(row.fixed_speedup, row.fixed_speedup_ci),
            "same engine"
            if row.same_engine
            else "-"
            if row.ratio_ci is None
            else f"{_fixed(row.ratio_ci[0], '.2f')}-{_fixed(row.ratio_ci[1], '.2f')}",
            ("yes" if row.holds else "NO") + (" (off)" if row.scheduled_k == 0 else ""),
        ]
        out.append([printable(cell) for cell in cells])
    return out


def render_check(check: ScheduleCheck, tablefmt: str = "simple") -> str:
    """A schedule check as a table (:func:`check_rows`)."""
    return _tabulate(check_rows(check), CHECK_HEADERS, tablefmt)


def check_line(check: ScheduleCheck) -> str:
    """Whether the schedule holds against the best fixed k, per concurrency (as
    ``ScheduleCheck.summary()`` says it)."""
    return printable(check.summary())


def schedule_of(sweep: Sweep) -> KSchedule | None:
    """The sweep's k schedule (``Sweep.schedule()``); None for a sweep that measured
    nothing."""
    return sweep.schedule() if sweep.points else None


def schedule_lines(sweeps: Iterable[Sweep], checks: Iterable[ScheduleCheck]) -> list[str]:
    """Each sweep's schedule (its line, table and the config to paste), then each schedule
    check (its verdict line and table)."""
    lines = []
    for sweep in sweeps:
        schedule = schedule_of(sweep)
        if schedule is not None:
            lines += [
                f"schedule {schedule_line(schedule)}",
                render_schedule(schedule),
                config_line(schedule),
            ]
    for check in checks:
        lines += [f"check_schedule {check_line(check)}", render_check(check)]
    return lines


def distribution_line(check: DistributionCheck) -> str:
    """One line for a ``sample_equivalence`` check: same distribution or not, its p-value
    against alpha, the rule and the samples behind it."""
    same = "same distribution" if check.passed else "DIFFERENT distributions"
    return printable(
        f"{check.nodeid}: {same} at temperature {_num(check.temperature, 'g')}: "
        f"p={_num(check.p_value, '.3g')} (alpha {_num(check.alpha, 'g')}; {check.rule}; "
        f"{check.samples_per_engine} samples of {check.tokens} tokens per engine)"
    )


LOAD_HEADERS = (
    "test", "rate", "p50 TPOT ms", "p99 TPOT ms", "p50 TTFT ms", "TPOT gain [95% CI]",
    "goodput req/s", "pays",
)  # fmt: skip
#: The load table's goodput column, shown only when some load test set an SLO.
GOODPUT = LOAD_HEADERS.index("goodput req/s")


def _fixed(value: float | None, fmt: str) -> str:
    return "-" if value is None or value != value else format(value, fmt)  # None or NaN


def _sides(base: LoadSummary, spec: LoadSummary, figure: str, q: int = 50) -> str:
    """``baseline -> speculative`` milliseconds of a percentile of one latency figure."""
    ms = [
        None if (p := getattr(side, figure)) is None or q not in p else p[q] * 1000
        for side in (base, spec)
    ]
    return f"{_fixed(ms[0], '.1f')} -> {_fixed(ms[1], '.1f')}"


def load_rows(loads: Iterable[LoadResult]) -> list[list[str]]:
    """One row per load test and arrival rate: p50 and p99 TPOT, p50 TTFT (each ``baseline ->
    speculative``, ms), the TPOT gain with its 95% interval, goodput (req/s under the SLO;
    ``-`` without one) and whether it pays."""
    out = []
    for load in loads:
        for p in load.points:
            low, high = p.tpot_speedup_ci
            b, s = p.baseline, p.speculative
            cells = [
                label(load),
                rate_text(p.rate),
                _sides(b, s, "tpot"),
                _sides(b, s, "tpot", 99),
                _sides(b, s, "ttft"),
                f"{_fixed(p.tpot_speedup, '.2f')}x [{_fixed(low, '.2f')}-{_fixed(high, '.2f')}]",
                f"{_fixed(b.goodput, '.2f')} -> {_fixed(s.goodput, '.2f')}"
                if b.goodput is not None or s.goodput is not None
                else "-",
                "yes" if p.pays else "no",
            ]
            out.append([printable(cell) for cell in cells])
    return out


def render_loads(loads: Iterable[LoadResult], tablefmt: str = "simple") -> str:
    """The load table (:func:`load_rows`); the goodput column appears when some load test
    set an SLO."""
    table = load_rows(loads)
    headers = list(LOAD_HEADERS)
    if not any(row[GOODPUT] != "-" for row in table):
        del headers[GOODPUT]
        table = [row[:GOODPUT] + row[GOODPUT + 1 :] for row in table]
    return _tabulate(table, headers, tablefmt)


def load_line(load: LoadResult) -> str:
    """One line per load test: where speculation stops paying (as ``LoadResult.summary()``
    says it) and the SLO behind the goodput."""
    slo = ", ".join(f"{key.removesuffix('_ms')} {ms:g} ms" for key, ms in load.slo.items())
    under = f" (SLO: {slo})" if slo else ""
    return printable(f"{load.key}{under}: {load.traffic_line()}")


def render_ranking(ranking: Ranking, tablefmt: str = "simple") -> str:
    """A ranking as a table, one row per candidate."""
    return _tabulate(ranking_rows(ranking), RANKING_HEADERS, tablefmt)


COMPARISON_HEADERS = ("test", "figure", "stored", "now", "change", "p", "verdict", "catches")


def render_comparison(verdicts: Iterable[Any], tablefmt: str = "simple") -> str:
    """The comparison table: one row per figure compared (``compare.Verdict`` objects)."""
    return _tabulate(comparison_rows(verdicts), COMPARISON_HEADERS, tablefmt)


def comparison_rows(verdicts: Iterable[Any]) -> list[list[str]]:
    """The comparison table's rows (:data:`COMPARISON_HEADERS`), as printable text."""
    table = []
    for v in verdicts:
        change = v.change
        cells = [
            v.key.rsplit("::", 1)[-1],
            v.figure or "-",
            _num(v.old, ".3f"),
            _num(v.new, ".3f"),
            "-" if change is None else f"{change * 100:+.1f}%",
            _num(v.p_value, ".3g"),
            v.status.upper() if v.status == "regressed" else v.status,
            _catches(v.detectable),
        ]
        table.append([printable(cell) for cell in cells])
    return table


def _catches(detectable: Detectable | None) -> str:
    """A comparison's detectable drop: ``">= 8.7%"``, with ``" (blind)"`` when it is above
    the drop the rule is designed to catch; ``"-"`` when not known."""
    if detectable is None:
        return "-"
    return f">= {detectable.text()}" + (" (blind)" if detectable.blind else "")


#: What to change when a baseline or a comparison cannot see the drop its rule is designed for.
BLIND_FIX = (
    "lower the per-round noise (more prompts or max_tokens per round, fewer concurrent jobs "
    "on the runner) or allow more rounds (--specdecode-baseline-max-trials when saving, "
    "--specdecode-compare-max-trials when comparing)"
)


def sizing_lines(report: Report) -> list[str]:
    """What each saved result lets a later run see (its rounds, the compared rounds it plans
    and each figure's detectable drop), and a warning with the fix for every result or
    comparison that cannot see the drop its rule is designed to catch (twice the
    tolerance)."""
    lines = []
    for entry in report.results:
        result, drops = entry.result, report.detectable(entry)
        key = printable(result_key(entry))
        if result.detectable:
            figures = ", ".join(f"{f} {d.text()}" for f, d in result.detectable.items())
            lines.append(
                f"baseline {key}: {len(result.ratios)} rounds saved, compared runs take up to "
                f"{result.compared_rounds}; catches drops from {figures}"
            )
        lines += [blind_line(key, f, d) for f, d in drops.items() if d.blind]
    return lines


def blind_line(key: str, figure: str, drop: Detectable) -> str:
    """The warning for a figure whose rule cannot see the drop it is designed to catch."""
    designed = f"{drop.designed * 100:g}%" if drop.relative else f"{drop.designed:g}"
    return (
        f"WARNING: {key}: {figure}: only drops from {drop.text()} are caught (95% of the "
        f"time), not the {designed} its rule is designed to catch: {BLIND_FIX}"
    )


def _seconds(value: Any) -> str:
    seconds = float(value or 0.0)
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def time_line(session: Mapping[str, Any]) -> str:
    """Where the session's wall time went, from a report's ``session`` part: engine starts
    (count, restarts, seconds), warm-up, measured rounds, cost ratio, sampling, other."""
    spent = session.get("time") or {}
    workers = int(session.get("workers") or 1)
    starts, restarts = int(spent.get("engine_starts", 0)), int(spent.get("restarts", 0))
    again = f" ({restarts} restart{'s' if restarts != 1 else ''})" if restarts else ""
    parts = [
        f"{starts} engine start{'s' if starts != 1 else ''}{again} "
        + _seconds(spent.get("start_seconds")),
        f"shutdowns {_seconds(spent.get('stop_seconds'))}",
        f"warm-up {_seconds(spent.get('warmup_seconds'))}",
        f"measured rounds {_seconds(spent.get('round_seconds'))}",
    ]
    for key, name in (
        ("cost_ratio_seconds", "cost ratio"),
        ("sampling_seconds", "sampling"),
        ("load_seconds", "load rounds"),
    ):
        if spent.get(key):
            parts.append(f"{name} {_seconds(spent[key])}")
    other = spent.get("other_seconds")
    if other is not None:
        parts.append(f"other {_seconds(other)}")
    head = f"time: {_seconds(session.get('wall_seconds'))} wall"
    if session.get("engine_mode"):
        head += f" ({session['engine_mode']} engines)"
    if workers > 1 or other is None:
        head += f" over {workers} pytest-xdist workers (the parts add up their time)"
    return f"{head}: " + ", ".join(parts)


#: What the summary's figures mean, printed under its tables.
LEGEND = (
    "speedup = speculative / baseline output tokens per second per paired round (geometric "
    "mean; baseline time / speculative time when both generate the same tokens); "
    "accept rate = accepted / draft tokens"
)
#: What the phase lines mean, printed under the tables when some result has them.
PHASE_LEGEND = (
    "phases: mean ms per decode step, timed inside each engine (verify = the target's pass "
    "over k + 1 positions); break-even = spec step / base step, the tokens each verify step "
    "must yield for speculation to pay, against the measured acceptance length (95% intervals)"
)
#: What the load table's figures mean, printed under it.
LOAD_LEGEND = (
    "load: each cell baseline -> speculative; TPOT = time per output token after the first, "
    "TTFT = time to the first token, from the scheduled arrival; TPOT gain = baseline p50 TPOT "
    "/ speculative p50 TPOT, geometric mean over the rounds (95% interval from the rounds' "
    "spread); pays = that interval lies above 1.0; goodput = requests per second that met "
    "the SLO"
)
#: What the schedule tables' figures mean, printed under them.
SCHEDULE_LEGEND = (
    "schedule: at each concurrency a sweep measured, the smallest k whose speedup is within the "
    "tolerance of the fastest k's, 0 (off) where even the fastest k's 95% interval lies below "
    "1.0; each range of batch sizes runs the k of the concurrency that ends it. check_schedule: "
    "the scheduled engine and the best fixed k, each against the baseline; schedule/fixed = "
    "the 95% interval of their speedups' ratio (same engine: a uniform schedule of the best k, "
    "run once); holds = that interval reaches 1 - tolerance"
)


def summary_lines(
    results: Sequence[ReportEntry],
    sweeps: Iterable[Sweep],
    checks: Iterable[DistributionCheck],
    rankings: Iterable[Ranking],
    session: Mapping[str, Any],
    loads: Sequence[LoadResult] = (),
    schedule_checks: Sequence[ScheduleCheck] = (),
    *,
    served: bool = False,
    width: int | None = None,
) -> list[str]:
    """The speculative-decoding summary above its checklist, from the typed report model (the
    session as its dict; ``width``: a terminal's, which the results table and the lines
    under its rows fit, see :func:`render_with_phases`): the results
    table with each result's phase line under its row (``served``: the engines were served
    ones, which have no phase figures), a line per sweep, each sweep's k schedule (line,
    table, the config to paste) and each schedule check (verdict, table), the load table with
    a line per load test, a line per distribution check, each ranking with its table, the
    legends, where the wall time went and how engines started."""
    sweeps = list(sweeps)
    lines = render_with_phases(results, served=served, width=width) if results else []
    lines += [f"sweep {sweep_line(s)}" for s in sweeps]
    scheduled = schedule_lines(sweeps, schedule_checks)
    lines += scheduled
    if loads:
        lines += [render_loads(loads), *(f"load {load_line(x)}" for x in loads)]
    lines += [f"sample_equivalence {distribution_line(c)}" for c in checks]
    for ranking in rankings:
        lines += [f"choose_draft {ranking_line(ranking)}", render_ranking(ranking)]
    lines += [LEGEND] + [PHASE_LEGEND] * any(phases(r) is not None for r in results)
    lines += [SCHEDULE_LEGEND] * bool(scheduled) + [LOAD_LEGEND] * bool(loads)
    lines += [time_line(session)]
    lines += [f"engine starts: {printable(note)}" for note in session.get("start_notes") or []]
    return lines
