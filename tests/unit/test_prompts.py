from pathlib import Path

import pytest

from pytest_specdecode.errors import ConfigError
from pytest_specdecode.prompts import load_prompts


def test_loads_valid_file(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(
        '# comment\n{"id": "a", "prompt": "hello"}\n\n{"prompt": "x", "output_schema": {}}\n'
    )
    prompts = load_prompts(f)
    assert [p.prompt for p in prompts] == ["hello", "x"]
    assert prompts[0].source.endswith("p.jsonl:2")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "ok"}\n{"prompt": ', "line 2: not valid JSON"),
        ('{"id": "a"}', "line 1: 'prompt' is a required property"),
        ('{"prompt": ""}', "line 1: '' should be non-empty"),
        ('{"prompt": "a", "promt": "b"}', "line 1: Additional properties are not allowed"),
        ('{"prompt": 3}', "line 1: 3 is not of type 'string' \\(at prompt\\)"),
        ("\n# only a comment\n", "holds no prompt"),
    ],
)
def test_malformed_file_names_file_line_reason(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(ConfigError, match=message) as info:
        load_prompts(f)
    assert str(f) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load_prompts(tmp_path / "nope.jsonl")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n', r"line 2: not UTF-8 \(byte 0xe9 at col"),
        (b'{"prompt": "x", "id": ' + b"9" * 5000 + b"}", "line 1: a value Python cannot read"),
        (b'{"prompt": "x"}\n' + b"[" * 100_000 + b"]" * 100_000, "line 2: nested too deeply"),
    ],
    ids=["not-utf8", "5000-digit-number", "deep-nesting"],
)
def test_unreadable_line_names_file_and_line(tmp_path: Path, content: bytes, message: str) -> None:
    """What Python's decoder or parser refuses (not JSON syntax) is the same clear error, not
    a raw UnicodeDecodeError, ValueError or RecursionError."""
    f = tmp_path / "bad.jsonl"
    f.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as info:
        load_prompts(f)
    assert str(f) in str(info.value)


def test_unicode_line_separators_stay_inside_their_line(tmp_path: Path) -> None:
    # str.splitlines split on U+2028/U+2029/U+0085 too: a valid line was refused as
    # "Unterminated string" and the line numbers after it drifted (issue 43, item 10)
    f = tmp_path / "p.jsonl"
    f.write_bytes('{"prompt": "a\u2028b"}\r\n{"prompt": "c\u2029d\x85e"}\n{"prompt": 3}\n'.encode())
    with pytest.raises(ConfigError, match=r"p.jsonl, line 3: 3 is not of type"):
        load_prompts(f)
    f.write_bytes('{"prompt": "a\u2028b"}\r\n{"prompt": "c\u2029d\x85e"}\r\n'.encode())
    loaded = load_prompts(f)
    assert [p.prompt for p in loaded] == ["a\u2028b", "c\u2029d\x85e"]
    assert [p.source.rsplit(":", 1)[1] for p in loaded] == ["1", "2"]


def test_a_byte_order_mark_is_not_part_of_the_first_line(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_bytes(b'\xef\xbb\xbf# made on Windows\r\n{"prompt": "hello"}\r\n')
    assert [p.prompt for p in load_prompts(f)] == ["hello"]
    f.write_bytes(b'\xef\xbb\xbf{"prompt": "first"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(ConfigError, match=r"line 2: not UTF-8 \(byte 0xe9 at column 16\)"):
        load_prompts(f)
