"""The docs cannot drift: generated parts are up to date, figures come from committed reports,
the module map lists every module, and README stays a short front door."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode.engines.methods import ARCTIC_INFERENCE

ROOT = Path(__file__).resolve().parents[2]
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


# --- contradictions fixed once (issue 49, item 5): each check keeps one from coming back ------


def _texts() -> dict[str, str]:
    """README, the docs pages (less the changelog, which keeps history), the CI recipes and
    the package's sources, by path."""
    paths = [
        *_pages(),
        *sorted((ROOT / "examples" / "ci").glob("*.yml")),
        *sorted((ROOT / "pytest_specdecode").rglob("*.py")),
    ]
    return {
        str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
        for p in paths
        if p.name != "changelog.md"
    }


def test_no_page_says_a_saving_run_takes_30_rounds_by_default() -> None:
    """A saving run is sized by its noise (``baseline_trials`` 'auto': 20 up to
    ``baseline_max_trials``); 30 is only the fixed count of one that cannot be sized."""
    from pytest_specdecode.settings import BY_NAME, MIN_BASELINE_ROUNDS

    assert BY_NAME["baseline_trials"].default == "auto"
    assert BY_NAME["baseline_max_trials"].default == 90 and MIN_BASELINE_ROUNDS == 20
    stale = re.compile(r"default 30|takes 30\s+rounds|30 rounds per `?run\(\)")
    found = [f"{path}: {m.group()!r}" for path, text in _texts().items()
             for m in stale.finditer(text)]  # fmt: skip
    assert not found, found


def test_one_hardware_class_per_baseline_is_told_with_the_upgrade_gate() -> None:
    """A baseline holds for one hardware class, yet a vLLM upgrade is compared across on
    purpose (the how-to's gate): a paragraph saying the first says the second, and README's
    and the pages' 'same vLLM' no longer contradicts 'gate every upgrade'."""
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in _pages()}
    rule = re.compile(r"hardware class|one per runner class")
    alone = [
        f"{path}: {paragraph[:80]!r}"
        for path, text in texts.items()
        if not path.endswith("changelog.md")
        for paragraph in text.split("\n\n")
        if rule.search(paragraph) and "same vLLM" in paragraph
    ]
    assert not alone, alone
    for path in ("README.md", "docs/getting-started.md", "docs/ci.md"):
        paragraph = next(x for x in texts[path].split("\n\n") if rule.search(x))
        assert "upgrade" in paragraph and "howto-eagle3-gpu.md" in paragraph, (path, paragraph)


def test_ci_page_states_the_refused_short_baseline_where_the_statuses_are() -> None:
    """The offline compare refuses a baseline under 20 rounds as the plugin does
    (tests/unit/test_cli.py), and the exit-status table says so."""
    from pytest_specdecode.settings import MIN_BASELINE_ROUNDS

    text = (DOCS / "ci.md").read_text(encoding="utf-8")
    (row,) = [line for line in text.splitlines() if line.startswith("| 2 | usage error")]
    assert f"fewer than {MIN_BASELINE_ROUNDS} rounds per result" in row
    assert f"fewer than {MIN_BASELINE_ROUNDS} rounds per result is refused" in text


USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+?)@(\S+)", re.MULTILINE)


def test_every_action_in_the_docs_is_pinned_as_the_recipes_pin_it() -> None:
    """A workflow snippet on a page uses each action at the commit the recipes in
    examples/ci pin it to, never a branch or a moving tag."""
    pinned: dict[str, set[str]] = {}
    for recipe in sorted((ROOT / "examples" / "ci").glob("*.yml")):
        for action, ref in USES.findall(recipe.read_text(encoding="utf-8")):
            pinned.setdefault(action, set()).add(ref)
    assert all(re.fullmatch(r"[0-9a-f]{40}", r) for refs in pinned.values() for r in refs)
    used = [
        (str(page.relative_to(ROOT)), action, ref)
        for page in _pages()
        for action, ref in USES.findall(page.read_text(encoding="utf-8"))
    ]
    assert any(page == "docs/ci.md" for page, _, _ in used)
    wrong = [u for u in used if u[2] not in pinned.get(u[1], set())]
    assert not wrong, f"pin these as examples/ci does: {wrong}"


def test_the_tiny_target_s_layers_are_told_with_the_padding() -> None:
    """The committed target has 4 trained layers; ``tiny_models()`` serves it padded with
    zero-residual layers: a page naming either depth says which (MODEL_CARD.md)."""
    from pytest_specdecode.tiny import TARGET_LAYERS

    depth = re.compile(rf"\b(?:4|{TARGET_LAYERS})-layer target|\btarget of \d+ trained layers")
    unexplained = [
        f"{path}: {paragraph[:80]!r}"
        for path, text in _texts().items()
        if path.endswith(".md")
        for paragraph in text.split("\n\n")
        if depth.search(paragraph) and "zero-residual" not in paragraph
    ]
    assert not unexplained, unexplained


def test_the_docs_section_the_suffix_refusal_names_quotes_its_command() -> None:
    """The refusal of suffix without arctic_inference points at a section saying the same."""
    page, anchor = ARCTIC_INFERENCE.docs.split("#")
    text = (ROOT / page).read_text(encoding="utf-8")
    heading = anchor.replace("-", " ").capitalize()
    assert f"### {heading}\n" in text or f"## {heading}\n" in text
    section = " ".join(text.split(heading, 1)[1].split("\n## ", 1)[0].split())
    assert f"`{ARCTIC_INFERENCE.install}`" in section and "torch 2.7.0" in section
