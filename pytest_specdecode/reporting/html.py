"""One self-contained HTML file: the table, the verdicts, and charts drawn with matplotlib.

Charts are embedded as inline SVG, so the file works offline with no external script. It is
rendered from a report dict (the ``--specdecode-report`` format), so it can be made after the
fact: ``python -m pytest_specdecode html report.json report.html``. matplotlib is the optional
extra ``pytest-specdecode[html]``.
"""

from __future__ import annotations

import html
import io
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from ..measure.kschedule import ScheduleCheck
from ..measure.load import LoadResult, rate_text
from .checklist import Checklist, checklists
from .table import (
    CHECK_HEADERS,
    LOAD_LEGEND,
    RANKING_HEADERS,
    SCHEDULE_HEADERS,
    SCHEDULE_LEGEND,
    check_line,
    check_rows,
    distribution_line,
    label,
    load_line,
    ranking_rows,
    render,
    render_loads,
    schedule_line,
    schedule_rows,
    speculative_config_json,
)

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.85em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.4em; text-align: left; vertical-align: top; }
td { overflow-wrap: break-word; }
#results td:first-child { overflow-wrap: anywhere; min-width: 9em; }
#results td:last-child { overflow-wrap: anywhere; }
#results.notes td:last-child { min-width: 14em; }
th { background: #f3f3f3; }
.chart { margin: 1em 0; } .env { color: #555; font-size: 0.85em; }
.answer { font-size: 1.1em; max-width: 60em; }
.yes { color: #1a7f37; font-weight: bold; } .no { color: #c62828; font-weight: bold; }
.unknown { color: #777; font-weight: bold; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; white-space: pre-wrap; }
"""


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


def _svg(fig: Any) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    _pyplot().close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _category_label(result: Mapping[str, Any]) -> str:
    return f"{result['category']}: {label(result)}"


def speedup_chart(results: Sequence[Mapping[str, Any]]) -> str:
    """Speedup per result with its 95% interval, grouped and coloured by category."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(results) + 1.5))
    categories = sorted({str(r["category"]) for r in results})
    colours = {c: f"C{i % 10}" for i, c in enumerate(categories)}
    ordered = sorted(results, key=lambda r: (str(r["category"]), label(r)))
    for y, r in enumerate(ordered):
        low, high = r["speedup_ci"]
        low = r["speedup"] if low is None else low
        high = r["speedup"] if high is None else high
        ax.errorbar(
            r["speedup"], y, xerr=[[r["speedup"] - low], [high - r["speedup"]]], fmt="o",
            color=colours[str(r["category"])], capsize=4,
        )  # fmt: skip
    ax.axvline(1.0, color="#999", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(ordered)), [_category_label(r) for r in ordered])
    ax.set_xlabel("speedup (speculative / baseline tokens per second), 95% interval")
    ax.set_title("Speedup by category")
    return _svg(fig)


def acceptance_chart(results: list[Mapping[str, Any]]) -> str:
    """Share of drafts accepted at each speculative position, one line per result."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    for r in results:
        per_pos = r.get("acceptance_per_position") or []
        if per_pos:
            ax.plot(range(1, len(per_pos) + 1), per_pos, marker="o", label=_category_label(r))
    ax.set_xlabel("speculative position")
    ax.set_ylabel("share of drafts accepted")
    ax.set_ylim(0, 1.05)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("Acceptance per position")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # beside, not over
    return _svg(fig)


def sweep_charts(sweep: Mapping[str, Any]) -> list[str]:
    """Speedup against k (a line per concurrency) and against concurrency (a line per k)."""
    plt = _pyplot()
    by_c: dict[int, list[tuple[int, float]]] = defaultdict(list)
    by_k: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for p in sweep["points"]:
        by_c[p["concurrency"]].append((p["num_speculative_tokens"], p["speedup"]))
        by_k[p["num_speculative_tokens"]].append((p["concurrency"], p["speedup"]))
    charts = []
    for groups, xlabel, legend, log in ((by_c, "k (speculative tokens)", "c", False),
                                        (by_k, "concurrency", "k", True)):  # fmt: skip
        fig, ax = plt.subplots(figsize=(6, 4))
        for key, points in sorted(groups.items()):
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, marker="o", label=f"{legend}={key}")
        ax.axhline(1.0, color="#999", linestyle="--", linewidth=1)
        if log:
            ax.set_xscale("log", base=2)
        else:
            ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("speedup")
        ax.set_title(f"{str(sweep['nodeid']).rsplit('::', 1)[-1]}: speedup against {xlabel}")
        ax.legend(fontsize=8)
        charts.append(_svg(fig))
    return charts


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


def load_chart(load: Mapping[str, Any]) -> str:
    """p50 and p99 TPOT (ms) against the arrival rate, one line each for the baseline and
    the speculative engine, from a load dict (``LoadResult.to_dict()``); the rate at which
    speculation stops lowering p50 TPOT (its crossover) is marked."""
    plt = _pyplot()
    result = LoadResult.from_dict(load)
    xs, log = load_positions(result.rates)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for colour, side in (("C0", "baseline"), ("C1", "speculative")):
        for q, style, marker in ((50, "-", "o"), (99, "--", "s")):
            ys = []
            for point in result.points:
                tpot = getattr(point, side).tpot
                ys.append(math.nan if tpot is None else tpot[q] * 1000)
            ax.plot(xs, ys, linestyle=style, marker=marker, color=colour,
                    label=f"{side} p{q}")  # fmt: skip
    if log:
        ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(xs, [rate_text(r).removesuffix(" req/s") for r in result.rates])
    cross = result.crossover_rate
    if cross is not None:
        x = xs[result.rates.index(cross)]
        ax.axvline(x, color="#c62828", linestyle=":", linewidth=1.5)
        ax.text(
            x, 0.03, f"stops paying: {rate_text(cross)} ", transform=ax.get_xaxis_transform(),
            rotation=90, ha="right", va="bottom", fontsize=8, color="#c62828",
        )  # fmt: skip
    ax.set_ylim(bottom=0)
    ax.set_xlabel("arrival rate (requests per second)")
    ax.set_ylabel("TPOT (ms per output token)")
    ax.set_title(f"{label(load)}: TPOT against arrival rate")
    ax.legend(fontsize=8, loc="best")
    return _svg(fig)


def _table(css: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return f"<table class='{css}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _schedule_part(schedule: Mapping[str, Any]) -> list[str]:
    """A sweep's k schedule: its line, its table and the config to paste, one line of JSON."""
    return [
        f"<h3>Which k at which batch size</h3><p>{html.escape(schedule_line(schedule))}</p>",
        _table("schedule", SCHEDULE_HEADERS, schedule_rows(schedule)),
        "<p>The speculative config (<code>vllm serve --speculative-config '...'</code>, or "
        "<code>vllm.LLM(speculative_config=...)</code>):</p>",
        f"<pre class='config'>{html.escape(speculative_config_json(schedule))}</pre>",
    ]


def schedule_chart(check: Mapping[str, Any]) -> str:
    """Speedup (95% interval) against concurrency for the scheduled engine and the best fixed
    k, from a schedule check dict; where the schedule is off the scheduled engine was not run
    (nothing drawn) and the fixed k's point is the sweep's."""
    plt = _pyplot()
    parsed = ScheduleCheck.from_dict(check)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sides = (("C1", "o", "schedule", "scheduled"), ("C0", "s", "best fixed k", "fixed"))
    for colour, marker, name, side in sides:
        xs: list[int] = []
        ys: list[float] = []
        errors: tuple[list[float], list[float]] = ([], [])
        for row in parsed.rows:
            speedup = getattr(row, f"{side}_speedup")
            if speedup is None:
                continue
            ci = getattr(row, f"{side}_speedup_ci")
            low, high = ci if ci is not None else (speedup, speedup)
            xs.append(row.concurrency)
            ys.append(speedup)
            errors[0].append(speedup - low)
            errors[1].append(high - speedup)
            ax.annotate(f"k={getattr(row, f'{side}_k')}", (row.concurrency, speedup),
                        textcoords="offset points", xytext=(8, 6 if side == "scheduled" else -14),
                        fontsize=8, color=colour)  # fmt: skip
        if xs:
            ax.errorbar(xs, ys, yerr=list(errors), fmt=f"-{marker}", color=colour, capsize=4,
                        label=name)  # fmt: skip
    for row in parsed.rows:
        if row.scheduled_speedup is None:
            ax.axvline(row.concurrency, color="#999", linestyle=":", linewidth=1)
            ax.text(row.concurrency, 0.97, "schedule off (not run) ", rotation=90, ha="right",
                    va="top", transform=ax.get_xaxis_transform(), fontsize=8,
                    color="#555")  # fmt: skip
    ax.axhline(1.0, color="#999", linestyle="--", linewidth=1)
    concurrencies = sorted({row.concurrency for row in parsed.rows})
    if len(concurrencies) > 1 and concurrencies[-1] >= 4 * concurrencies[0]:
        ax.set_xscale("log", base=2)
    ax.minorticks_off()
    ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("speedup over the baseline, 95% interval")
    ax.set_title(f"{str(parsed.nodeid).rsplit('::', 1)[-1]}: the schedule against the best fixed k")
    ax.legend(fontsize=8, loc="best")
    return _svg(fig)


def _check_section(index: int, check: Mapping[str, Any]) -> list[str]:
    return [
        f"<h2>Schedule check: {html.escape(str(check.get('nodeid')))}</h2>",
        f"<p>{html.escape(check_line(check))}</p>",
        _table("schedule-check", CHECK_HEADERS, check_rows(check)),
        f"<div class='chart' id='schedule-check-{index}'>{schedule_chart(check)}</div>",
    ]


def _load_section(index: int, load: Mapping[str, Any]) -> list[str]:
    return [
        f"<h2>Under load: {html.escape(str(load.get('key') or load.get('nodeid')))}</h2>",
        f"<p>{html.escape(load_line(load))}</p>",
        f"<div class='load'>{render_loads([load], tablefmt='html')}</div>",
        f"<p class='env'>{html.escape(LOAD_LEGEND)}</p>",
        f"<div class='chart' id='load-{index}'>{load_chart(load)}</div>",
    ]


def ranking_chart(ranking: Mapping[str, Any]) -> str:
    """Speedup (95% interval) against extra memory, one point per candidate; a candidate
    whose extra memory was not measured is plotted at 0 and said so."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    unmeasured = []
    for c in ranking.get("candidates") or []:
        speedup = c.get("speedup")
        if speedup is None:
            continue
        memory = c.get("extra_memory_gib")
        if memory is None:
            unmeasured.append(str(c.get("name")))
        low, high = c.get("speedup_ci") or (None, None)
        low = speedup if low is None else low
        high = speedup if high is None else high
        best = c.get("name") == ranking.get("best")
        ax.errorbar(
            memory or 0.0, speedup, yerr=[[speedup - low], [high - speedup]], fmt="o",
            color="C2" if best else ("C1" if c.get("tied") else "C0"), capsize=4,
            markersize=8 if best else 6,
        )  # fmt: skip
        marks = " (best)" if best else (" (tied)" if c.get("tied") else "")
        name = f"{c.get('name')}{marks}{' *' if memory is None else ''}"
        where = (memory or 0.0, speedup)
        ax.annotate(name, where, textcoords="offset points", xytext=(8, 4), fontsize=8)
    ax.axhline(1.0, color="#999", linestyle="--", linewidth=1)
    note = f"\n* not measured: {', '.join(unmeasured)} (plotted at 0)" if unmeasured else ""
    ax.set_xlabel(f"extra memory: draft weights + draft KV cache (GiB){note}")
    ax.set_ylabel("speedup, 95% interval")
    ax.set_title(f"{str(ranking.get('nodeid')).rsplit('::', 1)[-1]}: speedup against memory")
    return _svg(fig)


def _ranking_section(index: int, ranking: Mapping[str, Any]) -> list[str]:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in RANKING_HEADERS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in ranking_rows(ranking)
    )
    best = ranking.get("best")
    choice = f"best: {best}" if best is not None else "no candidate is worth it"
    parts = [
        f"<h2>Draft ranking: {html.escape(str(ranking.get('nodeid')))}</h2>",
        f"<p>{html.escape(choice)} &mdash; {html.escape(str(ranking.get('reason') or ''))}</p>",
        f"<table class='ranking'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
    ]
    candidates = ranking.get("candidates") or []
    unmeasured = [str(c.get("name")) for c in candidates if c.get("extra_memory_gib") is None]
    if unmeasured:
        parts.append(
            f"<p class='env'>extra memory not measured for {html.escape(', '.join(unmeasured))}"
            ": plotted at 0 GiB</p>"
        )
    parts.append(f"<div class='chart' id='ranking-{index}'>{ranking_chart(ranking)}</div>")
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
            f"<p><b>{html.escape(c.title)}</b></p><table class='checklist'><thead><tr>"
            f"<th>answer</th><th>question</th><th>figure</th></tr></thead><tbody>{rows}"
            "</tbody></table>"
        )
    parts.append("</section>")
    return parts


def render_html(report: Mapping[str, Any]) -> str:
    """The whole page for a report dict."""
    results = list(report.get("results") or [])
    env = report.get("environment") or {}
    notes = " class='notes'" if any(r.get("notes") for r in results) else ""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        "<title>Speculative decoding report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>Speculative decoding report</h1>",
        *_checklist_section(checklists(report)),
        "<p class='env'>"
        + html.escape(
            f"vLLM {env.get('vllm')}, torch {env.get('torch')}, "
            f"{(env.get('device') or {}).get('name')}"
        )
        + "</p>",
        "<h2>Results</h2>",
        f"<div id='results'{notes}>{render(results, tablefmt='html')}</div>",
        "<h2>Verdicts</h2><ul>",
    ]
    for r in results:
        reasons = "; ".join(r.get("verdict_reasons") or [])
        parts.append(
            f"<li><b>{html.escape(label(r))}</b>: {html.escape(str(r.get('verdict') or '-'))}"
            f" &mdash; {html.escape(reasons)}</li>"
        )
    parts.append("</ul>")
    if results:
        parts += [
            "<h2>Charts</h2>",
            f"<div class='chart' id='speedup'>{speedup_chart(results)}</div>",
        ]
        parts.append(f"<div class='chart' id='acceptance'>{acceptance_chart(results)}</div>")
    for i, sweep in enumerate(report.get("sweeps") or []):
        parts.append(f"<h2>Sweep: {html.escape(str(sweep['nodeid']))}</h2>")
        parts.append(
            f"<p>best k per concurrency: {html.escape(str(sweep['best_k']))}; crossover: "
            f"{html.escape(str(sweep['crossover']))}</p>"
        )
        for j, chart in enumerate(sweep_charts(sweep)):
            parts.append(f"<div class='chart' id='sweep-{i}-{j}'>{chart}</div>")
        if sweep.get("schedule"):
            parts += _schedule_part(sweep["schedule"])
    checks = report.get("schedule_checks") or []
    for i, check in enumerate(checks):
        parts += _check_section(i, check)
    if checks or any(s.get("schedule") for s in report.get("sweeps") or []):
        parts.append(f"<p class='env'>{html.escape(SCHEDULE_LEGEND)}</p>")
    for i, load in enumerate(report.get("loads") or []):
        parts += _load_section(i, load)
    for i, ranking in enumerate(report.get("rankings") or []):
        parts += _ranking_section(i, ranking)
    checks = report.get("distribution_checks") or []
    if checks:
        parts.append("<h2>Distribution checks (sample_equivalence)</h2><ul id='distributions'>")
        parts += [f"<li>{html.escape(distribution_line(c))}</li>" for c in checks]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
