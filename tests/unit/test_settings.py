import dataclasses
import re
import typing
from pathlib import Path
from typing import Any

import pytest

import pytest_specdecode
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.plugin.marker import resolve
from pytest_specdecode.settings import SETTINGS, GlobalSettings, load_global, parse_keywords

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}


def settings(
    cli: dict[str, Any] | None = None, ini: dict[str, Any] | None = None
) -> GlobalSettings:
    cli, ini = cli or {}, ini or {}
    return load_global(lambda dest: cli.get(dest), lambda name: ini.get(name))


def test_precedence_marker_over_cli_over_ini_over_default() -> None:
    s = settings(
        cli={"specdecode_trials": "4"},
        ini={
            "specdecode_trials": "7",
            "specdecode_target": "org/ini-target",
            "specdecode_speculative_config": '{"method": "ngram", "num_speculative_tokens": 2}',
        },
    )
    assert s.trials == 4 and s.source("trials") == "--specdecode-trials"
    assert s.target == "org/ini-target" and s.source("target") == "ini specdecode_target"
    assert s.max_engines == 2 and s.source("max_engines") == "default"
    spec = resolve("t::a", ("structured",), {"trials": 9, "speculative_config": SPEC}, s)
    assert spec.trials == 9 and spec.sources["trials"] == "marker"
    assert spec.speculative.num_speculative_tokens == 4
    spec = resolve("t::a", ("structured",), {}, s)
    assert spec.trials == 4 and spec.speculative.num_speculative_tokens == 2
    assert spec.baseline.speculative_config is None
    assert spec.baseline.target == spec.speculative.target == "org/ini-target"


def test_one_typed_attribute_per_setting_of_its_parsers_type() -> None:
    """The typed settings hold every entry of SETTINGS, in its order, each of the type its
    parser returns (``| None`` where the default is None), with the default of the table."""
    names = [f.name for f in dataclasses.fields(GlobalSettings) if f.name != "sources"]
    assert names == [s.name for s in SETTINGS]
    hints = typing.get_type_hints(GlobalSettings)
    defaults = GlobalSettings.of()
    for setting in SETTINGS:
        parsed = typing.get_type_hints(setting.parse)["return"]
        if setting.default is None:
            assert hints[setting.name] == parsed | None, setting.name
        else:
            assert hints[setting.name] == parsed, setting.name
            assert isinstance(setting.default, parsed), setting.name
        assert getattr(defaults, setting.name) == setting.default
        assert defaults.source(setting.name) == "default"


def test_the_settings_are_frozen_and_read_by_attribute() -> None:
    s = parse_keywords(
        {"trials": "auto", "speculative_url": "http://h:1/"}, "Bench", ("trials", "speculative_url")
    )
    assert s.trials == "auto" and s.source("trials") == "Bench(trials=...)"
    assert s.served and not GlobalSettings.of().served
    assert s.get("speculative_url") == s.speculative_url == "http://h:1"  # by name: hooks
    with pytest.raises(KeyError):
        s.get("trails")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.trials = 3  # type: ignore[misc]
    package = Path(pytest_specdecode.__file__).parent
    by_name = [
        f"{path.relative_to(package)}: {m.group()}"
        for path in sorted(package.rglob("*.py"))
        for m in re.finditer(r"settings\.get\([\"']\w+[\"']\)", path.read_text())
    ]
    assert not by_name, "read the attribute instead: " + ", ".join(by_name)


def test_engine_kwargs_merge_key_by_key() -> None:
    s = settings(
        cli={
            "specdecode_engine_kwargs": '{"dtype": "float32", "max_model_len": 512}',
            "specdecode_target": "org/t",
        }
    )
    spec = resolve(
        "t::a", ("c",), {"speculative_config": SPEC, "engine_kwargs": {"max_model_len": 1024}}, s
    )
    assert spec.baseline.engine_kwargs == {"dtype": "float32", "max_model_len": 1024}
    assert spec.baseline.engine_kwargs == spec.speculative.engine_kwargs


@pytest.mark.parametrize(
    ("cli", "ini", "message"),
    [
        ({"specdecode_trials": "x"}, {}, "--specdecode-trials: expected a positive integer"),
        ({}, {"specdecode_trials": "1"}, "ini specdecode_trials: at least 2 trials"),
        (
            {"specdecode_speculative_config": "{bad"},
            {},
            "--specdecode-speculative-config: not valid JSON",
        ),
        ({"specdecode_speculative_config": "[1]"}, {}, "expected a JSON object"),
        ({"specdecode_timeout": "-3"}, {}, "--specdecode-timeout: expected a positive number"),
        # caps on rounds are numbers: "auto" is for --specdecode-trials only
        (
            {"specdecode_max_trials": "auto"},
            {},
            "--specdecode-max-trials: expected a positive integer, got 'auto'",
        ),
        (
            {},
            {"specdecode_compare_max_trials": "auto"},
            "ini specdecode_compare_max_trials: expected a positive integer, got 'auto'",
        ),
    ],
)
def test_bad_values_name_their_source(
    cli: dict[str, Any], ini: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        settings(cli, ini)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_sppedup": 2}, "unknown keyword 'min_sppedup'"),
        ({"min_speedup": -1}, "min_speedup must be at least 0, got -1"),
        ({"min_speedup": 0}, "min_speedup must be greater than 0"),
        ({"min_acceptance_rate": 1.5}, "min_acceptance_rate must be between 0 and 1, got 1.5"),
        ({"min_match_rate": "all"}, "min_match_rate must be a number"),
        ({"speculative_config": {"method": "ngram"}}, "num_speculative_tokens is missing"),
        ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 0}}, ">= 1"),
        ({"speculative_config": {"num_speculative_tokens": 3}}, "no proposer"),
        ({"engine_kwargs": {"model": "x"}}, "must not contain 'model'"),
        ({"trials": 1}, "at least 2 trials"),
    ],
)
def test_marker_validation_names_the_test_and_keyword(kwargs: dict[str, Any], message: str) -> None:
    s = settings(cli={"specdecode_target": "org/t"})
    kwargs = {"speculative_config": SPEC, **kwargs}
    with pytest.raises(ConfigError, match=message) as info:
        resolve("tests/t.py::test_a", ("structured",), kwargs, s)
    assert "tests/t.py::test_a" in str(info.value)


def test_missing_target_and_category_explain_the_fix() -> None:
    with pytest.raises(ConfigError, match="--specdecode-target"):
        resolve("t::a", ("c",), {"speculative_config": SPEC}, settings())
    with pytest.raises(ConfigError, match="a category is required"):
        resolve("t::a", (), {"speculative_config": SPEC, "target": "org/t"}, settings())
    with pytest.raises(ConfigError, match="no speculative config"):
        resolve("t::a", ("c",), {"target": "org/t"}, settings())


def test_engine_configs_identify_engines() -> None:
    s = settings(cli={"specdecode_target": "org/t"})
    a = resolve("t::a", ("c",), {"speculative_config": SPEC}, s)
    b = resolve("t::b", ("d",), {"speculative_config": dict(reversed(list(SPEC.items())))}, s)
    assert a.speculative.key == b.speculative.key
    assert a.baseline.key == b.baseline.key != a.speculative.key
    assert a.speculative.method == "ngram" and a.speculative.draft is None


def test_every_marker_threshold_is_a_documented_marker_keyword() -> None:
    from pytest_specdecode.settings import MARKER_KEYWORD_HELP, MARKER_THRESHOLDS

    assert set(MARKER_THRESHOLDS) <= set(MARKER_KEYWORD_HELP)
    assert all(text.strip() for text in MARKER_KEYWORD_HELP.values())
