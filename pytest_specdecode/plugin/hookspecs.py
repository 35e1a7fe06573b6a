"""Hooks pytest-specdecode calls, for conftest files and other plugins to implement."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..engines.protocol import EngineSource
    from ..settings import GlobalSettings


@pytest.hookspec(firstresult=True)
def pytest_specdecode_engine_source(
    config: pytest.Config, settings: GlobalSettings
) -> EngineSource | None:
    """Return the engines the session's specdecode tests run on, for instance a simulated
    backend implementing :class:`~pytest_specdecode.engines.protocol.EngineSource`; None (the
    default) lets the settings choose: two running servers, or local vLLM workers.
    ``settings`` holds the session's parsed settings as attributes (``settings.timeout``,
    ``settings.served``; ``settings.source("timeout")`` says where a value came from)."""
