"""The summary table; works on result dicts, outside pytest too (e.g. on a saved report)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from numbers import Real
from typing import Any

from tabulate import tabulate

#: Characters a terminal may act on rather than show: C0 and C1 controls, DEL, bidirectional
#: overrides and isolates, line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_CONTROL_BUT_NEWLINE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
)
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


def label(row: Mapping[str, Any]) -> str:
    """How a result is named in tables and charts: the test's name and the run's label."""
    nodeid = str(row.get("nodeid", ""))
    name = nodeid.rsplit("::", 1)[-1]
    return f"{name} [{row['label']}]" if row.get("label") else name


def _num(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, Real) and not isinstance(value, bool):
        return format(value, fmt)
    return str(value)  # a file written by hand: show it as it is


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
        out.append([printable(cell) for cell in _cells(r)])
    return out


def _cells(r: Mapping[str, Any]) -> list[str]:
    low, high = r.get("speedup_ci") or (None, None)
    return [
        label(r),
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
        cells = [
            v.key.rsplit("::", 1)[-1],
            v.figure or "-",
            _num(v.old, ".3f"),
            _num(v.new, ".3f"),
            "-" if change is None else f"{change * 100:+.1f}%",
            _num(v.p_value, ".3g"),
            v.status.upper() if v.status == "regressed" else v.status,
        ]
        table.append([printable(cell) for cell in cells])
    return tabulate(table, headers=COMPARISON_HEADERS, tablefmt=tablefmt, disable_numparse=True)
