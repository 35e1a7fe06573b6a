"""The report's charts, drawn with matplotlib as inline SVG: every matplotlib use of the package.

matplotlib is the optional extra ``pytest-specdecode[html]``, imported on the first chart (never
on import), with the ``Agg`` backend. Text from the report is drawn as written: math text is off
(a ``$`` in a label is a dollar sign) and each lone surrogate (JSON can carry one, UTF-8 cannot)
is drawn as its escape (:func:`drawn`).
"""

from __future__ import annotations

import functools
import io
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from ..baselines.report import ReportEntry
from ..errors import ConfigError
from ..measure.choice import Ranking
from ..measure.kschedule import ScheduleCheck
from ..measure.load import LoadResult, rate_text
from ..measure.sweep import Sweep
from .phases import break_even_points
from .table import label, without_surrogates

P = ParamSpec("P")
T = TypeVar("T")


def drawn(text: str) -> str:
    """Text from the report as a chart draws it: each lone surrogate written as its escape."""
    escaped: str = without_surrogates(text)
    return escaped


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError(
            "--specdecode-html needs matplotlib: pip install 'pytest-specdecode[html]'"
        ) from None
    return plt


def _literal(draw: Callable[P, T]) -> Callable[P, T]:
    """A chart function run with matplotlib's math text off: ``$...$`` in a label is drawn as
    written (math text would drop the dollar signs, and ``$$`` makes it raise)."""

    @functools.wraps(draw)
    def literally(*args: P.args, **kwargs: P.kwargs) -> T:
        with _pyplot().rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return literally


def _error_bars(value: float, low: float, high: float) -> tuple[float, float]:
    """The lengths below and above ``value`` of its interval, never negative (a value outside
    its interval gets no bar on that side rather than an error)."""
    return max(0.0, value - low), max(0.0, high - value)


def _svg(fig: Any) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    _pyplot().close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _interval(value: float, ci: tuple[float, float]) -> tuple[float, float]:
    """``ci`` with an unknown end (``nan``) at ``value``."""
    low, high = ci
    return (value if math.isnan(low) else low), (value if math.isnan(high) else high)


@_literal
def speedup_chart(entries: Sequence[ReportEntry]) -> str:
    """Speedup per result with its 95% interval, top to bottom in the order of the results
    table, coloured by category (a legend names them)."""
    plt = _pyplot()
    results = [e.result for e in entries]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(results) + 1.6))
    categories = list(dict.fromkeys(r.category for r in results))
    colours = {c: f"C{i % 10}" for i, c in enumerate(categories)}
    for y, r in enumerate(results):
        below, above = _error_bars(r.speedup, *_interval(r.speedup, r.speedup_ci))
        ax.errorbar(
            r.speedup, y, xerr=[[below], [above]], fmt="o",
            color=colours[r.category], capsize=3, markersize=5,
        )  # fmt: skip
    ax.axvline(1.0, color="#999", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(results)), [drawn(label(e)) for e in entries], fontsize=9)
    for tick, r in zip(ax.get_yticklabels(), results, strict=True):
        tick.set_color(colours[r.category])
    ax.set_ylim(len(results) - 0.5, -0.5)  # the first result at the top, as in the table
    ax.grid(axis="x", color="#eee")
    ax.set_xlabel("speedup (speculative / baseline tokens per second), 95% interval")
    handles = [
        plt.Line2D([], [], marker="o", linestyle="", color=colours[c], label=drawn(c))
        for c in categories
    ]
    ax.legend(handles=handles, title="category", fontsize=8, title_fontsize=8,
              loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # fmt: skip
    ax.set_title("Speedup by test and category")
    return _svg(fig)


#: Lines drawn one by one (with a legend) in a category's panel; more are drawn thin and grey
#: under their mean.
_MAX_LINES = 4


@_literal
def acceptance_chart(entries: Sequence[ReportEntry]) -> str:
    """Share of drafts accepted at each speculative position: a small panel per category, on
    one scale; a panel with up to four results draws each (named in its legend), one with more
    draws them thin and grey under their mean."""
    plt = _pyplot()
    by_category: dict[str, list[ReportEntry]] = {}
    for e in entries:
        if e.result.acceptance_per_position:
            by_category.setdefault(e.result.category, []).append(e)
    if not by_category:
        fig, ax = plt.subplots(figsize=(6, 1.2))
        ax.axis("off")
        ax.text(0.5, 0.5, "no acceptance per position recorded", ha="center", va="center")
        return _svg(fig)
    columns = min(3, len(by_category))
    rows = math.ceil(len(by_category) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 2.9 * rows),
                             sharey=True, squeeze=False)  # fmt: skip
    for ax in axes.flat[len(by_category) :]:
        ax.axis("off")
    for ax, (category, mine) in zip(axes.flat, by_category.items(), strict=False):
        curves = [list(e.result.acceptance_per_position) for e in mine]
        if len(mine) <= _MAX_LINES:
            for i, (e, ys) in enumerate(zip(mine, curves, strict=True)):
                name = drawn(e.result.label or label(e))
                ax.plot(range(1, len(ys) + 1), ys, marker="o", color=f"C{i}", label=name)
            ax.legend(fontsize=7, loc="lower left", frameon=False)
        else:
            for ys in curves:
                ax.plot(range(1, len(ys) + 1), ys, color="#bbb", linewidth=0.8)
            longest = max(len(ys) for ys in curves)
            mean = [
                sum(ys[i] for ys in curves if len(ys) > i) / sum(len(ys) > i for ys in curves)
                for i in range(longest)
            ]
            ax.plot(range(1, longest + 1), mean, marker="o", color="C0",
                    label=f"mean of {len(mine)} tests (grey: each)")  # fmt: skip
            ax.legend(fontsize=7, loc="lower left", frameon=False)
        ax.set_title(drawn(category), fontsize=10)
        ax.set_ylim(0, 1.05)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.tick_params(labelsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("share accepted", fontsize=9)
    for ax in axes[-1, :]:
        ax.set_xlabel("speculative position", fontsize=9)
    fig.suptitle("Acceptance per position, by category")
    fig.tight_layout()
    return _svg(fig)


@_literal
def sweep_charts(sweep: Sweep) -> list[str]:
    """Speedup with its 95% interval against k (a line per concurrency) and against
    concurrency (a line per k, ticks at the measured concurrencies)."""
    plt = _pyplot()
    by_c: dict[int, list[tuple[int, float, float, float]]] = defaultdict(list)
    by_k: dict[int, list[tuple[int, float, float, float]]] = defaultdict(list)
    for k, c, result in sweep.points:
        speedup = result.speedup
        below, above = _error_bars(speedup, *_interval(speedup, result.speedup_ci))
        by_c[c].append((k, speedup, below, above))
        by_k[k].append((c, speedup, below, above))
    charts = []
    for groups, xlabel, legend, log in ((by_c, "k (speculative tokens)", "c", False),
                                        (by_k, "concurrency (requests in flight)", "k",
                                         True)):  # fmt: skip
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, (key, points) in enumerate(sorted(groups.items())):
            xs, ys, lows, highs = zip(*sorted(points), strict=True)
            ax.errorbar(xs, ys, yerr=[lows, highs], marker="o", capsize=3, color=f"C{i}",
                        label=f"{legend}={key}")  # fmt: skip
        ax.axhline(1.0, color="#999", linestyle="--", linewidth=1)
        xs_all = sorted({x for pts in groups.values() for x, *_ in pts})
        if log:
            _concurrency_axis(ax, xs_all)
        else:
            ax.minorticks_off()
            ax.set_xticks(xs_all, [str(x) for x in xs_all])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("speedup, 95% interval")
        name = drawn(sweep.nodeid.rsplit("::", 1)[-1])
        ax.set_title(f"{name}: speedup against {xlabel.split(' (')[0]}", fontsize=10)
        ax.legend(fontsize=8)
        charts.append(_svg(fig))
    return charts


def _concurrency_axis(ax: Any, concurrencies: Sequence[int]) -> None:
    """A concurrency axis ticked at the measured concurrencies (1, 8, 32: not the powers of
    two between them), logarithmic when they span a factor of 4 or more."""
    measured = sorted(set(concurrencies))
    if len(measured) > 1 and measured[-1] >= 4 * measured[0]:
        ax.set_xscale("log", base=2)
    ax.minorticks_off()
    ax.set_xticks(measured, [str(c) for c in measured])


def break_even_chart(sweep: Sweep) -> str:
    """:func:`break_even_figure` as inline SVG."""
    return _svg(break_even_figure(sweep))


@_literal
def break_even_figure(sweep: Sweep) -> Any:
    """The break-even curve of a sweep: per k, the break-even length L* (speculative decode
    step / baseline decode step) against concurrency with its 95% interval (solid), and the
    measured acceptance length with its interval (dashed, same colour), and L* over the steps
    at the full batch only where the report has it (dotted); speculation pays where the dashed
    line lies above the solid one. Ticks at the measured concurrencies."""
    plt = _pyplot()
    points = break_even_points(sweep)
    fig, ax = plt.subplots(figsize=(4.8, 4.0))
    for i, k in enumerate(sorted({p.k for p in points})):
        mine = [p for p in points if p.k == k]
        colour = f"C{i % 10}"
        xs = [p.concurrency for p in mine]
        ys = [p.break_even for p in mine]
        lows = [p.break_even - (p.break_even_ci or (p.break_even,) * 2)[0] for p in mine]
        highs = [(p.break_even_ci or (p.break_even,) * 2)[1] - p.break_even for p in mine]
        ax.errorbar(xs, ys, yerr=[lows, highs], fmt="-s", color=colour, capsize=4,
                    label=f"break-even L*, k={k}")  # fmt: skip
        full = [p for p in mine if p.full is not None]
        if full:  # the pooled L* takes in the cheaper tail steps where few requests are left
            ax.plot([p.concurrency for p in full], [p.full for p in full], ":", color=colour,
                    label=f"L* at full batch, k={k}")  # fmt: skip
        measured = [p for p in mine if p.acceptance is not None]
        if measured:
            values = [p.acceptance or 0.0 for p in measured]
            cis = [p.acceptance_ci or (v, v) for p, v in zip(measured, values, strict=True)]
            ax.errorbar(
                [p.concurrency for p in measured], values,
                yerr=[[v - ci[0] for v, ci in zip(values, cis, strict=True)],
                      [ci[1] - v for v, ci in zip(values, cis, strict=True)]],
                fmt="--o", color=colour, capsize=4, mfc="white",
                label=f"measured acceptance length, k={k}",
            )  # fmt: skip
    _concurrency_axis(ax, [p.concurrency for p in points])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("concurrency (requests in flight)", fontsize=12)
    ax.set_ylabel("tokens per verification step", fontsize=12)
    ax.tick_params(labelsize=11)
    ax.set_title(f"{drawn(sweep.nodeid.rsplit('::', 1)[-1])}: break-even against "
                 "concurrency", fontsize=12)  # fmt: skip
    ax.legend(fontsize=10, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1,
              frameon=False)  # fmt: skip
    return fig


def load_positions(rates: list[float]) -> tuple[list[float], bool]:
    """Where each arrival rate goes on a load chart's x axis, and whether that axis is
    logarithmic (when the measured rates span a decade or more). An all-at-once rate (inf)
    goes at the right end, beyond the highest finite rate."""
    finite = [r for r in rates if math.isfinite(r)]
    log = len(finite) > 1 and max(finite) >= 10 * min(finite)
    if not finite:
        end = 1.0
    elif log:
        end = max(finite) * max(2.0, (max(finite) / min(finite)) ** 0.25)
    else:
        end = max(finite) + 0.3 * max(max(finite) - min(finite), max(finite))
    return [r if math.isfinite(r) else end for r in rates], log


@_literal
def load_chart(load: LoadResult) -> str:
    """p50 and p99 TPOT (ms) against the arrival rate, one line each for the baseline and
    the speculative engine; the rate at which speculation stops lowering p50 TPOT (its
    crossover) is marked."""
    plt = _pyplot()
    xs, log = load_positions(load.rates)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for colour, side in (("C0", "baseline"), ("C1", "speculative")):
        for q, style, marker in ((50, "-", "o"), (99, "--", "s")):
            ys = []
            for point in load.points:
                tpot = getattr(point, side).tpot
                ys.append(math.nan if tpot is None else tpot[q] * 1000)
            ax.plot(xs, ys, linestyle=style, marker=marker, color=colour,
                    label=f"{side} p{q}")  # fmt: skip
    if log:
        ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(xs, [rate_text(r).removesuffix(" req/s") for r in load.rates])
    cross = load.crossover_rate
    if cross is not None:
        x = xs[load.rates.index(cross)]
        ax.axvline(x, color="#c62828", linestyle=":", linewidth=1.5)
        ax.text(
            x, 0.03, f"stops paying: {rate_text(cross)} ", transform=ax.get_xaxis_transform(),
            rotation=90, ha="right", va="bottom", fontsize=8, color="#c62828",
        )  # fmt: skip
    ax.set_ylim(bottom=0)
    ax.set_xlabel("arrival rate (requests per second)")
    ax.set_ylabel("TPOT (ms per output token)")
    ax.set_title(f"{drawn(label(load))}: TPOT against arrival rate")
    ax.legend(fontsize=8, loc="best")
    return _svg(fig)


@_literal
def schedule_chart(check: ScheduleCheck) -> str:
    """Speedup (95% interval) against concurrency for the scheduled engine and the best fixed
    k; where the schedule is off the scheduled engine was not run (nothing drawn) and the
    fixed k's point is the sweep's."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sides = (("C1", "o", "schedule", "scheduled"), ("C0", "s", "best fixed k", "fixed"))
    for colour, marker, name, side in sides:
        xs: list[int] = []
        ys: list[float] = []
        errors: tuple[list[float], list[float]] = ([], [])
        for row in check.rows:
            speedup = getattr(row, f"{side}_speedup")
            if speedup is None:
                continue
            ci = getattr(row, f"{side}_speedup_ci")
            low, high = ci if ci is not None else (speedup, speedup)
            xs.append(row.concurrency)
            ys.append(speedup)
            below, above = _error_bars(speedup, low, high)
            errors[0].append(below)
            errors[1].append(above)
        if xs:
            ax.errorbar(xs, ys, yerr=list(errors), fmt=f"-{marker}", color=colour, capsize=4,
                        label=name)  # fmt: skip
    for row in check.rows:
        if row.scheduled_speedup is None:
            ax.axvline(row.concurrency, color="#999", linestyle=":", linewidth=1)
            ax.text(row.concurrency, 0.97, "schedule off (not run) ", rotation=90, ha="right",
                    va="top", transform=ax.get_xaxis_transform(), fontsize=8,
                    color="#555")  # fmt: skip
    ax.axhline(1.0, color="#999", linestyle="--", linewidth=1)
    concurrencies = sorted({row.concurrency for row in check.rows})
    if len(concurrencies) > 1 and concurrencies[-1] >= 4 * concurrencies[0]:
        ax.set_xscale("log", base=2)
    ax.minorticks_off()
    ks = {row.concurrency: row for row in check.rows}
    ax.set_xticks(concurrencies, [
        f"{c}\nk {_k_text(ks[c].scheduled_k)} / {_k_text(ks[c].fixed_k)}" for c in concurrencies
    ])  # fmt: skip
    ax.set_xlabel("concurrency (requests in flight); under each: k of the schedule / best fixed k")
    ax.set_ylabel("speedup over the baseline, 95% interval")
    name = drawn(check.nodeid.rsplit("::", 1)[-1])
    ax.set_title(f"{name}: the schedule against the best fixed k")
    ax.legend(fontsize=8, loc="best")
    return _svg(fig)


def _k_text(k: Any) -> str:
    return "-" if k is None else ("off" if k == 0 else str(k))


@_literal
def ranking_chart(ranking: Ranking) -> str:
    """Speedup (95% interval) against extra memory, one point per candidate; a candidate
    whose extra memory was not measured is plotted at 0 and said so."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    unmeasured = []
    for c in ranking.candidates:
        speedup = c.speedup
        if math.isnan(speedup):
            continue
        memory = c.result.extra_memory_gib
        if memory is None:
            unmeasured.append(drawn(c.name))
        best = c.name == ranking.best
        below, above = _error_bars(speedup, *_interval(speedup, c.speedup_ci))
        ax.errorbar(
            memory or 0.0, speedup, yerr=[[below], [above]], fmt="o",
            color="C2" if best else ("C1" if c.tied else "C0"), capsize=4,
            markersize=8 if best else 6,
        )  # fmt: skip
        marks = " (best)" if best else (" (tied)" if c.tied else "")
        name = f"{drawn(c.name)}{marks}{' *' if memory is None else ''}"
        where = (memory or 0.0, speedup)
        ax.annotate(name, where, textcoords="offset points", xytext=(8, 4), fontsize=8)
    ax.axhline(1.0, color="#999", linestyle="--", linewidth=1)
    note = f"\n* not measured: {', '.join(unmeasured)} (plotted at 0)" if unmeasured else ""
    ax.set_xlabel(f"extra memory: draft weights + draft KV cache (GiB){note}")
    ax.set_ylabel("speedup, 95% interval")
    ax.set_title(f"{drawn(ranking.nodeid.rsplit('::', 1)[-1])}: speedup against memory")
    return _svg(fig)
