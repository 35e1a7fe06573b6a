"""Standard workloads offline (issue 29): the shipped sets, the user's own files, chat templates."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pytest_specdecode import prompts
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.tiny import WEIGHTS_DIR
from pytest_specdecode.workloads import STANDARD_SETS, _records

PACKAGE = Path(prompts.__file__).resolve().parent
MT_BENCH_CATEGORIES = {
    "writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities",
}  # fmt: skip


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a network connection fails the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args!r:.120}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    _records.cache_clear()  # read the files now, under the fixture


def test_standard_sets_offline_counts(no_network: None) -> None:
    mt = prompts.standard("mt-bench")
    assert len(mt) == 80 and len(set(mt)) == 80
    assert mt[0].startswith("Compose an engaging travel blog post about a recent trip to Hawaii")
    for category in MT_BENCH_CATEGORIES:
        assert len(prompts.standard("mt-bench", category=category)) == 10, category
    assert set(STANDARD_SETS["mt-bench"].categories) == MT_BENCH_CATEGORIES
    second = prompts.standard("mt-bench", turn=2)
    assert len(second) == 80 and second[0].startswith("Rewrite your previous response")
    code = prompts.standard("humaneval")
    assert len(code) == 164 and code[0].startswith("from typing import List")
    assert "def has_close_elements" in code[0]
    assert prompts.standard("humaneval", category="code") == code
    math = prompts.standard("gsm8k")
    assert len(math) == 1319 and math[0].startswith("Janet\u2019s ducks lay 16 eggs per day.")
    assert prompts.standard("gsm8k", category="math") == math
    assert all(isinstance(p, str) and p for p in mt + second + code + math)


def test_categories_across_sets_are_counted() -> None:
    counts = Counter(category for category, _ in _records("mt-bench"))
    assert counts == dict.fromkeys(MT_BENCH_CATEGORIES, 10)


def test_sampling_is_seeded_and_within_the_set() -> None:
    a = prompts.standard("gsm8k", n=20, seed=1)
    assert a == prompts.standard("gsm8k", n=20, seed=1)
    assert a != prompts.standard("gsm8k", n=20, seed=2)
    assert len(set(a)) == 20 and set(a) <= set(prompts.standard("gsm8k"))
    coding = prompts.standard("mt-bench", category="coding", n=10, seed=3)
    assert sorted(coding) == sorted(prompts.standard("mt-bench", category="coding"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "sharegpt"}, "unknown set; the sets shipped: mt-bench, humaneval, gsm8k"),
        ({"name": "mt-bench", "category": "code"}, "unknown category 'code'; its categories: "
         "writing, roleplay, reasoning, math, coding, extraction, stem, humanities"),
        ({"name": "gsm8k", "category": "coding"}, "its categories: math"),
        ({"name": "humaneval", "turn": 2}, "turn must be 1 \\(its prompts have one turn\\)"),
        ({"name": "mt-bench", "turn": 3}, "turn must be 1 or 2, got 3"),
        ({"name": "mt-bench", "category": "math", "n": 11}, "n must be between 1 and 10"),
        ({"name": "gsm8k", "n": 0}, "n must be between 1 and 1319"),
    ],
)  # fmt: skip
def test_bad_standard_arguments_list_the_choices(kwargs: dict[str, object], message: str) -> None:
    name = kwargs.pop("name")
    with pytest.raises(ConfigError, match=message):
        prompts.standard(str(name), **kwargs)  # type: ignore[arg-type]


def test_every_set_ships_its_licence_and_source() -> None:
    for spec in STANDARD_SETS.values():
        folder = (PACKAGE / "data" / spec.file).parent
        assert (PACKAGE / "data" / spec.file).stat().st_size > 0
        assert "Permission is hereby granted" in (folder / "LICENSE").read_text() or (
            "Apache License" in (folder / "LICENSE").read_text()
        )
        source = (folder / "SOURCE.md").read_text()
        assert "https://github.com/" in source and "commit" in source


# -- the user's own files ----------------------------------------------------------------------
def test_from_file_reads_the_three_formats(tmp_path: Path) -> None:
    jsonl = tmp_path / "custom.jsonl"
    jsonl.write_text('{"prompt": "What is the capital of India?", "output_tokens": 10}\n\n'
                     '{"prompt": "second"}\n')  # fmt: skip
    assert prompts.from_file(jsonl) == ["What is the capital of India?", "second"]
    sharegpt = tmp_path / "sharegpt.json"
    sharegpt.write_text(json.dumps([
        {"id": "a", "conversations": [{"from": "human", "value": "hello"},
                                      {"from": "gpt", "value": "hi"}]},
        {"id": "b", "conversations": []},
        {"id": "c", "conversations": [{"from": "system", "value": "be nice"},
                                      {"from": "human", "value": "second"}]},
    ], indent=2))  # fmt: skip
    assert prompts.from_file(sharegpt) == ["hello", "second"]
    text = tmp_path / "prompts.txt"
    text.write_text("one prompt\n\n  two  \n")
    assert prompts.from_file(text) == ["one prompt", "  two  "]
    assert prompts.from_file(jsonl, format="text") == jsonl.read_text().split("\n\n")[0:1] + [
        '{"prompt": "second"}'
    ]


def test_from_file_splits_lines_on_newlines_only_and_drops_a_byte_order_mark(
    tmp_path: Path,
) -> None:
    # str.splitlines split on U+2028, U+2029 and U+0085 too, and the BOM stayed in the first
    # prompt (a ShareGPT file with one was not "a JSON list"): issue 43, item 10
    bom = b"\xef\xbb\xbf"
    text = tmp_path / "p.txt"
    text.write_bytes(bom + "one\u2028line\r\ntwo\x85three\n\nfour\u2029five\r\n".encode())
    assert prompts.from_file(text) == ["one\u2028line", "two\x85three", "four\u2029five"]
    jsonl = tmp_path / "p.jsonl"
    rows = ['{"prompt": "a\u2028b"}', '{"prompt": "c\u2029d\x85e"}']
    jsonl.write_bytes(bom + "\r\n".join(rows).encode())
    assert prompts.from_file(jsonl) == ["a\u2028b", "c\u2029d\x85e"]
    jsonl.write_bytes(bom + "\n".join([*rows, '{"text": "x"}']).encode())
    with pytest.raises(ConfigError, match='p.jsonl, line 3: expected an object with a "prompt"'):
        prompts.from_file(jsonl)
    sharegpt = tmp_path / "p.json"
    entries = [{"conversations": [{"from": "human", "value": "hi\u2028there"}]}, {"x": 1}]
    sharegpt.write_bytes(bom + json.dumps(entries, indent=1, ensure_ascii=False).encode())
    with pytest.raises(ConfigError, match='p.json, line 10: expected \\{"conversations"'):
        prompts.from_file(sharegpt)
    sharegpt.write_bytes(bom + json.dumps(entries[:1], ensure_ascii=False).encode())
    assert prompts.from_file(sharegpt) == ["hi\u2028there"]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.jsonl", '{"prompt": "ok"}\n{"prompt": ', 'line 2: not valid JSON .*expected '
         '\\{"prompt": "..."\\}'),
        ("a.jsonl", '{"prompt": "ok"}\n\n{"text": "x"}', 'line 3: expected an object with a '
         '"prompt" key'),
        ("a.jsonl", '{"prompt": 3}', 'line 1: "prompt" must be a non-empty string, got 3'),
        ("a.jsonl", "\n\n", "holds no prompt \\(read as jsonl\\)"),
        ("a.json", '{"conversations": []}', "line 1: expected a JSON list"),
        ("a.json", '[\n {"conversations": [{"from": "human", "value": "a"}]},\n {"convs": []}\n]',
         'line 3: expected \\{"conversations"'),
        ("a.json", '[\n {"conversations": [\n  {"from": "human", "value": ""}]}]',
         "line 2: a human turn's \"value\" must be a non-empty string"),
        ("a.json", '[\n {"conversations": [{"from": "human", "value": "a"}]},\n {"x": ]',
         "line 3: not valid JSON"),
        ("a.json", '[{"conversations": [{"from": "human", "value": "a"}]}', "not closed"),
        ("a.json", '[{"conversations": [{"from": "gpt", "value": "a"}]}]', "holds no prompt"),
        ("a.txt", "\n \n", "holds no prompt \\(read as text\\)"),
    ],
)  # fmt: skip
def test_bad_files_name_file_and_line(
    tmp_path: Path, name: str, content: str, message: str
) -> None:
    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(ConfigError, match=message) as info:
        prompts.from_file(f)
    assert f"prompt file {f}" in str(info.value)


def test_from_file_unreadable_and_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"prompt file {tmp_path / 'nope.txt'}: cannot be read"):
        prompts.from_file(tmp_path / "nope.txt")
    (tmp_path / "bin.txt").write_bytes(b"fine\n\xff\xfe\n")
    with pytest.raises(ConfigError, match="bin.txt, line 2: not UTF-8"):
        prompts.from_file(tmp_path / "bin.txt")
    with pytest.raises(ConfigError, match="unknown format; known: jsonl, sharegpt, text"):
        prompts.from_file(tmp_path / "bin.txt", format="csv")


# -- chat templates ----------------------------------------------------------------------------
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _tokenizer_folder(root: Path, template: str | None) -> Path:
    """The tiny models' tokenizer in a folder of its own, with ``template`` as chat template."""
    folder = root / "tok"
    folder.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(WEIGHTS_DIR / "target" / f, folder / f)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)  # the tiny models' own
    if template is not None:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_chat_applies_the_folders_template(tmp_path: Path, no_network: None) -> None:
    folder = _tokenizer_folder(tmp_path, TEMPLATE)
    texts = prompts.chat(folder, ["hi there", [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]], system="be brief")  # fmt: skip
    assert texts == [
        "<s><|system|>be brief\n<|user|>hi there\n<|assistant|>",
        "<s><|system|>be brief\n<|user|>a\n<|assistant|>b\n<|user|>c\n<|assistant|>",
    ]
    (tokens,) = prompts.chat(str(folder), ["hi there"], tokenize=True)
    ids = tokens["prompt_token_ids"]
    assert ids[0] == 0 and ids.count(0) == 1  # the template's <s>, not a second one
    mt = prompts.chat(folder, prompts.standard("mt-bench", n=3))
    assert all(t.startswith("<s><|user|>") and t.endswith("<|assistant|>") for t in mt)


def test_chat_without_a_template_is_a_clear_error(tmp_path: Path) -> None:
    folder = _tokenizer_folder(tmp_path, None)
    with pytest.raises(ConfigError, match="has no chat template .* Use the raw prompts"):
        prompts.chat(folder, ["hi"])


@pytest.mark.parametrize(
    ("model", "items", "message"),
    [
        ("/no/such/folder", ["hi"], "no such model folder"),
        ("tok", "hi", "expected a list of texts or conversations"),
        ("tok", [], "the list of texts or conversations is empty"),
        ("tok", ["hi", ""], "item 1 is an empty text"),
        ("tok", [[{"role": "user"}]], "item 0 must be a text or a list of"),
    ],
)
def test_chat_bad_arguments(tmp_path: Path, model: str, items: object, message: str) -> None:
    folder = _tokenizer_folder(tmp_path, TEMPLATE)
    with pytest.raises(ConfigError, match=message):
        prompts.chat(folder if model == "tok" else model, items)  # type: ignore[arg-type]


# Qwen3's template, cut to what matters here: enable_thinking=False closes an empty think block
# after the generation prompt, so the model answers at once instead of reasoning first.
QWEN3_STYLE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)


def test_chat_passes_template_arguments(tmp_path: Path, no_network: None) -> None:
    folder = _tokenizer_folder(tmp_path, QWEN3_STYLE)
    (thinking,) = prompts.chat(folder, ["hi"])
    (direct,) = prompts.chat(folder, ["hi"], enable_thinking=False)
    assert thinking == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert direct == thinking + "<think>\n\n</think>\n\n"
    assert prompts.chat(folder, ["hi"], enable_thinking=True) == [thinking]
    (tokens,) = prompts.chat(folder, ["hi"], tokenize=True, enable_thinking=False)
    (plain,) = prompts.chat(folder, ["hi"], tokenize=True)
    assert len(tokens["prompt_token_ids"]) > len(plain["prompt_token_ids"])
    assert tokens["prompt_token_ids"][: len(plain["prompt_token_ids"])] == plain["prompt_token_ids"]


def test_chat_template_arguments_past_a_tag_plain_jinja_cannot_parse(tmp_path: Path) -> None:
    """transformers' ``{% generation %}`` tag defeats the unread-name check: the argument still
    reaches the template."""
    template = QWEN3_STYLE.replace(
        "{% endfor %}", "{% endfor %}{% generation %}{% endgeneration %}"
    )
    folder = _tokenizer_folder(tmp_path, template)
    (text,) = prompts.chat(folder, ["hi"], enable_thinking=False)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.parametrize(
    ("template_kwargs", "message"),
    [
        ({"enable_thinkng": False}, r"the model's chat template does not read enable_thinkng, "
         r"so passing it changes nothing; it reads: add_generation_prompt, enable_thinking, "
         r"messages\. Check the spelling"),
        ({"chat_template_kwargs": {"enable_thinking": False}},
         r"chat_template_kwargs= would reach the template as one variable .* unpack the "
         r"mapping instead: chat\(\.\.\., \*\*chat_template_kwargs\)"),
        ({"enable-thinking": False},
         r"template argument 'enable-thinking' is not a name a Jinja template can read"),
        ({"add_generation_prompt": False}, r"add_generation_prompt= is not a template argument: "
         r"chat\(\) always ends with the generation prompt"),
        ({"return_dict": True}, r"return_dict= is not a template argument: chat\(\) returns "
         r"texts, or token prompts with tokenize=True"),
        ({"messages": []}, r"messages= is not a template argument: the messages are the items"),
        ({"chat_template": "{{ messages }}"}, r"chat_template= is not a template argument: "
         r"chat\(\) applies the model's own template"),
    ],
)  # fmt: skip
def test_chat_bad_template_arguments(
    tmp_path: Path, template_kwargs: dict[str, object], message: str
) -> None:
    folder = _tokenizer_folder(tmp_path, QWEN3_STYLE)
    with pytest.raises(ConfigError, match=rf"^chat\('{re.escape(str(folder))}'\): {message}"):
        prompts.chat(folder, ["hi"], **template_kwargs)


def test_importing_prompts_imports_no_transformers() -> None:
    code = (
        "import sys; from pytest_specdecode import prompts; prompts.standard('mt-bench');"
        "print('transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- the example suite's table on the docs page -----------------------------------------------
def test_standard_sets_table_renders_the_suites_rows() -> None:
    import runpy

    render = runpy.run_path(str(PACKAGE.parent / "scripts" / "render_docs.py"), run_name="x")
    row = {
        "nodeid": "example_suites/test_standard_sets.py::test_mt_bench_by_category",
        "category": "mt-bench", "label": "coding", "num_prompts": 8, "speedup": 1.234,
        "speedup_ci": [1.1, 1.3], "acceptance_rate": 0.5, "mean_acceptance_length": 2.75,
        "match_rate": 1.0,
    }  # fmt: skip
    other = {**row, "nodeid": "example_suites/test_creative.py::test_story_continuation"}
    table = render["standard_sets_table"]({"results": [other, row]})
    assert table.splitlines()[2:] == [
        "| mt-bench | coding | 8 | 1.23x [1.10-1.30] | 0.50 | 2.75 | 1.00 |"
    ]
    assert "Not in the recorded run" in render["standard_sets_table"]({"results": [other]})
