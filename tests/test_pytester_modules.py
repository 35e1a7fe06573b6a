"""In-process pytester runs load no extension module first (tests/conftest.py preloads the
plugin's lazy dependencies that carry them): pytester drops every module first imported during
a run, and an extension module imported again in the same process can crash it."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from .fakes import FakePlugin, FakeSource

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
