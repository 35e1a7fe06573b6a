"""Shared-prefix traffic (issue 47): ``prompts.shared_prefix`` puts one common prefix in front
of a seeded share of the prompts (a fake load's hit rates: tests/plugin/test_plugin_load.py;
real engines: the load in tests/e2e/test_e2e.py's suite)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode import prompts
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.tiny import WEIGHTS_DIR
from pytest_specdecode.workloads import PREFIX_SEPARATOR, _prefix_pool, _tokenizer

TEXTS = [f"question {i}: what comes next?" for i in range(8)]
TARGET = WEIGHTS_DIR / "target"  # the tiny target's committed tokenizer


def carriers(shared: list[str], texts: list[str] = TEXTS) -> list[int]:
    """Which prompts carry the prefix (each other prompt must be as it was)."""
    found = []
    for i, (made, text) in enumerate(zip(shared, texts, strict=True)):
        if made != text:
            assert made.endswith(PREFIX_SEPARATOR + text), made
            found.append(i)
    return found


def head(shared: list[str], texts: list[str] = TEXTS) -> str:
    """The one prefix the carriers share."""
    heads = {
        made.removesuffix(PREFIX_SEPARATOR + text)
        for made, text in zip(shared, texts, strict=True)
        if made != text
    }
    assert len(heads) == 1, heads
    return heads.pop()


@pytest.mark.parametrize(
    ("n", "share", "count"),
    [(8, 1.0, 8), (8, 0.5, 4), (4, 0.375, 2), (4, 0.3, 1), (4, 0.125, 1), (3, 0.5, 2), (1, 0.5, 1)],
)
def test_the_share_is_rounded_to_whole_prompts_halves_up(n: int, share: float, count: int) -> None:
    texts = TEXTS[:n]
    shared = prompts.shared_prefix(texts, prefix_length=5, share=share)
    assert len(shared) == n and len(carriers(shared, texts)) == count


def test_a_larger_share_keeps_the_smaller_ones_carriers_and_the_order() -> None:
    sets = [set(carriers(prompts.shared_prefix(TEXTS, prefix_length=5, share=s))) for s in
            (0.125, 0.25, 0.5, 0.75, 1.0)]  # fmt: skip
    assert all(a < b for a, b in zip(sets, sets[1:], strict=False))
    assert sets[-1] == set(range(8))


@pytest.mark.parametrize("length", [1, 7, 300, 60_000])  # past one pass over the pool too
def test_prefix_length_counts_words_without_a_model(length: int) -> None:
    prefix = head(prompts.shared_prefix(TEXTS, prefix_length=length))
    assert len(prefix.split()) == length and prefix == prefix.strip()
    assert sum(len(t.split()) for t in _prefix_pool()) < 60_000  # so the last one reshuffled


@pytest.mark.parametrize("length", [1, 16, 128, 257, 1000])
def test_prefix_length_counts_the_models_tokens(length: int) -> None:
    prefix = head(prompts.shared_prefix(TEXTS, prefix_length=length, model=TARGET, share=0.5))
    tokenizer = _tokenizer(str(TARGET))
    assert len(tokenizer.encode(prefix, add_special_tokens=False)) == length


def test_seeded_and_deterministic() -> None:
    a = prompts.shared_prefix(TEXTS, prefix_length=50, share=0.5, seed=3)
    assert a == prompts.shared_prefix(TEXTS, prefix_length=50, share=0.5, seed=3)
    b = prompts.shared_prefix(TEXTS, prefix_length=50, share=0.5, seed=4)
    assert head(a) != head(b) and carriers(a) != carriers(b)
    # the drawn text comes from the shipped GSM8K problems, plain ASCII
    first = head(a).split("\n\n")[0]
    assert head(a).isascii() and any(p.startswith(first) for p in _prefix_pool())
    # the share changes not the text, and a longer prefix only goes on past a shorter one
    assert head(prompts.shared_prefix(TEXTS, prefix_length=50, seed=3)) == head(a)
    longer = head(prompts.shared_prefix(TEXTS, prefix_length=80, seed=3))
    assert longer.startswith(head(a))


def test_your_own_prefix_goes_in_as_it_is() -> None:
    system = "You are a support agent for ACME.\nAnswer in one sentence."
    shared = prompts.shared_prefix(TEXTS[:2], prefix=system)
    assert shared == [f"{system}\n\n{t}" for t in TEXTS[:2]]


@pytest.mark.parametrize(
    ("texts", "kwargs", "message"),
    [
        (TEXTS, {}, r"give prefix_length= \(the prefix's length: tokens with model=, words "
         r"without\) or prefix= \(your own text\)"),
        (TEXTS, {"prefix_length": 5, "prefix": "x"}, "prefix= is the prefix as it is; "
         "prefix_length= sizes a drawn one: give one of the two ways"),
        (TEXTS, {"prefix": "x", "model": TARGET}, "model= sizes a drawn one"),
        (TEXTS, {"prefix": " "}, "prefix must be a non-empty text"),
        (TEXTS, {"prefix_length": 0}, r"prefix_length must be a positive integer \(words\) of at "
         "most 10,000,000, got 0"),
        (TEXTS, {"prefix_length": 2.5, "model": TARGET}, r"positive integer \(tokens\) of at "
         "most 10,000,000, got 2.5"),
        (TEXTS, {"prefix_length": True}, "prefix_length must be a positive integer"),
        (TEXTS, {"prefix_length": 10**8}, r"positive integer \(words\) of at most 10,000,000, "
         "got 100000000"),
        (TEXTS, {"prefix_length": 5, "share": 0}, "share must be a number above 0 and at most 1 "
         r"\(the fraction of the prompts that carry the prefix\), got 0"),
        (TEXTS, {"prefix_length": 5, "share": 1.5}, "share must be a number above 0"),
        (TEXTS, {"prefix_length": 5, "share": "half"}, "share must be a number above 0"),
        (TEXTS[:3], {"prefix_length": 5, "share": 0.1}, "share=0.1 of 3 prompts rounds to none; "
         "give a share of at least 0.167, or more prompts"),
        (TEXTS, {"prefix_length": 5, "seed": "x"}, "seed must be an integer"),
        ("one text", {"prefix_length": 5}, "expected a list of text prompts"),
        ([], {"prefix_length": 5}, "the prompt list is empty"),
        (["a", ""], {"prefix_length": 5}, "prompt 1 must be a non-empty text"),
        ([{"prompt_token_ids": [1, 2]}], {"prefix_length": 5}, r"prompt 0 is a vLLM prompt "
         r"dict; give the texts, and tokenize after \(prompts.chat\(model, "
         r"shared_prefix\(texts, \.\.\.\), tokenize=True\) for a chat model\)"),
        (TEXTS, {"prefix_length": 5, "model": "/no/such/folder"},
         r"shared_prefix\('/no/such/folder'\): no such model folder"),
    ],
)  # fmt: skip
def test_bad_arguments_name_the_input_and_the_fix(
    texts: Any, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        prompts.shared_prefix(texts, **kwargs)
    assert re.match(r"shared_prefix\(", str(error.value))


def test_a_folder_without_a_tokenizer_is_named(tmp_path: Path) -> None:
    message = (
        r"^shared_prefix\('.*'\): cannot load a tokenizer .* shared_prefix\(\) never downloads: "
        "give the model's folder"
    )
    with pytest.raises(ConfigError, match=message):
        prompts.shared_prefix(TEXTS, prefix_length=5, model=tmp_path)


@pytest.mark.parametrize("model", [None, str(TARGET)])
def test_no_transformers_imported(model: str | None) -> None:
    """Words, or a folder's tokenizer.json read with tokenizers alone: no transformers (nor
    torch) in a pytest process that builds its prompts at collection."""
    code = (
        "import sys; from pytest_specdecode import prompts; "
        f"prompts.shared_prefix(['a'], prefix_length=9, model={model!r}); "
        "print('transformers' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"
