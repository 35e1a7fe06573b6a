"""Standard workloads offline: MT-Bench, HumanEval and GSM8K shipped in the package, the user's
own prompt files (vLLM's custom JSONL, ShareGPT JSON, plain text), chat templates and
shared-prefix traffic.

Reached as ``pytest_specdecode.prompts.standard``, ``prompts.from_file``, ``prompts.chat`` and
``prompts.shared_prefix``. The data sets live in ``pytest_specdecode/data/<set>/``
(gzip-compressed, each beside its ``LICENSE`` and ``SOURCE.md``) and are read without network.
``chat`` imports transformers only when called (``shared_prefix`` reads a folder's
``tokenizer.json`` with ``tokenizers`` alone).
"""

from __future__ import annotations

import codecs
import gzip
import importlib.util
import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = [
    "STANDARD_SETS",
    "StandardSet",
    "chat",
    "conversations_from_file",
    "from_file",
    "shared_prefix",
    "standard",
    "standard_conversations",
]


@dataclass(frozen=True)
class StandardSet:
    """One shipped data set: where its file is, which field is the prompt, its categories."""

    name: str
    #: The data file under ``pytest_specdecode/data/`` (JSON Lines, gzip-compressed).
    file: str
    #: The categories, usable as the ``specdecode`` marker's workload category.
    categories: tuple[str, ...]
    #: How many prompts the set holds (checked when it is read).
    size: int
    #: How many turns each prompt has (MT-Bench: 2).
    turns: int = 1


#: The data sets ``standard()`` knows, by name.
STANDARD_SETS: dict[str, StandardSet] = {
    s.name: s
    for s in (
        StandardSet(
            "mt-bench",
            "mt-bench/question.jsonl.gz",
            (
                "writing",
                "roleplay",
                "reasoning",
                "math",
                "coding",
                "extraction",
                "stem",
                "humanities",
            ),
            size=80,
            turns=2,
        ),  # fmt: skip
        StandardSet("humaneval", "humaneval/HumanEval.jsonl.gz", ("code",), size=164),
        StandardSet("gsm8k", "gsm8k/test.jsonl.gz", ("math",), size=1319),
    )
}


@cache
def _records(name: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(category, turns)`` of every item of a shipped set, in file order."""
    spec = STANDARD_SETS[name]
    raw = resources.files("pytest_specdecode").joinpath("data", spec.file).read_bytes()
    items = []
    for line in file_lines(gzip.decompress(raw).decode("utf-8")):
        if not line.strip():
            continue
        row = json.loads(line)
        if name == "mt-bench":
            items.append((str(row["category"]), tuple(str(t) for t in row["turns"])))
        elif name == "humaneval":
            items.append(("code", (str(row["prompt"]),)))
        else:
            items.append(("math", (str(row["question"]),)))
    if len(items) != spec.size:  # a damaged install, not a user error
        raise ConfigError(
            f"standard({name!r}): pytest_specdecode/data/{spec.file} holds {len(items)} "
            f"prompts, expected {spec.size}; reinstall pytest-specdecode"
        )
    return tuple(items)


def standard(
    name: str,
    *,
    category: str | None = None,
    n: int | None = None,
    seed: int = 0,
    turn: int = 1,
) -> list[str]:
    """The prompts of a standard set as raw text, read from the package (no network).

    ``name`` is ``"mt-bench"`` (80 two-turn questions, 10 in each of 8 categories),
    ``"humaneval"`` (164 Python problems, category ``"code"``) or ``"gsm8k"`` (the 1,319
    test problems, category ``"math"``). ``category`` keeps one category; ``n`` draws that many
    prompts at random (``seed``; without ``n`` the set's own order); ``turn`` picks MT-Bench's
    first or second question (the second alone, without the first answer: for a conversation,
    build the messages and use :func:`chat`).
    """
    where = f"standard({name!r})"
    if name not in STANDARD_SETS:
        raise ConfigError(
            f"standard({name!r}): unknown set; the sets shipped: {', '.join(STANDARD_SETS)}"
        )
    spec = STANDARD_SETS[name]
    if category is not None and category not in spec.categories:
        raise ConfigError(
            f"{where}: unknown category {category!r}; its categories: {', '.join(spec.categories)}"
        )
    if isinstance(turn, bool) or not isinstance(turn, int) or not 1 <= turn <= spec.turns:
        allowed = "1 or 2" if spec.turns == 2 else "1 (its prompts have one turn)"
        raise ConfigError(f"{where}: turn must be {allowed}, got {turn!r}")
    prompts = [turns[turn - 1] for cat, turns in _records(name) if category in (None, cat)]
    if n is None:
        return prompts
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(prompts):
        chosen = f"category {category!r} of {name}" if category else name
        raise ConfigError(f"{where}: n must be between 1 and {len(prompts)} ({chosen}), got {n!r}")
    return random.Random(seed).sample(prompts, n)


def standard_conversations(
    name: str = "mt-bench",
    *,
    category: str | None = None,
    n: int | None = None,
    seed: int = 0,
) -> list[tuple[str, ...]]:
    """The user turns of a multi-turn standard set, one tuple per conversation, for
    ``Bench.conversation`` (which carries each answer into the next turn).

    ``"mt-bench"`` (two turns each) is the set with more than one turn. ``category``, ``n`` and
    ``seed`` choose as :func:`standard` does: the same ``n`` and ``seed`` draw the
    conversations whose first turns ``standard(name, n=n, seed=seed)`` gives.
    """
    where = f"standard_conversations({name!r})"
    if name in STANDARD_SETS and STANDARD_SETS[name].turns < 2:
        multi = ", ".join(s.name for s in STANDARD_SETS.values() if s.turns > 1)
        raise ConfigError(
            f"{where}: its prompts have one turn, no conversation; the sets with several "
            f"turns: {multi} (or use standard({name!r}) with run())"
        )
    standard(name, category=category)  # checks the name and the category
    items = [turns for cat, turns in _records(name) if category in (None, cat)]
    if n is None:
        return items
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(items):
        chosen = f"category {category!r} of {name}" if category else name
        raise ConfigError(f"{where}: n must be between 1 and {len(items)} ({chosen}), got {n!r}")
    return random.Random(seed).sample(items, n)


# -- the user's own files ----------------------------------------------------------------------
FILE_FORMATS = ("jsonl", "sharegpt", "text")


def read_prompt_file(path: Path) -> str:
    """A prompt file's text: UTF-8, a leading byte order mark dropped, line ends left as they
    are (split them with :func:`file_lines`); errors name the file and the line."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"prompt file {path}: cannot be read ({exc.strerror})") from None
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        row = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            f"prompt file {path}, line {row}: not UTF-8 (byte 0x{raw[exc.start]:02x} at "
            f"column {column}); save the file as UTF-8"
        ) from None


def file_lines(text: str) -> list[str]:
    """The lines of a file's text, split on ``\\n`` (a ``\\r`` before it dropped) only: not on
    the other line boundaries of :meth:`str.splitlines` (U+2028, U+2029, U+0085, ...), which
    a JSON string may hold as they are and which a line of text keeps."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def from_file(path: str | Path, *, format: str | None = None) -> list[str]:  # noqa: A002
    """The prompts of a file, as raw text; errors name the file, the line and what was expected.

    Formats (by ``format``, else by suffix): ``"jsonl"`` (``.jsonl``; vLLM's custom data set,
    ``{"prompt": "..."}`` per line), ``"sharegpt"`` (``.json``; a list of
    ``{"conversations": [{"from": "human", "value": "..."}, ...]}``, the first human turn of
    each; entries with no human turn are skipped, as ``vllm bench`` skips them) and ``"text"``
    (anything else; one prompt per line). Blank lines are skipped. The file is UTF-8 (a byte
    order mark is dropped); lines end at ``\\n`` or ``\\r\\n`` only, so a line may hold U+2028,
    U+2029 or U+0085.
    """
    path = Path(path)
    if format is None:
        format = {".jsonl": "jsonl", ".json": "sharegpt"}.get(path.suffix.lower(), "text")
    if format not in FILE_FORMATS:
        raise ConfigError(
            f"from_file({str(path)!r}, format={format!r}): unknown format; "
            f"known: {', '.join(FILE_FORMATS)}"
        )
    text = read_prompt_file(path)
    if format == "sharegpt":
        prompts = [turns[0] for turns in _sharegpt(path, text)]
    else:
        prompts = []
        for number, line in enumerate(file_lines(text), start=1):
            if not line.strip():
                continue
            prompts.append(line if format == "text" else _jsonl_prompt(path, number, line))
    if not prompts:
        raise ConfigError(f"prompt file {path}: holds no prompt (read as {format})")
    return prompts


def _jsonl_prompt(path: Path, number: int, line: str) -> str:
    where = f"prompt file {path}, line {number}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{where}: not valid JSON ({exc.msg}, column {exc.colno}); expected "
            '{"prompt": "..."} on each line'
        ) from None
    if not isinstance(row, dict) or "prompt" not in row:
        raise ConfigError(f'{where}: expected an object with a "prompt" key, got {line:.80}')
    prompt = row["prompt"]
    if not isinstance(prompt, str) or not prompt:
        raise ConfigError(f'{where}: "prompt" must be a non-empty string, got {prompt!r:.80}')
    return prompt


def conversations_from_file(
    path: str | Path,
    *,
    format: str | None = None,  # noqa: A002
) -> list[tuple[str, ...]]:
    """The user turns of each conversation in a file, for ``Bench.conversation``; errors name
    the file, the line and what was expected.

    Formats (by ``format``, else by suffix): ``"sharegpt"`` (``.json``; a list of
    ``{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", ...}, ...]}``:
    every human turn of an entry, in order; the recorded answers are left out, since each turn
    carries the answer the baseline engine gives; entries with no human turn are skipped) and
    ``"jsonl"`` (``.jsonl``; ``{"turns": ["first message", "second message", ...]}`` per line,
    blank lines skipped). The file is read as :func:`from_file` reads it.
    """
    path = Path(path)
    if format is None:
        format = {".jsonl": "jsonl", ".json": "sharegpt"}.get(path.suffix.lower())
    if format not in ("jsonl", "sharegpt"):
        raise ConfigError(
            f"conversations_from_file({str(path)!r}, format={format!r}): expected "
            'format="sharegpt" (a .json list of {"conversations": [...]}) or format="jsonl" '
            '(a .jsonl file of {"turns": [...]} lines)'
        )
    text = read_prompt_file(path)
    if format == "sharegpt":
        conversations = _sharegpt(path, text, every=True)
    else:
        conversations = []
        for number, line in enumerate(file_lines(text), start=1):
            if line.strip():
                conversations.append(_jsonl_turns(path, number, line))
    if not conversations:
        raise ConfigError(f"conversation file {path}: holds no conversation (read as {format})")
    return conversations


def _jsonl_turns(path: Path, number: int, line: str) -> tuple[str, ...]:
    where = f"conversation file {path}, line {number}"
    expected = '{"turns": ["first message", "second message", ...]} on each line'
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{where}: not valid JSON ({exc.msg}, column {exc.colno}); expected {expected}"
        ) from None
    turns = row.get("turns") if isinstance(row, dict) else None
    if not isinstance(turns, list) or not turns:
        raise ConfigError(f"{where}: expected {expected}, got {line:.80}")
    for i, turn in enumerate(turns):
        if not isinstance(turn, str) or not turn:
            raise ConfigError(
                f'{where}: turn {i + 1} of "turns" must be a non-empty string, got {turn!r:.80}'
            )
    return tuple(turns)


def _sharegpt(path: Path, text: str, *, every: bool = False) -> list[tuple[str, ...]]:
    """The human turns of each entry (``every``: all of them, else the first); each entry's
    line is found by decoding the list element by element."""
    decoder = json.JSONDecoder()

    def line_at(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    def fail(pos: int, what: str) -> ConfigError:
        return ConfigError(f"prompt file {path}, line {line_at(pos)}: {what}")

    pos = _skip_space(text, 0)
    if not text.startswith("[", pos):
        raise fail(pos, 'expected a JSON list of {"conversations": [...]} entries (ShareGPT)')
    pos = _skip_space(text, pos + 1)
    prompts: list[tuple[str, ...]] = []
    first = True
    while not text.startswith("]", pos):
        if not first:
            if not text.startswith(",", pos):
                raise fail(pos, "not valid JSON (expected ',' or ']' after an entry)")
            pos = _skip_space(text, pos + 1)
        first = False
        start = pos
        try:
            entry, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"prompt file {path}, line {exc.lineno}: not valid JSON ({exc.msg}, "
                f"column {exc.colno})"
            ) from None
        pos = _skip_space(text, pos)
        turns = _human_turns(entry, lambda what, at=start: fail(at, what), every)
        if turns:
            prompts.append(turns)
        if pos >= len(text):
            raise fail(pos, "not valid JSON (the list is not closed with ']')")
    if text[_skip_space(text, pos + 1) :].strip():
        raise fail(_skip_space(text, pos + 1), "not valid JSON (text after the list)")
    return prompts


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _human_turns(entry: Any, fail: Any, every: bool) -> tuple[str, ...]:
    """The entry's human turns in order (``every``), or its first one alone."""
    expected = 'expected {"conversations": [{"from": "human", "value": "..."}, ...]}'
    if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
        raise fail(f"{expected}, got {json.dumps(entry)[:80]}")
    found: list[str] = []
    for turn in entry["conversations"]:
        if not isinstance(turn, dict) or not isinstance(turn.get("from"), str):
            raise fail(f'each turn must be {{"from": ..., "value": ...}}, got {turn!r:.80}')
        if turn["from"] in ("human", "user"):
            value = turn.get("value")
            if not isinstance(value, str) or not value:
                raise fail(f'a human turn\'s "value" must be a non-empty string, got {value!r:.80}')
            found.append(value)
            if not every:
                break
    return tuple(found)


# -- chat templates --------------------------------------------------------------------------
def chat(
    model: str | Path,
    messages_or_texts: Sequence[str | Sequence[Mapping[str, str]]],
    *,
    system: str | None = None,
    tokenize: bool = False,
    **template_kwargs: Any,
) -> list[Any]:
    """Prompts as the model's own chat template renders them, with the generation prompt.

    ``model`` is a local model folder (or a name already in the Hugging Face cache: nothing is
    downloaded). Each item is a text (one user message) or a conversation (a list of
    ``{"role": ..., "content": ...}``); ``system`` puts a system message first. Returns texts,
    or with ``tokenize=True`` vLLM token prompts (``{"prompt_token_ids": [...]}``, encoded
    without adding special tokens again, as vLLM's acceptance-length test does). A model
    without a chat template is an error.

    ``template_kwargs`` go to the template as its variables, through the tokenizer's
    ``apply_chat_template`` (e.g. ``enable_thinking=False`` for Qwen3); a name the template
    does not read, or one of ``apply_chat_template``'s own arguments, is an error.
    """
    where = f"chat({str(model)!r})"
    _check_template_kwargs(where, template_kwargs)
    if isinstance(messages_or_texts, str | bytes) or not isinstance(messages_or_texts, Sequence):
        raise ConfigError(f"{where}: expected a list of texts or conversations")
    conversations = [
        _conversation(where, i, item, system) for i, item in enumerate(messages_or_texts)
    ]
    if not conversations:
        raise ConfigError(f"{where}: the list of texts or conversations is empty")
    tokenizer = _tokenizer(str(model))
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"{where}: the model's tokenizer has no chat template (none in its "
            "tokenizer_config.json or chat_template.jinja): it is not a chat model. Use the raw "
            "prompts, or add the template the model was trained with to tokenizer_config.json "
            '("chat_template")'
        )
    _check_template_reads(where, tokenizer.chat_template, template_kwargs)
    texts = [
        str(
            tokenizer.apply_chat_template(
                c, tokenize=False, add_generation_prompt=True, **template_kwargs
            )
        )
        for c in conversations
    ]
    if not tokenize:
        return texts
    return [
        {"prompt_token_ids": list(tokenizer.encode(t, add_special_tokens=False))} for t in texts
    ]


# apply_chat_template's own arguments (and the template's messages): chat() sets them itself.
_NOT_TEMPLATE_KWARGS: dict[str, str] = {
    **dict.fromkeys(
        ("messages", "conversation", "conversations"),
        "the messages are the items (texts or conversations) and system=",
    ),
    **dict.fromkeys(
        ("add_generation_prompt", "continue_final_message"),
        "chat() always ends with the generation prompt, for a new reply",
    ),
    **dict.fromkeys(
        (
            "tokenize",
            "return_dict",
            "return_tensors",
            "return_assistant_tokens_mask",
            "padding",
            "truncation",
            "max_length",
            "tokenizer_kwargs",
        ),
        "chat() returns texts, or token prompts with tokenize=True",
    ),
    "chat_template": (
        "chat() applies the model's own template; to measure another, put it in the folder's "
        'tokenizer_config.json ("chat_template") or chat_template.jinja'
    ),
}


def _check_template_kwargs(where: str, template_kwargs: Mapping[str, Any]) -> None:
    """Reject keyword arguments that cannot be template variables, naming the fix."""
    for name, value in template_kwargs.items():
        if name in _NOT_TEMPLATE_KWARGS:
            raise ConfigError(
                f"{where}: {name}= is not a template argument: {_NOT_TEMPLATE_KWARGS[name]}. "
                "Pass only what the template reads, e.g. enable_thinking=False"
            )
        if isinstance(value, Mapping) and name.endswith("kwargs"):
            raise ConfigError(
                f"{where}: {name}= would reach the template as one variable named {name!r}; "
                f"unpack the mapping instead: chat(..., **{name}) (e.g. enable_thinking=False)"
            )
        if not name.isidentifier():
            raise ConfigError(
                f"{where}: template argument {name!r} is not a name a Jinja template can read; "
                "use the variable's name as the template spells it (e.g. enable_thinking)"
            )


def _check_template_reads(where: str, template: Any, template_kwargs: Mapping[str, Any]) -> None:
    """A template argument the template never reads changes nothing: most likely a misspelt
    name (``enable_thinkng=False`` would measure the thinking mode). Templates that plain Jinja
    cannot parse (transformers' own tags), and named-template dicts, go unchecked."""
    if not template_kwargs or not isinstance(template, str):
        return
    import jinja2
    from jinja2 import meta

    try:
        env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])
        reads = meta.find_undeclared_variables(env.parse(template))
    except jinja2.TemplateError:
        return
    unread = sorted(set(template_kwargs) - reads)
    if unread:
        raise ConfigError(
            f"{where}: the model's chat template does not read {', '.join(unread)}, so "
            f"passing it changes nothing; it reads: {', '.join(sorted(reads))}. Check the "
            "spelling, or drop the argument for this model"
        )


def _conversation(where: str, index: int, item: Any, system: str | None) -> list[dict[str, str]]:
    head = [{"role": "system", "content": system}] if system is not None else []
    if isinstance(item, str):
        if not item:
            raise ConfigError(f"{where}: item {index} is an empty text")
        return [*head, {"role": "user", "content": item}]
    if isinstance(item, Sequence) and item and all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(
            m.get("content"), str
        ) for m in item
    ):  # fmt: skip
        return [*head, *({"role": m["role"], "content": m["content"]} for m in item)]
    raise ConfigError(
        f'{where}: item {index} must be a text or a list of {{"role": ..., "content": ...}} '
        f"messages, got {item!r:.80}"
    )


def _tokenizer(model: str, call: str = "chat") -> Any:
    folder = Path(model).expanduser()
    if (folder.is_absolute() or model.startswith((".", "~"))) and not folder.is_dir():
        raise ConfigError(f"{call}({model!r}): no such model folder")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{call}({model!r}): cannot load a tokenizer from a local folder or the Hugging Face "
            f"cache ({str(exc).splitlines()[0]:.200}); {call}() never downloads: give the "
            "model's folder"
        ) from None


# -- shared-prefix traffic ---------------------------------------------------------------------
#: What goes between the shared prefix and a prompt's own text.
PREFIX_SEPARATOR = "\n\n"
#: The longest prefix drawn (tokens or words): beyond any model's context.
MAX_PREFIX_LENGTH = 10_000_000


def shared_prefix(
    prompts: Sequence[str],
    *,
    prefix_length: int | None = None,
    share: float = 1.0,
    seed: int = 0,
    model: str | Path | None = None,
    prefix: str | None = None,
) -> list[str]:
    """The prompts with one common prefix in front of a ``share`` of them: shared-prefix
    traffic (one long system prompt or document ahead of many requests) for ``run`` and ``load``.

    The prefix is ``prefix`` (your own text, e.g. your system prompt) or ``prefix_length`` long,
    drawn from the shipped GSM8K problems (MIT; seeded by ``seed``). With ``model`` (a local
    folder, or a name already in the Hugging Face cache: nothing is downloaded),
    ``prefix_length`` counts that model's tokens, what the prefix cache counts (the prefix is cut
    after that many; a folder's ``tokenizer.json`` is read with ``tokenizers`` alone); without,
    it counts words (a tokenizer makes more tokens of them: give ``model`` where the number of
    cache blocks matters). ``share`` (above 0,
    at most 1) is the fraction of the prompts that carry it, rounded to the nearest whole
    prompt (halves up); which ones is a seeded draw, and a larger share keeps those of a smaller
    one. A carrier is ``prefix + "\\n\\n" + prompt``; the other prompts are left as they are, and
    the order is kept. Text prompts only: for a chat model, template the result
    (``chat(model, shared_prefix(...), tokenize=True)``).
    """
    where = "shared_prefix(...)"
    texts = _prefix_prompts(where, prompts)
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        raise ConfigError(
            f"{where}: share must be a number above 0 and at most 1 (the fraction of the "
            f"prompts that carry the prefix), got {share!r:.40}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"{where}: seed must be an integer, got {seed!r:.40}")
    count = int(share * len(texts) + 0.5)
    if count == 0:
        raise ConfigError(
            f"{where}: share={share} of {len(texts)} prompts rounds to none; give a share of at "
            f"least {0.5 / len(texts):.3g}, or more prompts"
        )
    if prefix is not None:
        if prefix_length is not None or model is not None:
            extra = "prefix_length=" if prefix_length is not None else "model="
            raise ConfigError(
                f"{where}: prefix= is the prefix as it is; {extra} sizes a drawn one: give one "
                "of the two ways"
            )
        if not isinstance(prefix, str) or not prefix.strip():
            raise ConfigError(f"{where}: prefix must be a non-empty text, got {prefix!r:.80}")
        head = prefix
    else:
        if prefix_length is None:
            raise ConfigError(
                f"{where}: give prefix_length= (the prefix's length: tokens with model=, words "
                "without) or prefix= (your own text)"
            )
        if (
            isinstance(prefix_length, bool)
            or not isinstance(prefix_length, int)
            or not 1 <= prefix_length <= MAX_PREFIX_LENGTH
        ):
            unit = "tokens" if model is not None else "words"
            raise ConfigError(
                f"{where}: prefix_length must be a positive integer ({unit}) of at most "
                f"{MAX_PREFIX_LENGTH:,}, got {prefix_length!r:.40}"
            )
        codec = None if model is None else _token_codec(str(model))
        head = _prefix_text(prefix_length, seed, codec)
    order = list(range(len(texts)))
    random.Random(f"shared_prefix/share/{seed}").shuffle(order)
    carriers = set(order[:count])
    return [
        f"{head}{PREFIX_SEPARATOR}{text}" if i in carriers else text for i, text in enumerate(texts)
    ]


def _prefix_prompts(where: str, prompts: Any) -> list[str]:
    """The prompts as a list of non-empty texts; a token prompt is refused with the way round."""
    if isinstance(prompts, str | bytes) or not isinstance(prompts, Sequence):
        raise ConfigError(f"{where}: expected a list of text prompts, got {prompts!r:.80}")
    if not prompts:
        raise ConfigError(f"{where}: the prompt list is empty")
    for i, p in enumerate(prompts):
        if isinstance(p, Mapping):
            raise ConfigError(
                f"{where}: prompt {i} is a vLLM prompt dict; give the texts, and tokenize after "
                "(prompts.chat(model, shared_prefix(texts, ...), tokenize=True) for a chat model)"
            )
        if not isinstance(p, str) or not p:
            raise ConfigError(f"{where}: prompt {i} must be a non-empty text, got {p!r:.80}")
    return list(prompts)


@cache
def _prefix_pool() -> tuple[str, ...]:
    """The texts a drawn prefix is made of: the shipped GSM8K problems that are plain ASCII
    (cut after a token, such a text decodes back to the same tokens)."""
    return tuple(turns[0] for _, turns in _records("gsm8k") if turns[0].isascii())


#: A tokenizer's encode (no special tokens added) and decode.
TokenCodec = tuple[Callable[[str], list[int]], Callable[[list[int]], str]]


def _token_codec(model: str) -> TokenCodec:
    """The model's tokenizer: its folder's ``tokenizer.json`` through ``tokenizers`` (no
    transformers, no torch), else loaded as :func:`chat` loads it."""
    path = Path(model).expanduser() / "tokenizer.json"
    if path.is_file() and importlib.util.find_spec("tokenizers") is not None:
        from tokenizers import Tokenizer

        fast = Tokenizer.from_file(str(path))
        return (
            lambda text: list(fast.encode(text, add_special_tokens=False).ids),
            lambda ids: str(fast.decode(ids)),
        )
    tokenizer = _tokenizer(model, "shared_prefix")
    return (
        lambda text: list(tokenizer.encode(text, add_special_tokens=False)),
        lambda ids: str(tokenizer.decode(ids)),
    )


def _prefix_text(length: int, seed: int, codec: TokenCodec | None) -> str:
    """``length`` words (``codec`` None) or tokens of the pool's problems, in a seeded order
    (reshuffled after each pass), separated by blank lines."""
    rng = random.Random(f"shared_prefix/text/{seed}")
    parts: list[str] = []
    words, enough = 0, length
    while True:
        order = list(_prefix_pool())
        rng.shuffle(order)
        for text in order:
            parts.append(text)
            words += len(text.split())
            if words < enough:
                continue
            joined = PREFIX_SEPARATOR.join(parts)
            if codec is None:
                return _first_words(joined, length)
            encode, decode = codec
            ids = encode(joined)
            if len(ids) >= length:
                return decode(ids[:length])
            enough = 2 * words  # a tokenizer with fewer tokens than words: draw more


def _first_words(text: str, n: int) -> str:
    """``text`` up to the end of its ``n``-th word (runs of non-space)."""
    ends = [m.end() for m in re.finditer(r"\S+", text)]
    return text[: ends[n - 1]]
