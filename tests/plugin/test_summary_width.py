"""The terminal summary fits the terminal (issue 49): README's first test at 80 and 200
columns prints no summary line wider than the terminal, and what the table leaves out goes to
a line under its row."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_specdecode.baselines.report import Outcome, ReportEntry
from pytest_specdecode.reporting.fit import compact_table, wrap
from pytest_specdecode.reporting.table import (
    NARROW_KEEP,
    _table,
    render,
    render_fitted,
    render_with_phases,
)

from ..fakes import use_fake
from ..helpers import fake_result

README = Path(__file__).resolve().parents[2] / "README.md"
SPEC = '{"method": "ngram", "num_speculative_tokens": 4}'


def first_test() -> str:
    """README's first test, on the fake engines (a target and proposer on the marker)."""
    code = re.search(r"```python\n(import pytest.*?)```", README.read_text(), re.S)
    assert code, "README.md has no first test"
    marker = '@pytest.mark.specdecode("structured")'
    assert marker in code.group(1)
    return code.group(1).replace(
        marker,
        f'@pytest.mark.specdecode("structured", target="org/target", speculative_config={SPEC})',
    )


@pytest.mark.parametrize("width", [80, 200])
def test_the_first_tests_summary_fits_the_terminal(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    use_fake(pytester, monkeypatch)
    monkeypatch.setenv("COLUMNS", str(width))
    pytester.makepyfile(test_speculation=first_test())
    result = pytester.runpytest_inprocess("-v", "--specdecode-report", "report.json")
    result.assert_outcomes(passed=1)
    lines = result.stdout.lines
    start = next(i for i, x in enumerate(lines) if "speculative decoding summary" in x)
    summary = lines[start:]
    assert "worth it? (per target and proposer)" in "\n".join(summary)
    too_wide = [x for x in summary if len(x) > width]
    assert not too_wide, "\n".join(too_wide)
    # the row holds the kept columns; at 80 the rest is on the lines under it
    row = next(x for x in summary if x.startswith("test_json_extraction "))
    assert "ngram (4)" in row and "x [" in row and " worth it " in row and " pass" in row
    text = "\n".join(summary)
    if width == 80:
        under = summary[summary.index(row) + 1]
        assert under.startswith("  category structured; base tok/s ")
        assert "alpha 0.80" in text and "notes generated=" in text
    else:
        assert "generated=" in row and "alpha 0.80" not in text


def entries() -> list[ReportEntry]:
    return [
        ReportEntry(fake_result(), Outcome(passed=True)),
        ReportEntry(fake_result(spec_times=(2.0, 2.2, 1.8)), Outcome(passed=False)),
    ]


@pytest.mark.parametrize("width", [40, 60, 80, 120, 160])
def test_a_fitted_table_loses_no_cell(width: int) -> None:
    """Every cell of the full table is in the fitted one's row or the line under it."""
    rows = entries()
    headers, table = _table(rows)
    text, heading, extras = render_fitted(rows, width)
    body = text.split("\n")[heading:]
    shown = text.split("\n")[:heading]
    for row, extra, line in zip(table, extras, body, strict=True):
        for title, cell in zip(headers, row, strict=True):
            if cell in ("", "-"):
                continue
            if f"{title} {cell}" in extra:
                continue
            assert cell in line, (title, cell, line, extra)
            assert any(part in " ".join(shown) for part in title.split(" "))
    assert all(h.split(" ")[0] in " ".join(shown) for h in NARROW_KEEP)


def test_a_wide_terminal_gets_the_full_table_unchanged() -> None:
    rows = entries()
    text, heading, extras = render_fitted(rows, 400)
    assert text == render(rows) and heading == 2 and extras == ["", ""]
    assert render_with_phases(rows, width=400) == render_with_phases(rows)


def test_long_test_names_wrap_in_their_column() -> None:
    table = compact_table(["test", "speedup"], [["test_a_very_long_name[case one two]", "2x"]], 12)
    assert max(len(x) for x in table.split("\n")) <= 12 + 2 + len("speedup")
    assert table.split("\n")[3].startswith("test_a_very_")  # after three heading lines


def test_wrap_keeps_long_words_and_hangs_under_the_text() -> None:
    assert wrap("short", 80) == ["short"] and wrap("x" * 100, None) == ["x" * 100]
    lines = wrap("  YES     memory  " + "word " * 30, 50, 18)
    assert all(len(x) <= 50 for x in lines) and all(x.startswith(" " * 18) for x in lines[1:])
    path = "/a/" + "b" * 90
    assert wrap(f"results written to {path}", 40) == ["results written to", f"  {path}"]
