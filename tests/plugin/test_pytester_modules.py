"""In-process pytester runs load no extension module twice (tests/conftest.py): pytester drops
every module first imported during a run, and an extension module loaded again in the same
process can crash it. The plugin's lazy dependencies are loaded before any run, and any other
extension module is handed back, not loaded again."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import pytest

from ..conftest import EXTENSION_CACHE
from ..fakes import FakePlugin, FakeSource

SUITE = """
import pytest

SPEC = {"method": "ngram", "num_speculative_tokens": 4}

@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_run(specdecode):
    specdecode.run(["p", "q"], max_tokens=4)

@pytest.mark.specdecode("concurrency", target="org/target", speculative_config=SPEC)
def test_sweep(specdecode):
    specdecode.sweep(["p"], max_tokens=4, num_speculative_tokens=[1, 4], concurrency=[1, 4])
"""


def extension_modules() -> set[str]:
    """The names of the loaded modules that are extension modules (shared libraries)."""
    return {
        name
        for name, module in list(sys.modules.items())
        if str(getattr(module, "__file__", None) or "").endswith((".so", ".pyd"))
    }


class Recorder:
    """A plugin for the inner run: the extension modules loaded when it ends."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: Any) -> None:
        self.names = extension_modules()


def test_an_inner_run_of_every_output_loads_no_extension_module_first(
    pytester: pytest.Pytester,
) -> None:
    """Saving with the HTML page (charts), the JSON report and the exports, then comparing with
    the saved baseline: every extension module these load was loaded before the runs."""
    pytest.importorskip("matplotlib")
    before = extension_modules()
    pytester.makepyfile(test_suite=SUITE)
    runs = [
        ("--specdecode-save", "base.json", "--specdecode-html", "page.html",
         "--specdecode-report", "report.json", "--specdecode-export", "csv=out.csv"),
        ("--specdecode-compare", "base.json", "--specdecode-html", "again.html"),
    ]  # fmt: skip
    for args in runs:
        recorder = Recorder()
        source = FakeSource()
        result = pytester.runpytest_inprocess(*args, plugins=[FakePlugin(source), recorder])
        result.assert_outcomes(passed=2)
        assert recorder.names, "the recorder saw no module: it did not run"
        first = sorted(recorder.names - before)
        assert not first, (
            f"extension modules first loaded inside an in-process run: {first}; pytester drops "
            "them afterwards and the next run loads them again. Import their package in "
            "tests/conftest.py (PRELOADED)"
        )
    assert (pytester.path / "page.html").read_text().count("<svg") > 0


def test_the_test_files_of_an_inner_run_are_still_dropped(pytester: pytest.Pytester) -> None:
    """pytester's own behaviour, unpatched: a module of the test's own files goes."""
    pytester.makepyfile(
        test_inner="""
        import fixture_module_of_the_test

        def test_it():
            assert fixture_module_of_the_test
        """,
        fixture_module_of_the_test="",
    )
    pytester.syspathinsert()
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    assert "fixture_module_of_the_test" not in sys.modules


#: Standard-library extension modules the suite does not load: the first of them still unloaded
#: (and built as a shared library here) is the one observed.
SPARE_EXTENSIONS = ("syslog", "xxlimited", "_testbuffer", "_curses_panel", "_lsprof")


def spare_extension() -> str | None:
    """A standard-library extension module that this process has not loaded yet."""
    for name in SPARE_EXTENSIONS:
        if name in sys.modules or name in EXTENSION_CACHE.loaded:
            continue
        spec = importlib.util.find_spec(name)
        if spec is not None and str(spec.origin).endswith((".so", ".pyd")):
            return name
    return None


def test_an_extension_module_dropped_by_pytester_comes_back_the_same(
    pytester: pytest.Pytester,
) -> None:
    """An extension module first imported inside a run: pytester drops it from
    ``sys.modules``, and the next import gets the very module loaded in the run."""
    name = spare_extension()
    if name is None:
        pytest.skip(f"every one of {SPARE_EXTENSIONS} is loaded or missing: nothing to observe")
    pytester.makepyfile(
        test_inner=f"""
        import importlib
        import pathlib

        def test_it():
            module = importlib.import_module({name!r})
            pathlib.Path("module-id").write_text(str(id(module)))  # in pytester.path
        """
    )
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    assert name not in sys.modules  # pytester dropped it
    assert str(id(importlib.import_module(name))) == (pytester.path / "module-id").read_text()
