"""The summary table; works on result dicts, outside pytest too (e.g. on a saved report)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tabulate import tabulate

HEADERS = (
    "test",
    "category",
    "method (k)",
    "base tok/s",
    "spec tok/s",
    "speedup [95% CI]",
    "accept rate",
    "accept len",
    "alpha",
    "eff.",
    "match",
    "mode",
    "verdict",
    "result",
)


def _name(row: Mapping[str, Any]) -> str:
    nodeid = str(row.get("nodeid", ""))
    name = nodeid.rsplit("::", 1)[-1]
    return f"{name} [{row['label']}]" if row.get("label") else name


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _verdict(row: Mapping[str, Any]) -> str:
    if row.get("inconclusive"):
        return "inconclusive"
    passed = row.get("passed")
    return "?" if passed is None else ("pass" if passed else "FAIL")


def _notes(row: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in (row.get("notes") or {}).items())


def rows(results: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    """One table row per result dict (``Result.to_dict()`` or a report entry)."""
    out = []
    for r in results:
        low, high = r.get("speedup_ci") or (None, None)
        out.append(
            [
                _name(r),
                str(r.get("category", "")),
                f"{r.get('method')} ({r.get('num_speculative_tokens')})",
                _num(r["baseline"].get("tokens_per_second"), ".1f"),
                _num(r["speculative"].get("tokens_per_second"), ".1f"),
                f"{_num(r.get('speedup'), '.2f')}x [{_num(low, '.2f')}-{_num(high, '.2f')}]",
                _num(r.get("acceptance_rate"), ".2f"),
                _num(r.get("mean_acceptance_length"), ".2f"),
                _num(r.get("alpha"), ".2f"),
                _num(r.get("efficiency"), ".2f"),
                _num(r.get("match_rate"), ".2f"),
                str(r.get("mode", "")),
                str(r.get("verdict") or "-"),
                _verdict(r),
                _notes(r),
            ]
        )
    return out


def render(results: Iterable[Mapping[str, Any]], tablefmt: str = "simple") -> str:
    """The summary table as text (``tablefmt="github"`` gives Markdown). A ``notes`` column
    appears when any result carries notes."""
    table = rows(results)
    headers = list(HEADERS)
    if any(row[-1] for row in table):
        headers.append("notes")
    else:
        table = [row[:-1] for row in table]
    return tabulate(table, headers=headers, tablefmt=tablefmt, disable_numparse=True)


COMPARISON_HEADERS = ("test", "figure", "stored", "now", "change", "p", "verdict")


def render_comparison(verdicts: Iterable[Any], tablefmt: str = "simple") -> str:
    """The comparison table: one row per figure compared (``compare.Verdict`` objects)."""
    table = []
    for v in verdicts:
        change = v.change
        table.append(
            [
                v.key.rsplit("::", 1)[-1],
                v.figure or "-",
                _num(v.old, ".3f"),
                _num(v.new, ".3f"),
                "-" if change is None else f"{change * 100:+.1f}%",
                _num(v.p_value, ".3g"),
                v.status.upper() if v.status == "regressed" else v.status,
            ]
        )
    return tabulate(table, headers=COMPARISON_HEADERS, tablefmt=tablefmt, disable_numparse=True)
