"""Every test under tests/e2e starts real vLLM engines: each one collected here is marked
``slow``, so ``-m slow`` runs this folder and ``-m "not slow"`` leaves it out (tox.ini)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..e2e_support import build_pair

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before -m deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(item.path).resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def pair() -> dict[str, str]:
    """The random tiny pair (:func:`~tests.e2e_support.build_pair`), for the tests that take
    it as a fixture."""
    return build_pair()
