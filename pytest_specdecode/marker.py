"""The ``specdecode`` marker: parsing, validation and the settings a test ends up with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .engine_config import EngineConfig
from .errors import ConfigError
from .settings import (
    BY_NAME,
    MARKER_KEYWORDS,
    MARKER_THRESHOLDS,
    GlobalSettings,
    parse_threshold,
)

MARKER = "specdecode"
MARKER_DOC = (
    "specdecode(category, *, target=None, speculative_config=None, engine_kwargs=None, "
    "trials=None, timeout=None, min_gpus=None, min_speedup=None, min_acceptance_rate=None, "
    "min_acceptance_length=None, min_match_rate=None, max_extra_memory_gib=None): a "
    "speculative-decoding test; the "
    "thresholds given are checked against every result the test produces."
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


def check_engine_kwargs(engine_kwargs: Mapping[str, Any], where: Callable[[str], str]) -> None:
    """Every key must be an argument the installed vLLM's ``LLM()`` accepts (read from its
    source, not imported); ``where(key)`` names the setting the key came from."""
    from .vllm_schema import closest, installed_engine_args

    schema = installed_engine_args()
    if schema is None:
        return
    for key in engine_kwargs:
        if key not in schema.names:
            raise ConfigError(
                f"{where(key)}: engine_kwargs: unknown argument {key!r}"
                f"{closest(key, schema.names)}; the installed vLLM's LLM() and EngineArgs "
                f"accept no such argument ({schema.source})"
            )


def resolve(
    nodeid: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], settings: GlobalSettings
) -> TestSpec:
    """Validate a marker and merge it with the session settings into a :class:`TestSpec`."""
    where = f"@pytest.mark.specdecode on {nodeid}"
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

    sources: dict[str, str] = {}

    def pick(name: str) -> Any:
        if kwargs.get(name) is not None:
            sources[name] = "marker"
            return BY_NAME[name].parse(kwargs[name], f"{where}: {name}")
        sources[name] = settings.source(name)
        return settings.get(name)

    served = settings.get("speculative_url") is not None
    target = pick("target")
    if target is None and served:
        target = settings.get("speculative_url")
    if target is None:
        raise ConfigError(
            f"{nodeid}: no target model: give target= on the marker, --specdecode-target on "
            "the command line, or specdecode_target in the ini file"
        )
    spec_config = pick("speculative_config")
    if not spec_config and served:
        spec_config = {"method": "served"}
    if not spec_config:
        raise ConfigError(
            f"{nodeid}: no speculative config: give speculative_config= on the marker, "
            "--specdecode-speculative-config on the command line, or "
            "specdecode_speculative_config in the ini file, e.g. "
            '{"method": "draft_model", "model": "/models/draft", "num_speculative_tokens": 4}'
        )
    engine_kwargs: dict[str, Any] = dict(settings.get("engine_kwargs") or {})
    if kwargs.get("engine_kwargs") is not None:
        engine_kwargs.update(BY_NAME["engine_kwargs"].parse(kwargs["engine_kwargs"], where))
        sources["engine_kwargs"] = "marker"
    for forbidden in ("model", "speculative_config"):
        if forbidden in engine_kwargs:
            raise ConfigError(
                f"{where}: engine_kwargs must not contain {forbidden!r}; use "
                f"{'target' if forbidden == 'model' else 'speculative_config'}= instead"
            )
    if not served:  # a served deployment's engine arguments are the server's business
        marker_keys = set(kwargs.get("engine_kwargs") or {})
        check_engine_kwargs(
            engine_kwargs,
            lambda key: (
                where if key in marker_keys else f"{nodeid} ({settings.source('engine_kwargs')})"
            ),
        )
    gates = {
        name: parse_threshold(name, kwargs[name], where)
        for name in MARKER_THRESHOLDS
        if kwargs.get(name) is not None
    }
    baseline = EngineConfig.create(str(target), None, engine_kwargs)
    speculative = EngineConfig.create(str(target), spec_config, engine_kwargs)
    if not served:  # a served deployment's config is the server's business
        speculative.check_speculative_config(
            f"{nodeid}: speculative_config (from {sources.get('speculative_config', 'marker')})"
        )
    min_gpus = kwargs.get("min_gpus")
    if min_gpus is not None:
        min_gpus = BY_NAME["gpus_per_worker"].parse(min_gpus, f"{where}: min_gpus")
    return TestSpec(
        min_gpus=min_gpus or 0,
        nodeid=nodeid,
        category=category.strip(),
        baseline=baseline,
        speculative=speculative,
        trials=pick("trials"),
        timeout=pick("timeout"),
        gates=gates,
        sources=sources,
    )
