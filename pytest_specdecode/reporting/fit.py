"""Fitting the terminal summary to the terminal's width: prose wrapped under a hanging indent,
and the columns of a table chosen to fit (the rest of each row goes to a line under it)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence

#: The fewest characters a wrapped line keeps for its text after its hanging indent; a deeper
#: indent is given up for this.
MIN_TEXT = 24


def wrap(line: str, width: int | None, hang: int | None = None) -> list[str]:
    """``line`` as lines of at most ``width`` characters (``None``: as it is), each next line
    indented by ``hang`` spaces (default: the line's own indent and two more). Words longer
    than a line (paths, URLs) stay whole, so only such a word makes a line longer."""
    if width is None or len(line) <= width:
        return [line]
    text = line.lstrip(" ")
    indent = len(line) - len(text)
    hang = indent + 2 if hang is None else hang
    if width - hang < MIN_TEXT:
        hang = max(0, min(indent, width - MIN_TEXT))
    wrapped = textwrap.wrap(
        text, width=width, initial_indent=" " * indent, subsequent_indent=" " * hang,
        break_long_words=False, break_on_hyphens=False,
    )  # fmt: skip
    return wrapped or [line]


def longest(text: str) -> int:
    """The length of ``text``'s longest line."""
    return max((len(line) for line in text.split("\n")), default=0)


def fit_columns(
    headers: Sequence[str],
    width: int,
    keep: Sequence[str],
    order: Sequence[str],
    render: Callable[[list[int]], str],
) -> list[int]:
    """The indices of the columns a table shows in ``width`` characters a line: those headed
    in ``keep`` always, then each column headed in ``order`` (in that order) with which
    ``render`` (the table of those column indices, in order) still fits; in table order."""
    chosen = [i for i, h in enumerate(headers) if h in keep]
    for title in order:
        if title in headers:
            trial = sorted([*chosen, headers.index(title)])
            if longest(render(trial)) <= width:
                chosen = trial
    return chosen


def _header_lines(title: str) -> tuple[str, str]:
    """A header over two lines, split at the space that leaves the longer part shortest
    (``("", title)`` for one word)."""
    words = title.split(" ")
    if len(words) == 1:
        return "", title
    splits = [(" ".join(words[:i]), " ".join(words[i:])) for i in range(1, len(words))]
    return min(splits, key=lambda parts: max(len(parts[0]), len(parts[1])))


def compact_table(
    headers: Sequence[str], table: Sequence[Sequence[str]], wrap_first: int | None = None
) -> str:
    """A plain-text table for a narrow terminal: three heading lines (each header over two,
    then a rule of dashes as wide as each column), columns two spaces apart, cells
    left-aligned; the first column's cells wrapped to ``wrap_first`` characters when given (a
    row then takes several lines)."""
    heads = [_header_lines(h) for h in headers]
    cells = [
        [textwrap.wrap(cell, wrap_first) or [""] if i == 0 and wrap_first else [cell]
         for i, cell in enumerate(row)]
        for row in table
    ]  # fmt: skip
    widths = [
        max([len(top), len(bottom), *(len(part) for row in cells for part in row[i])])
        for i, (top, bottom) in enumerate(heads)
    ]

    def line(parts: Sequence[str]) -> str:
        return "  ".join(part.ljust(w) for part, w in zip(parts, widths, strict=True)).rstrip()

    out = [
        line([top for top, _ in heads]),
        line([bottom for _, bottom in heads]),
        line(["-" * w for w in widths]),
    ]
    for row in cells:
        for n in range(max(len(parts) for parts in row)):
            out.append(line([parts[n] if n < len(parts) else "" for parts in row]))
    return "\n".join(out)
