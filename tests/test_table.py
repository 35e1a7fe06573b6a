from pytest_specdecode.table import HEADERS, render

from .helpers import fake_result


def test_table_renders_one_row_per_result_outside_pytest() -> None:
    a = fake_result()
    a.passed = True
    b = fake_result(spec_times=(2.0, 2.2, 1.8))
    b.passed = False
    text = render([a.to_dict(with_outputs=False), b.to_dict(with_outputs=False)])
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
    noted = fake_result()
    noted.notes["json_valid"] = "8/8"
    text = render([plain, noted.to_dict()])
    assert "notes" in text.splitlines()[0]
    assert text.splitlines()[-1].rstrip().endswith("json_valid=8/8")
