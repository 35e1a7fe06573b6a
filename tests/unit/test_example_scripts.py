"""The scripts that use the library without pytest are on the writing-tests page word for word
(run on real vLLM: tests/e2e/test_e2e_bench.py and tests/e2e/test_e2e_record.py)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "writing-tests.md"


def test_the_docs_show_the_bench_script() -> None:
    script = REPO / "examples" / "bench_tiny.py"
    assert script.read_text().strip() in PAGE.read_text()


def test_the_docs_show_the_gate_script() -> None:
    script = REPO / "examples" / "gate_tiny.py"
    assert script.read_text().strip() in PAGE.read_text()
