"""One self-contained HTML file: the table, the verdicts, and charts drawn with matplotlib.

Charts are embedded as inline SVG, so the file works offline with no external script. It is
rendered from a report dict (the ``--specdecode-report`` format), so it can be made after the
fact: ``python -m pytest_specdecode html report.json report.html``. matplotlib is the optional
extra ``pytest-specdecode[html]``.
"""

from __future__ import annotations

import html
import io
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from .table import label, render

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
th { background: #f3f3f3; }
.chart { margin: 1em 0; } .env { color: #555; font-size: 0.85em; }
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


def speedup_chart(results: list[Mapping[str, Any]]) -> str:
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
    ax.set_xlabel("speedup (baseline time / speculative time), 95% interval")
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


def render_html(report: Mapping[str, Any]) -> str:
    """The whole page for a report dict."""
    results = list(report.get("results") or [])
    env = report.get("environment") or {}
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        "<title>Speculative decoding report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>Speculative decoding report</h1>",
        "<p class='env'>"
        + html.escape(
            f"vLLM {env.get('vllm')}, torch {env.get('torch')}, "
            f"{(env.get('device') or {}).get('name')}"
        )
        + "</p>",
        "<h2>Results</h2>",
        render(results, tablefmt="html"),
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
    parts.append("</body></html>")
    return "\n".join(parts)
