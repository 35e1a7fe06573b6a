"""The in-process pytester runs keep installed modules loaded (tests/conftest.py)."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import KEEPS_INSTALLED_MODULES


def test_pytester_snapshots_are_replaced() -> None:
    """A pytest release that renames the private hook would silently bring back the re-imports."""
    assert KEEPS_INSTALLED_MODULES


def test_a_module_first_imported_in_an_inner_run_stays_loaded(pytester: pytest.Pytester) -> None:
    if "tabnanny" in sys.modules:
        pytest.skip("tabnanny is already loaded: nothing to observe")
    pytester.makepyfile(
        test_inner="""
        import tabnanny
        import fixture_module_of_the_test

        def test_it():
            assert tabnanny and fixture_module_of_the_test
        """,
        fixture_module_of_the_test="",
    )
    pytester.syspathinsert()
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    assert "tabnanny" in sys.modules  # standard library: kept
    assert "fixture_module_of_the_test" not in sys.modules  # the test's own files: dropped
