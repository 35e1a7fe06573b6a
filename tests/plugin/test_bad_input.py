"""Bad input is reported before any engine starts, naming the source and the fix."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode import Bench
from pytest_specdecode.engines.vllm_schema import installed_schema, parse_schema
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.plugin.marker import resolve
from pytest_specdecode.settings import load_global

from ..e2e_support import needs_vllm
from ..fakes import use_fake
from ..helpers import fake_find_spec

FAKE_SOURCE = """
from typing import Literal
Eagle = Literal["eagle", "eagle3"]
Method = Literal["ngram", "draft_model", Eagle]
class SpeculativeConfig:
    num_speculative_tokens: int = 0
    model: str | None = None
    method: Method | None = None
    prompt_lookup_max: int | None = None
"""


#: The shape of vLLM 0.32's rule for a missing ``model`` (``SpeculativeConfig.__post_init__``).
RULE_SOURCE = """
from typing import Literal, get_args
Mtp = Literal["deepseek_mtp", "mtp"]
Method = Literal["ngram", "draft_model", "eagle", "suffix", "custom_class", Mtp]
class SpeculativeConfig:
    num_speculative_tokens: int | None = None
    model: str | None = None
    method: Method | None = None
    def __post_init__(self):
        if self.method in get_args(Mtp) and self.method != "mtp":
            self.method = "mtp"
        if self.model is None and self.num_speculative_tokens is not None:
            if self.method == "mtp":
                if self.target_model_config is None:
                    raise ValueError("target_model_config must be present for mtp")
                self.model = self.target_model_config.model
            elif self.method in ("ngram", "[ngram]"):
                self.model = "ngram"
            elif self.method == "suffix":
                self.model = "suffix"
            elif self.method == "custom_class":
                if self.model is None:
                    raise ValueError("custom_class requires model")
            else:
                raise ValueError("num_speculative_tokens was provided but without model.")
"""


NGRAM = {"method": "ngram", "num_speculative_tokens": 3}


def model_dir(root: Path, name: str, vocab: int) -> str:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"vocab_size": vocab}))
    return str(folder)


def resolve_with(spec: dict[str, Any], target: str = "org/target") -> Any:
    settings = load_global(lambda d: None, lambda n: None)
    return resolve("t.py::test_a", ("structured",), {"target": target, "speculative_config": spec},
                   settings)  # fmt: skip


def test_schema_is_read_from_source_without_importing() -> None:
    schema = parse_schema(FAKE_SOURCE)
    assert schema is not None
    assert schema.fields == {"num_speculative_tokens", "model", "method", "prompt_lookup_max"}
    assert schema.methods == {"ngram", "draft_model", "eagle", "eagle3"}


def test_which_methods_need_a_model_is_read_from_source() -> None:
    """Branches that fill ``model`` in need none (an alias follows its new name); a branch
    that raises, or the final else, needs one; an unreadable rule checks nothing."""
    schema = parse_schema(RULE_SOURCE)
    assert schema is not None
    assert schema.model_free == frozenset({"ngram", "suffix", "mtp", "deepseek_mtp"})
    assert [m for m in sorted(schema.methods) if schema.needs_model(m)] == [
        "custom_class", "draft_model", "eagle"
    ]  # fmt: skip
    unreadable = parse_schema(RULE_SOURCE.replace("self.model is None and ", ""))
    assert unreadable is not None and unreadable.model_free is None
    assert not unreadable.needs_model("eagle")
    no_rule = parse_schema(FAKE_SOURCE)
    assert no_rule is not None and no_rule.model_free is None


@needs_vllm
def test_installed_vllm_rule_for_a_missing_model() -> None:
    schema = installed_schema()
    assert schema is not None and schema.model_free is not None
    needs = {m for m in schema.methods if schema.needs_model(m)}
    assert {"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator", "custom_class"} <= needs
    assert {"ngram", "ngram_gpu", "suffix", "mtp", "deepseek_mtp"} <= schema.model_free


@needs_vllm
def test_installed_vllm_schema() -> None:
    schema = installed_schema()
    assert schema is not None
    assert {"num_speculative_tokens", "method", "model", "prompt_lookup_max"} <= schema.fields
    assert {"ngram", "draft_model", "eagle3"} <= schema.methods


@needs_vllm
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_mx": 4},
         "unknown key 'prompt_lookup_mx' \\(did you mean 'prompt_lookup_max'\\?\\)"),
        ({"method": "draft", "model": "org/d", "num_speculative_tokens": 4},
         "unknown method 'draft' \\(did you mean 'draft_model'\\?\\)"),
        ({"method": "draft_model", "num_speculative_tokens": 4}, 'needs "model"'),
        ({"method": "eagle", "num_speculative_tokens": 3},
         'method "eagle" needs "model": .*add "model": "<path or hub id of an EAGLE head'),
        ({"method": "eagle3", "num_speculative_tokens": 3, "model": ""},
         'method "eagle3" needs "model".*EAGLE-3 head'),
        ({"method": "medusa", "num_speculative_tokens": 3}, 'method "medusa" needs "model"'),
        ({"method": "custom_class", "num_speculative_tokens": 3},
         'method "custom_class" needs "model".*dotted import path'),
    ],
)  # fmt: skip
def test_speculative_config_checked_against_installed_vllm(
    spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        resolve_with(spec)
    assert str(info.value).startswith("t.py::test_a: speculative_config (from marker)")


@needs_vllm
@pytest.mark.parametrize("method", ["ngram", "ngram_gpu", "suffix", "mtp", "deepseek_mtp"])
def test_methods_that_need_no_model_pass(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_find_spec(monkeypatch, arctic_inference=True)  # suffix's package, absent in CI
    resolve_with({"method": method, "num_speculative_tokens": 3})


@needs_vllm
def test_a_proposer_without_its_model_is_refused_by_bench_and_choose_draft() -> None:
    """The one check serves Bench and choose_draft too, without importing vLLM."""
    imported = "vllm" in sys.modules
    eagle = {"method": "eagle", "num_speculative_tokens": 3}
    with pytest.raises(ConfigError, match=r'Bench\(speculative_config=...\): method "eagle"'):
        Bench("org/target", eagle)
    with pytest.raises(ConfigError, match=r"candidates\['head'\]\): method \"eagle\" needs"):
        Bench("org/target", NGRAM).choose_draft(
            ["p"], {"ngram": NGRAM, "head": eagle}, max_tokens=4
        )
    assert ("vllm" in sys.modules) == imported


def test_missing_local_models(tmp_path: Path) -> None:
    spec = {"method": "draft_model", "model": str(tmp_path / "nope"), "num_speculative_tokens": 2}
    with pytest.raises(ConfigError, match="model folder .*nope' does not exist"):
        resolve_with(spec, target=model_dir(tmp_path, "target", 512))
    with pytest.raises(ConfigError, match="target.*model folder '/no/such/target' does not exist"):
        resolve_with({"method": "ngram", "num_speculative_tokens": 2}, target="/no/such/target")


def test_draft_vocabulary_must_match(tmp_path: Path) -> None:
    target = model_dir(tmp_path, "target", 512)
    draft = model_dir(tmp_path, "draft", 1024)
    spec = {"method": "draft_model", "model": draft, "num_speculative_tokens": 2}
    with pytest.raises(ConfigError, match="vocab_size 1024 but the target .* has 512"):
        resolve_with(spec, target=target)
    same = model_dir(tmp_path, "same", 512)
    resolve_with({**spec, "model": same}, target=target)


def test_config_errors_fail_at_setup_fast(pytester: pytest.Pytester) -> None:
    """A bad marker errors its test at setup; the session goes on, no engine starts."""
    pytester.makepyfile(
        """
import pytest

@pytest.mark.specdecode("s", target="/no/such/model",
                        speculative_config={"method": "ngram", "num_speculative_tokens": 2})
def test_missing_model(specdecode):
    specdecode.run(["x"], max_tokens=2)

@pytest.mark.specdecode("s", target="org/t", min_acceptance_rate=1.5,
                        speculative_config={"method": "ngram", "num_speculative_tokens": 2})
def test_bad_threshold(specdecode):
    specdecode.run(["x"], max_tokens=2)

def test_other():
    pass
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdecode-report", "r.json")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*model folder '/no/such/model' does not exist*",
            "*min_acceptance_rate must be between 0 and 1, got 1.5*",
        ]
    )
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["session"]["engine_starts"] == 0, result.stdout.str()


@needs_vllm
def test_a_marker_proposer_without_its_model_errors_at_setup(pytester: pytest.Pytester) -> None:
    """The installed vLLM's rule refuses an EAGLE marker with no head before any engine."""
    pytester.makepyfile(
        """
import pytest

@pytest.mark.specdecode("s", target="org/t",
                        speculative_config={"method": "eagle", "num_speculative_tokens": 3})
def test_eagle_without_head(specdecode):
    specdecode.run(["x"], max_tokens=2)
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(['*method "eagle" needs "model"*add "model": "<path or hub id*'])


def test_suffix_without_its_package_errors_at_setup_before_any_start(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suffix marker where arctic_inference is missing errors at setup, naming the install
    command and its cost, and no engine starts (vLLM would say so only once one had)."""
    source = use_fake(pytester, monkeypatch)
    fake_find_spec(monkeypatch, arctic_inference=False)
    pytester.makepyfile(
        """
import pytest

@pytest.mark.specdecode("s", target="org/t",
                        speculative_config={"method": "suffix", "num_speculative_tokens": 4})
def test_suffix(specdecode):
    specdecode.run(["x"], max_tokens=2)

def test_other():
    pass
"""
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            '*test_suffix*speculative_config*: method "suffix" needs the module '
            "'arctic_inference'*`pip install arctic-inference==0.1.1`*about 3 GB*"
            "docs/writing-tests.md#suffix-decoding"
        ]
    )
    assert source.starts == 0
