"""Settings and their one precedence: marker > command line > ini > default.

Every value is parsed and validated here, and every error names where the value came from
(``marker on tests/test_x.py::test_a``, ``--specdecode-trials``, ``ini specdecode_trials``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .tolerances import DEFAULT_TOLERANCES, parse_tolerances

#: The environment variable that holds served engines' API key unless configured otherwise.
API_KEY_ENV = "SPECDECODE_API_KEY"


@dataclass(frozen=True)
class Setting:
    """One setting: its option and ini names, default and parser."""

    name: str
    help: str
    parse: Callable[[Any, str], Any]
    default: Any = None
    flag: bool = False  # a switch: --option without a value; ini true/false

    @property
    def option(self) -> str:
        return "--specdecode-" + self.name.replace("_", "-")

    @property
    def dest(self) -> str:
        return "specdecode_" + self.name

    @property
    def ini_name(self) -> str:
        return "specdecode_" + self.name


def _positive_int(value: Any, source: str) -> int:
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: expected a positive integer, got {value!r}") from None
    if number < 1:
        raise ConfigError(f"{source}: expected a positive integer, got {value!r}")
    return number


def _trials(value: Any, source: str) -> int | str:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return _trial_count(value, source)


def _trial_count(value: Any, source: str) -> int:
    """A number of paired rounds (a cap: not ``auto``)."""
    number = _positive_int(value, source)
    if number < 2:
        raise ConfigError(
            f"{source}: at least 2 trials are needed for a confidence interval, got {value!r}"
        )
    return number


#: Fewest stored rounds per result the regression rule accepts in a baseline.
MIN_BASELINE_ROUNDS = 20


def _baseline_trials(value: Any, source: str) -> int | str:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return _baseline_rounds(value, source)


def _baseline_rounds(value: Any, source: str) -> int:
    number = _positive_int(value, source)
    if number < MIN_BASELINE_ROUNDS:
        raise ConfigError(
            f"{source}: a baseline needs at least {MIN_BASELINE_ROUNDS} rounds for the "
            f"regression rule, got {value!r}"
        )
    return number


def _positive_float(value: Any, source: str) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: expected a positive number, got {value!r}") from None
    if not (number > 0 and math.isfinite(number)):
        raise ConfigError(f"{source}: expected a positive number, got {value!r}")
    return number


def _bool(value: Any, source: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{source}: expected true or false, got {value!r}")


def _tolerances(value: Any, source: str) -> str:
    parse_tolerances(str(value), source)  # validate now, parse again where used
    return str(value)


def _choice(*choices: str) -> Callable[[Any, str], str]:
    def parse(value: Any, source: str) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            raise ConfigError(f"{source}: expected one of {', '.join(choices)}, got {value!r}")
        return text

    return parse


def _string(value: Any, source: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{source}: expected a non-empty string, got {value!r}")
    return value.strip()


def _path(value: Any, source: str) -> str:
    """A file path (or a model's path or name): a string or an ``os.PathLike`` such as a
    ``pathlib.Path``."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"{source}: expected a path (a non-empty string or a pathlib.Path), got {value!r}"
        )
    return value.strip()


def _url(value: Any, source: str) -> str:
    """The root URL of a running vLLM server: http(s), a host, no query (a trailing / is
    dropped)."""
    from urllib.parse import urlsplit

    text = _string(value, source).rstrip("/")
    example = "e.g. http://127.0.0.1:8000"
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError as exc:
        raise ConfigError(f"{source}: not a valid URL ({exc}), got {value!r}; {example}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{source}: expected the http:// or https:// URL of a running vLLM server "
            f"({example}), got {value!r}"
        )
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"{source}: credentials in the URL would be printed; drop user:password@ and put "
            "the API key in the environment variable named by --specdecode-api-key-env "
            f"(default {API_KEY_ENV})"
        )
    if parts.query or parts.fragment:
        raise ConfigError(f"{source}: expected a URL without ?query or #fragment, got {value!r}")
    if parts.path.endswith("/v1"):
        raise ConfigError(
            f"{source}: give the server's root URL without /v1 (/metrics and /version live "
            f"there), e.g. {text[: -len('/v1')]!r}, got {value!r}"
        )
    return text


def _json_object(value: Any, source: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{source}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                """expected an object such as '{"method": "ngram", "num_speculative_tokens": 4}'"""
            ) from None
    if not isinstance(value, Mapping):
        raise ConfigError(f"{source}: expected a JSON object (a dict), got {value!r}")
    return dict(value)


def _categories(value: Any, source: str) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [v.strip() for v in value.replace("\n", ",").split(",")]
    elif isinstance(value, list | tuple):
        items = [str(v).strip() for v in value]
    else:
        raise ConfigError(f"{source}: expected a comma-separated list, got {value!r}")
    items = [v for v in items if v]
    if not items:
        raise ConfigError(f"{source}: expected at least one category, got {value!r}")
    return tuple(items)


def _exports(value: Any, source: str) -> tuple[tuple[str, str], ...]:
    """``FORMAT=PATH[,FORMAT=PATH]`` (or a dict of them): each export format and its file
    (the format names are checked against the export table when the outputs are)."""
    if isinstance(value, Mapping):
        pairs = [(str(k), os.fspath(v) if isinstance(v, os.PathLike) else v)
                 for k, v in value.items()]  # fmt: skip
    else:
        pairs = []
        for part in (p.strip() for p in str(value).split(",")):
            name, sep, path = part.partition("=")
            if not sep:
                raise ConfigError(
                    f"{source}: expected FORMAT=PATH (e.g. bmf=bench.json), got {part!r}"
                )
            pairs.append((name, path))
    out: dict[str, str] = {}
    expected = f"{source}: expected FORMAT=PATH (e.g. bmf=bench.json), got {value!r}"
    for name, path in pairs:
        name = name.strip().lower()
        if not name or not isinstance(path, str) or not path.strip():
            raise ConfigError(expected)
        if name in out:
            raise ConfigError(f"{source}: the format {name!r} is given twice")
        out[name] = path.strip()
    if not out:
        raise ConfigError(expected)
    return tuple(out.items())


SETTINGS: tuple[Setting, ...] = (
    Setting("target", "target model (path or name) for both engines", _path),
    Setting(
        "speculative_config",
        "speculative config as JSON, the dict vLLM's --speculative-config takes",
        _json_object,
    ),
    Setting(
        "engine_kwargs",
        "extra vllm.LLM keyword arguments as JSON, for both engines (merged key by key, "
        "marker keys win)",
        _json_object,
    ),
    Setting("category", "run only specdecode tests of these categories (comma list)", _categories),
    Setting(
        "trials",
        "measured paired rounds per run() (default 5), or 'auto': add rounds until the "
        "speedup's interval is decisive against the gates in play",
        _trials,
        default=5,
    ),
    Setting(
        "max_trials",
        "most paired rounds per run() with --specdecode-trials auto (default 20)",
        _trial_count,
        default=20,
    ),
    Setting(
        "baseline_trials",
        "paired rounds per run() when saving a run that will serve as a baseline "
        "(--specdecode-save, --specdecode-update-baseline): 'auto' (default) takes rounds, "
        "from 20 up to --specdecode-baseline-max-trials, until they let a compared run catch "
        "a drop of twice the speedup tolerance; a number (at least 20) takes that many",
        _baseline_trials,
        default="auto",
    ),
    Setting(
        "baseline_max_trials",
        "most paired rounds per run() a saving run sized by its noise takes "
        "(--specdecode-baseline-trials auto; default 90, at least 20)",
        _baseline_rounds,
        default=90,
    ),
    Setting(
        "compare_max_trials",
        "most paired rounds per run() when comparing with a baseline: the run takes the "
        "rounds its baseline planned (two thirds of the saved rounds, at least 20), at most "
        "this many (default 40)",
        _trial_count,
        default=40,
    ),
    Setting(
        "precision",
        "with --specdecode-trials auto and no gate in play: stop once the speedup's 95%% "
        "interval is within this relative half-width (default 0.03)",
        _positive_float,
        default=0.03,
    ),
    Setting("report", "write a JSON report of every result to this path", _path),
    Setting(
        "html",
        "write a self-contained HTML report with charts to this path (needs matplotlib)",
        _path,
    ),
    Setting(
        "export",
        "also write the figures for a history tracker: FORMAT=PATH[,FORMAT=PATH] (the formats "
        "of python -m pytest_specdecode export: bmf, github-action-benchmark, ...)",
        _exports,
    ),
    Setting(
        "max_engines",
        "engines kept resident at once (default 2; 1 runs baseline and speculative one after "
        "the other)",
        _positive_int,
        default=2,
    ),
    Setting(
        "engine_mode",
        "where vLLM runs inside each local engine's worker: 'multiprocess' (default: vLLM's "
        "own layout, its engine core and model in processes of their own, as deployed) or "
        "'in-process' (both in the worker: a start takes well under half the time, but a "
        "step skips the round trips between those processes, so speedup and tokens/s come "
        "out higher than a deployed vLLM's, and on a 2-core CPU the rounds were twice as "
        "noisy; for quick iteration, not for figures you act on; engines spread over "
        "several devices stay multiprocess)",
        _choice("multiprocess", "in-process"),
        default="multiprocess",
    ),
    Setting(
        "timeout",
        "seconds an engine may take to start or answer one call before it is killed (default 900)",
        _positive_float,
        default=900.0,
    ),
    Setting(
        "cost_ratio",
        "'auto' (default): report the draft/target cost ratio, measured inside the "
        "speculative engine (its draft proposal per drafted token over the baseline's decode "
        "step; no extra engine), and the predicted speedup and efficiency that follow from "
        "it; 'off': report none of them",
        _choice("auto", "off"),
        default="auto",
    ),
    Setting(
        "baseline_url",
        "measure a running OpenAI-compatible vLLM server as the baseline (with "
        "--specdecode-speculative-url) instead of starting engines",
        _url,
    ),
    Setting("speculative_url", "the running vLLM server with speculative decoding", _url),
    Setting(
        "api_key_env",
        "name of the environment variable holding the servers' API key (default "
        f"{API_KEY_ENV}); the key itself is never taken from the command line",
        _string,
        default=API_KEY_ENV,
    ),
    Setting(
        "require_gpu",
        "fail, instead of skipping, a test whose min_gpus this machine does not have (GPU CI)",
        _bool,
        default=False,
        flag=True,
    ),
    Setting(
        "no_reorder",
        "run specdecode tests in file order (by default tests sharing engines run together, "
        "and under pytest-xdist go to one worker)",
        _bool,
        default=False,
        flag=True,
    ),
    Setting(
        "gpus_per_worker",
        "GPUs given to each pytest-xdist worker through CUDA_VISIBLE_DEVICES (default 1)",
        _positive_int,
        default=1,
    ),
    Setting("save", "save this run's results (the report format) to this path", _path),
    Setting("compare", "compare every result with the results saved in this file", _path),
    Setting(
        "compare_fail",
        "tolerated drops, e.g. speedup:10%,acceptance_rate:0.05 (above 0; relative with %, "
        "below 100%; else absolute, for the speedup below every stored speedup; default "
        f"{DEFAULT_TOLERANCES})",
        _tolerances,
        default=DEFAULT_TOLERANCES,
    ),
    Setting(
        "strict_environment",
        "comparing with results from another device, vLLM or model is an error, not a warning",
        _bool,
        default=False,
        flag=True,
    ),
    Setting(
        "allow_config_change",
        "compare results with baseline entries of another target or speculative method (the "
        "change is intended); without it those are not compared, and other changes (draft, k, "
        "max_tokens, temperature, prompts, concurrency) are named in a warning",
        _bool,
        default=False,
        flag=True,
    ),
    Setting(
        "update_baseline",
        "write this run's results into the --specdecode-compare file (tests that ran only)",
        _bool,
        default=False,
        flag=True,
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}

#: Marker keywords and their parsers (``category`` may also be the first positional argument).
MARKER_THRESHOLDS: dict[str, tuple[float, float | None]] = {
    # name: (lowest allowed, highest allowed)
    "min_speedup": (0.0, None),
    "min_acceptance_rate": (0.0, 1.0),
    "min_acceptance_length": (1.0, None),
    "min_match_rate": (0.0, 1.0),
    "max_extra_memory_gib": (0.0, None),
    "min_latency_gain": (0.0, None),
    "min_goodput_ratio": (0.0, None),
    "at_rate": (0.0, None),
}

#: Every marker keyword and what it means: the one list the marker's validation, its
#: ``--markers`` line and the documentation are made from.
MARKER_KEYWORD_HELP: dict[str, str] = {
    "category": "workload category (also the first positional argument); required",
    "target": "target model for both engines (else --specdecode-target, else ini)",
    "speculative_config": "the dict vLLM's --speculative-config takes (else the option or ini)",
    "engine_kwargs": "vllm.LLM arguments for both engines, merged key by key over the "
    "option's (marker keys win)",
    "trials": "measured paired rounds per run(), or 'auto'",
    "timeout": "seconds each engine call of this test may take",
    "min_gpus": "skip (or, with --specdecode-require-gpu, fail) where NVML sees fewer GPUs",
    "min_speedup": "every result's speedup at least this (as assert_speedup)",
    "min_acceptance_rate": "every result's acceptance rate at least this, 0 to 1 (as "
    "assert_acceptance_rate)",
    "min_acceptance_length": "every result's mean acceptance length at least this, at least 1 "
    "(as assert_acceptance_length)",
    "min_match_rate": "every greedy result's share of identical outputs at least this, 0 to 1 "
    "(as assert_outputs_equivalent)",
    "max_extra_memory_gib": "every result's extra memory at most this many GiB (as "
    "assert_extra_memory)",
    "min_latency_gain": "every load's p50 TPOT gain at at_rate at least this (as "
    "assert_latency_gain)",
    "min_goodput_ratio": "every load's speculative/baseline goodput at at_rate at least this (as "
    "assert_goodput; needs load(slo=...))",
    "at_rate": "the rate (requests per second) the load gates check; default: the lowest rate "
    "each load measured",
}
MARKER_KEYWORDS = tuple(MARKER_KEYWORD_HELP)


def parse_threshold(name: str, value: Any, source: str) -> float:
    """Validate one gate threshold (a number in its allowed range)."""
    low, high = MARKER_THRESHOLDS[name]
    if name == "at_rate" and value == math.inf:  # all at once
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{source}: {name} must be a number, got {value!r}")
    if value < low or (high is not None and value > high):
        allowed = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise ConfigError(f"{source}: {name} must be {allowed}, got {value!r}")
    if name in ("min_speedup", "min_latency_gain", "at_rate") and value == 0:
        raise ConfigError(f"{source}: {name} must be greater than 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class GlobalSettings:
    """Every setting's value, parsed once: one typed attribute per :data:`SETTINGS` entry (of
    its parser's type, ``| None`` where the default is None; a test checks both), and
    ``sources``, where each value not left at its default came from."""

    target: str | None
    speculative_config: dict[str, Any] | None
    engine_kwargs: dict[str, Any] | None
    category: tuple[str, ...] | None
    trials: int | str
    max_trials: int
    baseline_trials: int | str
    baseline_max_trials: int
    compare_max_trials: int
    precision: float
    report: str | None
    html: str | None
    export: tuple[tuple[str, str], ...] | None
    max_engines: int
    engine_mode: str
    timeout: float
    cost_ratio: str
    baseline_url: str | None
    speculative_url: str | None
    api_key_env: str
    require_gpu: bool
    no_reorder: bool
    gpus_per_worker: int
    save: str | None
    compare: str | None
    compare_fail: str
    strict_environment: bool
    allow_config_change: bool
    update_baseline: bool
    sources: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls, values: Mapping[str, Any] | None = None, sources: Mapping[str, str] | None = None
    ) -> GlobalSettings:
        """The settings with these parsed ``values`` (by name), every other at its default."""
        given = values or {}
        fields = {s.name: given.get(s.name, s.default) for s in SETTINGS}
        return cls(**fields, sources=dict(sources or {}))

    @property
    def served(self) -> bool:
        """Measure two running servers (``speculative_url`` given) instead of local engines."""
        return self.speculative_url is not None

    def get(self, name: str) -> Any:
        """A setting's value by name, for code driven by a table of setting names (and hook
        implementations); the package otherwise reads the attributes."""
        return getattr(self, BY_NAME[name].name)

    def source(self, name: str) -> str:
        return self.sources.get(name, "default")


def parse_keywords(values: Mapping[str, Any], call: str, known: tuple[str, ...]) -> GlobalSettings:
    """Settings given as keywords (``Bench(trials=...)``, ``RunRecord(save=...)``), parsed as
    the options are; errors name the keyword (``call(name=...)``)."""
    parsed: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, value in values.items():
        if name not in known:
            raise ConfigError(f"{call}({name}=...): unknown setting; known: {', '.join(known)}")
        if value is None or (BY_NAME[name].flag and value is False):
            continue
        parsed[name] = BY_NAME[name].parse(value, f"{call}({name}=...)")
        sources[name] = f"{call}({name}=...)"
    return GlobalSettings.of(parsed, sources)


def check_served_pair(settings: GlobalSettings, baseline: str, speculative: str) -> None:
    """The two server URLs go together: both (two running servers) or neither; ``baseline``
    and ``speculative`` are how the caller names them in the error."""
    if (settings.baseline_url is None) != (settings.speculative_url is None):
        raise ConfigError(
            f"{baseline} and {speculative} go together: give both (two running vLLM servers on "
            "the same target) or neither"
        )


def load_global(getoption: Callable[[str], Any], getini: Callable[[str], Any]) -> GlobalSettings:
    """Read every setting from the command line, else ini, else its default."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for setting in SETTINGS:
        raw = getoption(setting.dest)
        source = setting.option
        if raw is None:
            raw = getini(setting.ini_name)
            source = f"ini {setting.ini_name}"
            if raw in ("", None, []) or (setting.flag and raw is False):
                continue
        values[setting.name] = setting.parse(raw, source)
        sources[setting.name] = source
    return GlobalSettings.of(values, sources)
