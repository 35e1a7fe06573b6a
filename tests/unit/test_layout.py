"""The package's layers import one way: plugin -> run -> reporting -> baselines -> measure ->
engines (errors, names, settings, prompts, workloads, tolerances and the figure table are shared by
all; engines are handed parsed settings), no module imports itself through others, and
importing the plugin imports nothing heavy. The tests sit in a folder by kind: tests/unit,
tests/plugin (pytester or pytest runs on fakes) and tests/e2e (real engines, the only slow ones)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_specdecode"
TESTS = PACKAGE.parent / "tests"

#: What each layer may import from the package (besides itself and the shared modules).
ALLOWED = {
    "engines": set(),
    "measure": {"engines"},
    "baselines": {"measure", "engines"},
    "reporting": {"baselines", "measure", "engines"},
    "run": {"baselines", "reporting", "measure", "engines"},
    "plugin": {"run", "baselines", "reporting", "measure", "engines"},
}
SHARED = {"errors", "figure_table", "names", "settings", "prompts", "tolerances", "workloads"}
#: Shared modules a layer still may not import: engines are handed parsed settings (the served
#: pool its URLs and API key variable), so what a command-line option is called stays above.
WITHOUT = {"engines": {"settings"}}


def _imported(path: Path) -> set[str]:
    """Dotted names of the package a module imports (relative and absolute, lazy ones too);
    ``from x import y`` gives both ``x`` and ``x.y``."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    package = parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                module = ".".join(base + ([node.module] if node.module else []))
            names = [module, *(f"{module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found.update(n for n in names if n.startswith("pytest_specdecode."))
    return found


def _imports(path: Path) -> set[str]:
    """Top-level package parts a module imports (relative and absolute, lazy ones too)."""
    return {name.split(".")[1] for name in _imported(path)}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if path.name == "__init__.py" else parts)


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_flow_one_way(layer: str) -> None:
    allowed = ALLOWED[layer] | (SHARED - WITHOUT.get(layer, set())) | {layer}
    wrong = {
        str(path.relative_to(PACKAGE)): sorted(_imports(path) - allowed)
        for path in (PACKAGE / layer).rglob("*.py")
        if _imports(path) - allowed
    }
    assert not wrong, f"{layer} imports from layers above it: {wrong}"


def test_shared_modules_import_only_shared_ones() -> None:
    wrong = {name: sorted(_imports(PACKAGE / f"{name}.py") - SHARED) for name in SHARED}
    assert not any(wrong.values()), wrong


def test_importing_the_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys, pytest_specdecode, pytest_specdecode.plugin.hooks;"
        "print(sorted(m for m in ('vllm', 'torch', 'transformers', 'matplotlib', 'tokenizers')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_module_imports_itself_through_others() -> None:
    """No import cycle between the package's modules, lazy imports included (engines/config
    and engines/compat once imported each other)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {
        name: {m for m in _imported(path) if m in modules and m != name}
        for name, path in modules.items()
    }

    def reaches(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(graph[name])
        return seen

    cycles = sorted(name for name in graph if name in reaches(name))
    assert not cycles, f"modules in an import cycle: {cycles}"


# -- the tests' own layout ---------------------------------------------------------------------

#: The folders of tests/, one per kind; the support modules stay at tests/ itself.
KINDS = ("unit", "plugin", "e2e")
#: A slow mark written out (tests/e2e/conftest.py marks everything under tests/e2e instead).
SLOW_MARK = re.compile(r"\bmark\s*\.\s*slow\b")


def _in_tests(path: Path) -> str:
    return path.relative_to(TESTS).as_posix()


def test_every_test_file_is_in_the_folder_of_a_kind() -> None:
    misplaced = [
        _in_tests(path)
        for path in sorted(TESTS.rglob("test_*.py"))
        if len(path.relative_to(TESTS).parts) != 2 or path.parent.name not in KINDS
    ]
    assert not misplaced, f"test files outside tests/unit, tests/plugin, tests/e2e: {misplaced}"
    assert all((TESTS / kind / "__init__.py").is_file() for kind in KINDS)


def test_only_the_e2e_folder_has_slow_tests() -> None:
    """Real-engine tests go to tests/e2e, where every test is slow; elsewhere no slow mark."""
    marked = [
        _in_tests(path)
        for path in sorted(TESTS.rglob("*.py"))
        if path.relative_to(TESTS).parts[0] != "e2e"
        and SLOW_MARK.search(path.read_text(encoding="utf-8"))
    ]
    assert not marked, f"slow marks outside tests/e2e (move those tests there): {marked}"


def test_unit_tests_drive_no_pytest() -> None:
    """A test taking the ``pytester`` fixture drives pytest: it belongs in tests/plugin."""
    driving = [
        _in_tests(path)
        for path in sorted((TESTS / "unit").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and "pytester" in [a.arg for a in node.args.args + node.args.kwonlyargs]
    ]
    assert not driving, f"tests/unit files that use pytester (move them to tests/plugin): {driving}"


def test_the_slow_mark_check_can_fail() -> None:
    slow = "slow"  # not written after "mark." here: this file is checked too
    assert SLOW_MARK.search(f"@pytest.mark.{slow}\n") and SLOW_MARK.search(f"[mark . {slow}]")
    assert not SLOW_MARK.search("a slow test; pytest.mark.slower; benchmark.slowest")
