"""Bad input is reported before any engine starts, naming the source and the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode.engines.vllm_schema import installed_schema, parse_schema
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.plugin.marker import resolve
from pytest_specdecode.settings import load_global

from .e2e_support import needs_vllm

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
    ],
)  # fmt: skip
def test_speculative_config_checked_against_installed_vllm(
    spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        resolve_with(spec)
    assert str(info.value).startswith("t.py::test_a: speculative_config (from marker)")


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
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*model folder '/no/such/model' does not exist*",
            "*min_acceptance_rate must be between 0 and 1, got 1.5*",
        ]
    )
    assert result.duration < 10
