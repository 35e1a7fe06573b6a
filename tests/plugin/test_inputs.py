"""Input checks of issue 16: duplicate result keys, model folders, engine arguments, prompt
lengths against ``max_model_len``, and the shapes of ``run()``'s arguments.

All refused before any engine starts: the engines are a fake source that fails if asked for
and the token counts use the committed tiny tokenizer.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import pytest_specdecode.engines.vllm_schema as vllm_schema
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.model_folder import max_model_len, tokenizer_file
from pytest_specdecode.engines.vllm_schema import (
    EngineArgsSchema,
    installed_engine_args,
    parse_engine_args,
)
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.measure.bench import Bench
from pytest_specdecode.measure.inputs import check_lengths, prompt_lengths, structured_outputs
from pytest_specdecode.plugin.marker import TestSpec as Spec
from pytest_specdecode.plugin.marker import resolve
from pytest_specdecode.settings import load_global
from pytest_specdecode.tiny import WEIGHTS_DIR

from ..e2e_support import ENGINE_KWARGS, needs_vllm
from ..fakes import FakeSource, use_fake

TINY_TARGET = WEIGHTS_DIR / "target"
TINY_TOKENIZER = TINY_TARGET / "tokenizer.json"
NGRAM = {"method": "ngram", "num_speculative_tokens": 2}


def spec_for(
    target: str = "org/target",
    speculative_config: dict[str, Any] | None = None,
    **marker: Any,
) -> Spec:
    settings = load_global(lambda d: None, lambda n: None)
    kwargs = {"target": target, "speculative_config": speculative_config or NGRAM, **marker}
    return resolve("t.py::test_a", ("structured",), kwargs, settings)


class RefusingSource(FakeSource):
    """Engines that must never be asked for: the input should be refused before."""

    def acquire(self, config: EngineConfig, **kwargs: Any) -> Any:
        raise AssertionError("an engine would have started")


@pytest.fixture
def refuse_engines() -> None:
    """Documents that the test's run() must be refused before any engine is asked for
    (:class:`RefusingSource` fails the test otherwise)."""


def specdecode_for(spec: Spec) -> Bench:
    s = spec.speculative
    return Bench(
        s.target, s.speculative_config, s.engine_kwargs, name=spec.nodeid, source=RefusingSource()
    )


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester) -> FakeSource:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return use_fake(pytester, monkeypatch)


def saved_keys(path: Path) -> list[tuple[str, str]]:
    return [(r["nodeid"], r["label"]) for r in json.loads(path.read_text())["results"]]


# -- defect 9: duplicate result keys -------------------------------------------------------

LABELS = """
import pytest
from pytest_specdecode.errors import ConfigError

SPEC = {"method": "ngram", "num_speculative_tokens": 4}
mark = pytest.mark.specdecode("s", target="org/target", speculative_config=SPEC)

@mark
def test_same_label_twice(specdecode):
    specdecode.run(["short"], max_tokens=4, label="x")
    specdecode.run(["a much longer prompt"], max_tokens=4, label="x")

@mark
def test_explicit_then_automatic(specdecode):
    specdecode.run(["p"], max_tokens=4, label="#2")
    assert specdecode.run(["p"], max_tokens=4).label == "#3"

@mark
def test_automatic_then_explicit(specdecode):
    assert specdecode.run(["p"], max_tokens=4).label == ""
    assert specdecode.run(["p"], max_tokens=4).label == "#2"
    with pytest.raises(ConfigError, match="already stored a result under the key"):
        specdecode.run(["p"], max_tokens=4, label="#2")
    with pytest.raises(ConfigError, match="key 'test_labels.py::test_automatic_then_explicit'"):
        specdecode.run(["p"], max_tokens=4, label="")

@mark
def test_sweep_twice(specdecode):
    specdecode.sweep(["p"], max_tokens=4, num_speculative_tokens=[1, 2], concurrency=[1])
    specdecode.sweep(["p"], max_tokens=4, num_speculative_tokens=[2, 4], concurrency=[1])
"""


def test_duplicate_result_keys_are_refused(pytester: pytest.Pytester, fake: FakeSource) -> None:
    pytester.makepyfile(test_labels=LABELS)
    result = pytester.runpytest_inprocess(
        "--specdecode-report", "r.json", "--specdecode-trials", "3"
    )
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_labels.py::test_same_label_twice: run(label='x'): this test already stored "
            "a result under the key 'test_labels.py::test_same_label_twice[[]x]'; give each "
            "run() of a test a distinct label*",
            "*test_labels.py::test_sweep_twice: sweep(): its result 'k=2 c=1' would be stored "
            "under the key 'test_labels.py::test_sweep_twice[[]k=2 c=1[]]', which this test's "
            "earlier sweep() holds; give each sweep() of a test a distinct label, e.g. "
            'sweep(..., label="short")*',
        ]
    )
    keys = saved_keys(pytester.path / "r.json")
    assert len(keys) == len(set(keys)), keys  # no two results under one key
    assert ("test_labels.py::test_explicit_then_automatic", "#3") in keys
    sweep_labels = [label for nodeid, label in keys if nodeid.endswith("test_sweep_twice")]
    assert sweep_labels == ["k=1 c=1", "k=2 c=1"]  # the second sweep ran nothing


def test_sweep_with_a_repeated_value_is_refused_before_it_runs(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    pytester.makepyfile(
        """
import pytest
SPEC = {"method": "ngram", "num_speculative_tokens": 4}

@pytest.mark.specdecode("s", target="org/target", speculative_config=SPEC)
def test_sweep(specdecode):
    specdecode.sweep(["p"], max_tokens=4, num_speculative_tokens=[2, 2])
"""
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*sweep(num_speculative_tokens=...): a value is listed twice*"])
    assert fake.rounds == 0


def test_label_must_be_a_string(refuse_engines: None) -> None:
    with pytest.raises(ConfigError, match=r"run\(label=...\): expected a string, got 2"):
        specdecode_for(spec_for()).run(["p"], max_tokens=4, label=2)  # type: ignore[arg-type]


@pytest.mark.parametrize("temperature", [math.inf, -math.inf, math.nan, -0.5, "0.7", True])
def test_a_temperature_must_be_a_finite_number_at_least_0(
    refuse_engines: None, temperature: Any
) -> None:
    # inf and nan were taken and stored as null in the report (issue 43, item 19)
    with pytest.raises(ConfigError, match=r"run\(temperature=...\): expected a finite number >= 0"):
        specdecode_for(spec_for()).run(["p"], max_tokens=4, temperature=temperature)


# -- defect 6 (collection part): model folders ---------------------------------------------


def model_folder(root: Path, name: str, files: dict[str, str]) -> str:
    folder = root / name
    folder.mkdir()
    for file, text in files.items():
        (folder / file).write_text(text)
    return str(folder)


def test_model_folder_without_config_json(tmp_path: Path) -> None:
    target = model_folder(tmp_path, "target", {"config.json": '{"vocab_size": 512}'})
    draft = model_folder(tmp_path, "draft", {"tokenizer.json": "{}"})
    spec = {"method": "draft_model", "model": draft, "num_speculative_tokens": 2}
    with pytest.raises(ConfigError) as info:
        spec_for(target, spec)
    message = str(info.value)
    assert message.startswith("t.py::test_a: speculative_config (from marker): model:")
    assert f"model folder {draft!r} holds no config.json" in message
    empty_target = model_folder(tmp_path, "empty", {})
    with pytest.raises(ConfigError, match=f"target .*model folder '{empty_target}' holds no"):
        spec_for(empty_target)


def test_mistral_format_folder_is_a_model_folder(tmp_path: Path) -> None:
    target = model_folder(tmp_path, "mistral", {"params.json": "{}"})
    assert spec_for(target).baseline.target == target


def test_a_file_given_as_model_folder(tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_text("")
    with pytest.raises(ConfigError, match="is a file, not a folder; give the folder that holds"):
        spec_for(str(weights))
    target = model_folder(tmp_path, "target", {"config.json": "{}"})
    spec = {"method": "draft_model", "model": str(weights), "num_speculative_tokens": 2}
    with pytest.raises(ConfigError, match="model: model folder .* is a file, not a folder"):
        spec_for(target, spec)


def test_model_folder_errors_at_setup_without_engines(pytester: pytest.Pytester) -> None:
    """Through the plugin: each bad test errors at setup, the session goes on."""
    model_folder(pytester.path, "no_config", {"tokenizer.json": "{}"})
    (pytester.path / "weights.bin").write_text("")
    pytester.makepyfile(
        """
import pytest
SPEC = {"method": "ngram", "num_speculative_tokens": 2}

@pytest.mark.specdecode("s", target="./no_config", speculative_config=SPEC)
def test_no_config(specdecode):
    pass

@pytest.mark.specdecode("s", target="./weights.bin", speculative_config=SPEC)
def test_file(specdecode):
    pass

@pytest.mark.specdecode(123, target="org/t", speculative_config=SPEC)
def test_category(specdecode):
    pass
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(
        [
            "*model folder './no_config' holds no config.json*",
            "*model folder './weights.bin' is a file, not a folder*",
            "*test_category: the category must be a string, got int 123*",
        ]
    )


# -- rough edges: category, engine_kwargs ----------------------------------------------------


@pytest.mark.parametrize(("category", "shown"), [(123, "int 123"), (["a"], "list ['a']")])
def test_category_must_be_a_string(category: Any, shown: str) -> None:
    settings = load_global(lambda d: None, lambda n: None)
    kwargs = {"target": "org/t", "speculative_config": NGRAM}
    for args, marker in (((category,), kwargs), ((), {**kwargs, "category": category})):
        with pytest.raises(ConfigError) as info:
            resolve("t.py::test_a", args, marker, settings)
        assert str(info.value).startswith("@pytest.mark.specdecode on t.py::test_a: ")
        assert f"the category must be a string, got {shown}" in str(info.value)


ARG_UTILS = """
from dataclasses import dataclass
class Base:
    max_model_len: int = 0
@dataclass
class EngineArgs(Base):
    model: str = ""
    enforce_eager: bool = False
"""
LLM_SOURCE = """
class LLM:
    def __init__(self, model: str, *, chat_template=None, **kwargs):
        pass
"""


def test_engine_arguments_read_from_source() -> None:
    schema = parse_engine_args(ARG_UTILS, LLM_SOURCE)
    assert schema is not None
    assert schema.names == {"max_model_len", "model", "enforce_eager", "chat_template"}
    # a base class from elsewhere hides fields: no schema rather than a false refusal
    elsewhere = ARG_UTILS.replace("class Base:", "class Other:")
    assert parse_engine_args(elsewhere, LLM_SOURCE) is None
    assert parse_engine_args(ARG_UTILS, "class Other: pass") is None


def test_engine_kwargs_typo_is_refused_at_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = EngineArgsSchema(frozenset({"max_model_len", "enforce_eager"}), "arg_utils.py")
    monkeypatch.setattr(vllm_schema, "installed_engine_args", lambda: schema)
    with pytest.raises(ConfigError) as info:
        spec_for(engine_kwargs={"enforce_eager": True, "max_modle_len": 512})
    assert str(info.value) == (
        "@pytest.mark.specdecode on t.py::test_a: engine_kwargs: unknown argument "
        "'max_modle_len' (did you mean 'max_model_len'?); the installed vLLM's LLM() and "
        "EngineArgs accept no such argument (arg_utils.py)"
    )
    typo = '{"max_modle_len": 512}'
    settings = load_global(
        lambda d: typo if d == "specdecode_engine_kwargs" else None, lambda n: None
    )
    with pytest.raises(ConfigError, match=r"^t.py::test_a \(--specdecode-engine-kwargs\): "):
        resolve("t.py::test_a", ("s",), {"target": "org/t", "speculative_config": NGRAM},
                settings)  # fmt: skip
    spec_for(engine_kwargs={"max_model_len": 512})  # known keys pass


@needs_vllm
def test_installed_vllm_engine_arguments() -> None:
    schema = installed_engine_args()
    assert schema is not None
    # what the e2e tests pass, what the plugin adds, and an LLM()-only argument
    wanted = {*ENGINE_KWARGS, "disable_log_stats", "speculative_config", "chat_template"}
    wanted |= {"gpu_memory_utilization", "kv_cache_memory_bytes", "tensor_parallel_size"}
    assert wanted <= schema.names
    with pytest.raises(ConfigError, match="'max_modle_len' \\(did you mean 'max_model_len'\\?\\)"):
        spec_for(engine_kwargs={"max_modle_len": 512})


# -- rough edges: prompt length and max_tokens against max_model_len ------------------------


def test_prompt_lengths_use_the_targets_tokenizer() -> None:
    lengths = prompt_lengths(
        ["hello world", {"prompt": "hello world"}, {"prompt_token_ids": [1, 2, 3]}, {}],
        TINY_TOKENIZER,
    )
    assert lengths[0] == lengths[1] and lengths[0] is not None and lengths[0] > 1
    assert lengths[2:] == [3, None]


def test_prompt_longer_than_max_model_len_is_refused_before_starting(
    refuse_engines: None,
) -> None:
    spec = spec_for(str(TINY_TARGET), engine_kwargs={"max_model_len": 64})
    long = "the quick brown fox jumps over the lazy dog " * 20
    (count,) = prompt_lengths([long], TINY_TOKENIZER)
    assert count is not None and count > 64
    with pytest.raises(ConfigError) as info:
        specdecode_for(spec).run(["short", long], max_tokens=8)
    assert str(info.value) == (
        f"t.py::test_a: run(prompts=...): prompt 1 is {count} tokens (by {TINY_TOKENIZER}); "
        f"with max_tokens=8 it needs {count + 8} positions but max_model_len is 64 "
        "(max_model_len in engine_kwargs); shorten the prompt, lower max_tokens, or raise "
        "max_model_len in engine_kwargs"
    )


def test_prompt_plus_max_tokens_must_fit(tmp_path: Path) -> None:
    """The limit from the target's config.json when engine_kwargs set none."""
    folder = tmp_path / "target"
    shutil.copytree(TINY_TARGET, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 40}))
    target = EngineConfig.create(str(folder), None, {})
    (count,) = prompt_lengths(["one two three four"], folder / "tokenizer.json")
    assert count is not None
    check_lengths(["one two three four"], 40 - count, target, "t")  # exactly fits
    with pytest.raises(ConfigError, match=f"prompt 0 is {count} tokens .* max_model_len is 40 "
                       f"\\(max_position_embeddings in {folder}/config.json\\)"):  # fmt: skip
        check_lengths(["one two three four"], 41 - count, target, "t")


def test_max_tokens_beyond_max_model_len_is_refused(tmp_path: Path, refuse_engines: None) -> None:
    """No tokenizer needed: max_tokens alone does not fit (vLLM would cap it silently)."""
    target = model_folder(tmp_path, "target", {"config.json": '{"max_position_embeddings": 2048}'})
    with pytest.raises(ConfigError) as info:
        specdecode_for(spec_for(target)).run(["p"], max_tokens=10**6)
    assert str(info.value) == (
        "t.py::test_a: run(max_tokens=1000000): does not fit the context: max_model_len is "
        f"2048 (max_position_embeddings in {target}/config.json) and every prompt takes at "
        "least one token; shorten the prompt, lower max_tokens, or raise max_model_len in "
        "engine_kwargs"
    )


@pytest.mark.parametrize(
    ("config", "engine_kwargs", "expected"),
    [
        ({"max_position_embeddings": 2048, "n_positions": 1024}, {}, 1024),
        ({"text_config": {"max_position_embeddings": 4096}}, {}, 4096),
        ({"max_position_embeddings": 2048}, {"max_model_len": 512}, 512),
        ({"max_position_embeddings": 2048}, {"max_model_len": -1}, None),
        ({"max_position_embeddings": 2048}, {"hf_overrides": {"x": 1}}, None),
        ({"max_position_embeddings": 8192, "rope_scaling": {"rope_type": "linear"}}, {}, None),
        ({"max_position_embeddings": 8192, "rope_scaling": {"rope_type": "llama3"}}, {}, 8192),
        ({}, {}, None),
    ],
)
def test_max_model_len_sources(
    tmp_path: Path, config: dict[str, Any], engine_kwargs: dict[str, Any], expected: int | None
) -> None:
    """Known where vLLM would derive the same length; unknown (no check) otherwise."""
    target = model_folder(tmp_path, "m", {"config.json": json.dumps(config)})
    found = max_model_len(target, engine_kwargs)
    assert (found and found[0]) == expected
    assert max_model_len("org/hub-model", {}) is None


def test_tokenizer_file_only_where_vllm_would_read_it(tmp_path: Path) -> None:
    target = str(TINY_TARGET)
    assert tokenizer_file(target, {}) == TINY_TOKENIZER
    assert tokenizer_file("org/hub", {"tokenizer": target}) == TINY_TOKENIZER
    assert tokenizer_file(target, {"tokenizer_mode": "mistral"}) is None
    assert tokenizer_file(target, {"skip_tokenizer_init": True}) is None
    assert tokenizer_file(model_folder(tmp_path, "bare", {"config.json": "{}"}), {}) is None


def test_counting_tokens_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys; from pytest_specdecode.measure.inputs import prompt_lengths;"
        f"n = prompt_lengths(['hello world'], __import__('pathlib').Path({str(TINY_TOKENIZER)!r}));"
        "assert n[0], n;"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'vllm')];"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_importing_the_plugin_imports_no_tokenizer_or_engine() -> None:
    code = (
        "import sys, pytest_specdecode.plugin.hooks, pytest_specdecode.plugin.fixtures;"
        "heavy = [m for m in sys.modules"
        " if m.split('.')[0] in ('torch', 'transformers', 'vllm', 'tokenizers')];"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_short_generation_is_noted(pytester: pytest.Pytester, fake: FakeSource) -> None:
    """The figures count generated tokens; a result says when fewer were made than asked."""
    pytester.makepyfile(
        """
import pytest
SPEC = {"method": "ngram", "num_speculative_tokens": 4}

@pytest.mark.specdecode("s", target="org/target", speculative_config=SPEC)
def test_short(specdecode):
    specdecode.run(["p1", "p2"], max_tokens=10, label="short")  # the fake makes 4 per prompt
    specdecode.run(["p1", "p2"], max_tokens=4, label="full")
"""
    )
    result = pytester.runpytest_inprocess("--specdecode-report", "r.json", "-s")
    result.assert_outcomes(passed=1)
    notes = {
        r["label"]: r["notes"]
        for r in json.loads((pytester.path / "r.json").read_text())["results"]
    }
    assert notes == {"short": {"generated": "8/20 tokens"}, "full": {}}
    result.stdout.fnmatch_lines(
        ["*WARNING: the baseline generated 8 of the 20 tokens asked for (max_tokens=10 x 2*"]
    )


# -- rough edges: the shapes of run()'s arguments -----------------------------------------


@pytest.mark.parametrize(
    ("prompts", "message"),
    [
        (None, "expected a list of prompts (strings or vLLM prompt dicts), got NoneType None"),
        (5, "expected a list of prompts (strings or vLLM prompt dicts), got int 5"),
        ({"prompt": "x"}, "expected a list of prompts, got a single dict; wrap it: [p]"),
        ("text", "expected a list of prompts, got a single string"),
        ([], "the prompt list is empty"),
        (["ok", 3], "prompt 1 must be a non-empty string or a vLLM prompt dict, got 3"),
    ],
)
def test_bad_prompts(prompts: Any, message: str, refuse_engines: None) -> None:
    with pytest.raises(ConfigError) as info:
        specdecode_for(spec_for()).run(prompts, max_tokens=4)
    assert str(info.value) == "run(prompts=...): " + message


def test_bad_prompts_name_the_call(refuse_engines: None) -> None:
    specdecode = specdecode_for(spec_for())
    with pytest.raises(ConfigError, match=r"^sweep\(prompts=...\): expected a list"):
        specdecode.sweep(None, max_tokens=4)  # type: ignore[arg-type]


EXPECTED = "expected a JSON Schema (a dict) or a list of them, one per prompt; got "


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("a string", EXPECTED + "str 'a string' (parse a JSON text with json.loads first)"),
        (42, EXPECTED + "int 42"),
        (["a", "b"], "schema 0 must be a JSON Schema (a dict), got str 'a'"),
        ([{"type": "object"}], "1 schemas for 2 prompts; give one schema, or one per prompt"),
    ],
)
def test_bad_json_schema(schema: Any, message: str, refuse_engines: None) -> None:
    with pytest.raises(ConfigError) as info:
        specdecode_for(spec_for()).run(["a", "b"], max_tokens=4, json_schema=schema)
    assert str(info.value) == "run(json_schema=...): " + message


def test_json_schema_shapes() -> None:
    schema = {"type": "object"}
    assert structured_outputs(None, 2) is None
    assert structured_outputs(schema, 2) == {"json": schema}
    assert structured_outputs((schema, schema), 2) == [{"json": schema}] * 2
