from pytest_specdecode.baselines.compare import Verdict
from pytest_specdecode.measure.figures import with_notes
from pytest_specdecode.measure.result import Outcome, entry
from pytest_specdecode.reporting.table import HEADERS, printable, render, render_comparison

from .helpers import fake_result


def test_table_renders_one_row_per_result_outside_pytest() -> None:
    a = entry(fake_result(), Outcome(passed=True), with_outputs=False)
    b = entry(fake_result(spec_times=(2.0, 2.2, 1.8)), Outcome(passed=False), with_outputs=False)
    text = render([a, b])
    lines = text.splitlines()
    assert all(h in lines[0] for h in ("speedup [95% CI]", "accept rate", "match"))
    assert len(lines) == 2 + 2
    assert "2.00x [2.00-2.00]" in lines[2] and lines[2].rstrip().endswith("pass")
    assert "0.50x" in lines[3] and lines[3].rstrip().endswith("FAIL")
    assert "draft_model (4)" in lines[2]
    assert len(HEADERS) == 14


def test_markdown_table() -> None:
    text = render([fake_result().to_dict()], tablefmt="github")
    assert text.startswith("| test")


def test_notes_column_only_when_notes_exist() -> None:
    plain = fake_result().to_dict()
    assert "notes" not in render([plain]).splitlines()[0]
    noted = with_notes(fake_result(), json_valid="8/8")
    text = render([plain, noted.to_dict()])
    assert "notes" in text.splitlines()[0]
    assert text.splitlines()[-1].rstrip().endswith("json_valid=8/8")


def test_control_characters_from_files_are_escaped() -> None:
    """A baseline's test id, label, category or notes cannot drive the terminal."""
    row = fake_result().to_dict()
    row.update(
        nodeid="t.py::test_\x1b[2J", label="\x1b]0;owned\x07", category="a\tb\r", mode="\u202e"
    )
    row["notes"] = {"n\x9b": "\x00"}
    text = render([row])
    assert not any(ch in text for ch in "\x1b\x07\t\r\x00\x9b\u202e")
    assert "test_\\x1b[2J [\\x1b]0;owned\\x07]" in text
    assert "a\\tb\\r" in text and "\\u202e" in text and "n\\x9b=\\x00" in text
    verdict = Verdict("t.py::test_\x1b[31m", "speedup\x1b", "regressed", 2.0, 1.0, 0.01)
    table = render_comparison([verdict])
    assert "\x1b" not in table and "test_\\x1b[31m" in table and "speedup\\x1b" in table


def test_printable_keeps_text_and_optionally_newlines() -> None:
    assert printable("héllo ✓ [batch 32]") == "héllo ✓ [batch 32]"
    assert printable("a\nb") == "a\\nb"
    assert printable("a\nb\x1b", keep_newlines=True) == "a\nb\\x1b"


def test_a_hand_written_non_number_is_shown_not_a_crash() -> None:
    row = fake_result().to_dict()
    row["alpha"] = "n/a"
    assert " n/a " in render([row])
