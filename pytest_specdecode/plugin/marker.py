"""The ``specdecode`` marker: parsing, validation and the settings a test ends up with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..engines.config import EngineConfig, engine_pair
from ..errors import ConfigError
from ..settings import (
    BY_NAME,
    MARKER_KEYWORDS,
    MARKER_THRESHOLDS,
    GlobalSettings,
    parse_threshold,
)

T = TypeVar("T")

MARKER = "specdecode"
MARKER_DOC = (
    "specdecode(category, *, "
    + ", ".join(f"{k}=None" for k in MARKER_KEYWORDS if k != "category")
    + "): a speculative-decoding test; the thresholds given are checked against every "
    "result the test produces."
)


@dataclass(frozen=True)
class TestSpec:
    """Everything a specdecode test needs, resolved with marker > CLI > ini > default."""

    nodeid: str
    category: str
    baseline: EngineConfig
    speculative: EngineConfig
    trials: int | str  # a count, or "auto" (adaptive)
    timeout: float
    gates: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    min_gpus: int = 0


def marker_category(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str | None:
    """The category of a marker, positional or keyword, without validating the rest."""
    if args:
        return str(args[0])
    value = kwargs.get("category")
    return None if value is None else str(value)


def _category(where: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """The marker's category, after refusing unknown keywords and extra arguments."""
    unknown = [k for k in kwargs if k not in MARKER_KEYWORDS]
    if unknown:
        raise ConfigError(
            f"{where}: unknown keyword {unknown[0]!r}; known keywords: "
            + ", ".join(MARKER_KEYWORDS)
        )
    if len(args) > 1:
        raise ConfigError(f"{where}: takes one positional argument (category), got {len(args)}")
    if args and "category" in kwargs:
        raise ConfigError(f"{where}: category given both positionally and as a keyword")
    category = args[0] if args else kwargs.get("category")
    if category is not None and not isinstance(category, str):
        raise ConfigError(
            f"{where}: the category must be a string, got {type(category).__name__} "
            f'{category!r:.80}; e.g. @pytest.mark.specdecode("structured")'
        )
    if category is None or not category.strip():
        raise ConfigError(
            f'{where}: a category is required, e.g. @pytest.mark.specdecode("structured")'
        )
    return category


def resolve(
    nodeid: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], settings: GlobalSettings
) -> TestSpec:
    """Validate a marker and merge it with the session settings into a :class:`TestSpec`."""
    where = f"@pytest.mark.specdecode on {nodeid}"
    category = _category(where, args, kwargs)
    sources: dict[str, str] = {}

    def pick(name: str, session: T) -> T:
        """The marker's value of the setting ``name`` when given, else the session's."""
        if kwargs.get(name) is not None:
            sources[name] = "marker"
            given: T = BY_NAME[name].parse(kwargs[name], f"{where}: {name}")
            return given
        sources[name] = settings.source(name)
        return session

    engine_kwargs: dict[str, Any] = dict(settings.engine_kwargs or {})
    if kwargs.get("engine_kwargs") is not None:
        engine_kwargs.update(BY_NAME["engine_kwargs"].parse(kwargs["engine_kwargs"], where))
        sources["engine_kwargs"] = "marker"
    marker_keys = set(kwargs.get("engine_kwargs") or {})

    def came_from(name: str) -> str:
        if name == "speculative_config":
            return f"{nodeid}: speculative_config (from {sources.get(name, 'marker')})"
        if name in ("target", "engine_kwargs") or name in marker_keys:
            return where
        return f"{nodeid} ({settings.source('engine_kwargs')})"  # an engine_kwargs key

    baseline, speculative = engine_pair(
        pick("target", settings.target),
        pick("speculative_config", settings.speculative_config),
        engine_kwargs,
        served=settings.served,
        where=came_from,
        hint=(
            "on the marker, --specdecode-{option} on the command line, or specdecode_{name} "
            "in the ini file"
        ),
    )
    gates = {
        name: parse_threshold(name, kwargs[name], where)
        for name in MARKER_THRESHOLDS
        if kwargs.get(name) is not None
    }
    min_gpus = kwargs.get("min_gpus")
    if min_gpus is not None:
        min_gpus = BY_NAME["gpus_per_worker"].parse(min_gpus, f"{where}: min_gpus")
    return TestSpec(
        min_gpus=min_gpus or 0,
        nodeid=nodeid,
        category=category.strip(),
        baseline=baseline,
        speculative=speculative,
        trials=pick("trials", settings.trials),
        timeout=pick("timeout", settings.timeout),
        gates=gates,
        sources=sources,
    )
