"""The docs cannot drift: generated parts are up to date, figures come from committed reports,
the module map lists every module, and README stays a short front door."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SPEEDUP = re.compile(r"(?<![\d.])(\d+\.\d\d)x")


def _render_docs() -> dict[str, Any]:
    return runpy.run_path(str(ROOT / "scripts" / "render_docs.py"), run_name="render_docs")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _numbers(value: Any) -> set[str]:
    """Every number in a JSON value, written with two decimals."""
    if isinstance(value, bool) or value is None:
        return set()
    if isinstance(value, int | float):
        return {f"{value:.2f}"}
    if isinstance(value, dict):
        return set().union(*(_numbers(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_numbers(v) for v in value)) if value else set()
    return set()


def _committed_figures() -> set[str]:
    reports = sorted((DOCS / "data").glob("*.json"))
    assert reports, "no committed report under docs/data"
    figures: set[str] = set()
    for path in reports:
        figures |= _numbers(json.loads(path.read_text(encoding="utf-8")))
    return figures


def test_generated_parts_are_up_to_date() -> None:
    """README and docs hold what scripts/render_docs.py makes from the code and the recorded
    run: run it after changing a setting, a marker keyword, the template or the run."""
    render = _render_docs()
    stale = [
        str(path.relative_to(ROOT))
        for path, text in render["rendered"]().items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"out of date (run python scripts/render_docs.py): {stale}"


def test_every_speedup_figure_comes_from_a_committed_report() -> None:
    known = _committed_figures()
    missing = [
        f"{path.relative_to(ROOT)}: {figure}x"
        for path in _pages()
        for figure in SPEEDUP.findall(path.read_text(encoding="utf-8"))
        if figure not in known
    ]
    assert not missing, f"speedups not found in any report under docs/data: {missing}"


def test_the_figure_check_catches_a_figure_typed_from_memory(tmp_path: Path) -> None:
    known = _committed_figures()
    typed = next(f"{v / 100:.2f}" for v in range(101, 999) if f"{v / 100:.2f}" not in known)
    text = f"the run was {typed}x faster"
    assert [f for f in SPEEDUP.findall(text) if f not in known] == [typed]


def test_every_module_is_in_the_module_map() -> None:
    text = (DOCS / "internals.md").read_text(encoding="utf-8")
    package = ROOT / "pytest_specdecode"
    modules = sorted(str(p.relative_to(package)) for p in package.rglob("*.py"))
    modules = [m for m in modules if not m.endswith("/__init__.py") or m == "tiny/__init__.py"]
    missing = [m for m in modules if f"`{m}`" not in text]
    assert not missing, f"docs/internals.md's module map lacks {missing}"


def test_every_setting_option_is_documented() -> None:
    from pytest_specdecode.settings import SETTINGS

    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert all(s.option in text and s.ini_name in text for s in SETTINGS)


@pytest.mark.parametrize(
    "name",
    ["Bench", "Result", "GateError", "InconclusiveError", "NoSpeculationError", "ConfigError"],
)
def test_public_names_are_documented(name: str) -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")))
    assert f"`{name}" in text


def test_every_result_field_is_documented() -> None:
    from dataclasses import fields

    from pytest_specdecode import EngineFigures, Result

    text = (DOCS / "results.md").read_text(encoding="utf-8")
    missing = [
        f.name for f in (*fields(Result), *fields(EngineFigures)) if f"`{f.name}`" not in text
    ]
    assert not missing, f"docs/results.md does not describe {missing}"


def test_readme_is_a_short_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200
    text = "\n".join(lines)
    assert "python3 -m tox -e examples" in text and "python3 -m tox -e lint,type,py" in text
