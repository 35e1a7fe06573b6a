"""vLLM's rules for ``num_speculative_tokens_per_batch_size`` (dynamic speculative decoding),
taken from the installed vLLM without importing it.

vLLM (0.32: ``vllm/v1/spec_decode/dynamic/utils.py``) checks a schedule of inclusive
``[start, end, k]`` batch-size ranges in ``validate_and_normalize_dynamic_sd_schedule``: the
first range starts at 1, ranges do not overlap, starts and ends are positive, start <= end,
k >= 0. Its scheduler expands the schedule with ``build_dynamic_sd_schedule_lookup``: a gap
keeps the previous range's k, batches past the last range keep the last k, every k is capped
at ``num_speculative_tokens``, and the lookup stops at ``max_num_seqs``. That file imports
nothing, so it is loaded here on its own (never ``vllm`` itself, which imports torch), and
only after checking that it still imports nothing from vLLM; where it is missing the rules
are not checked before the engine starts (:data:`UNCHECKED` says why).
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .methods import method_facts

#: The speculative-config key that holds a schedule.
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"

#: Where vLLM keeps the rules, under its package folder.
RULES_FILE = ("v1", "spec_decode", "dynamic", "utils.py")

#: Why a schedule was not checked before the engine started, when vLLM's rules are missing.
UNCHECKED = (
    "the installed vLLM has no vllm/v1/spec_decode/dynamic/utils.py (or it imports more than "
    "the standard library), so the batch-size schedule is checked by vLLM only when the engine "
    "starts"
)

#: Imports the rules file may have and still be loaded on its own.
_HARMLESS_IMPORTS = {"__future__", "typing", "collections", "collections.abc", "dataclasses"}


@dataclass(frozen=True)
class ScheduleRules:
    """vLLM's own validator and lookup builder, and the file they came from."""

    validate: Callable[[object], list[tuple[int, int, int]]]
    lookup: Callable[[object, int, int], list[int]]
    source: str


def _imports_only_harmless(text: str) -> bool:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import) and any(
            a.name not in _HARMLESS_IMPORTS for a in node.names
        ):
            return False
        if isinstance(node, ast.ImportFrom) and (
            node.level or node.module not in _HARMLESS_IMPORTS
        ):
            return False
    return True


def load_rules(path: Path) -> ScheduleRules | None:
    """The rules in ``path`` (a copy of vLLM's ``dynamic/utils.py``), or ``None`` when the
    file cannot be read, imports anything beyond the standard library, or lacks them."""
    try:
        text = path.read_text(encoding="utf-8")
        if not _imports_only_harmless(text):
            return None
        spec = importlib.util.spec_from_file_location("_specdecode_vllm_dynamic_sd", path)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (OSError, SyntaxError, UnicodeDecodeError, ImportError):
        return None
    validate = getattr(module, "validate_and_normalize_dynamic_sd_schedule", None)
    lookup = getattr(module, "build_dynamic_sd_schedule_lookup", None)
    if not callable(validate) or not callable(lookup):
        return None
    return ScheduleRules(validate, lookup, str(path))


@cache
def installed_rules() -> ScheduleRules | None:
    """The installed vLLM's rules, or ``None`` when vLLM or the file is not there."""
    from .vllm_schema import _vllm_file

    path = _vllm_file(*RULES_FILE)
    return None if path is None else load_rules(path)


def _fix(message: str, entries: list[list[int]]) -> str:
    """The entry a vLLM message is about and how to fix it."""
    ordered = sorted(entries, key=lambda e: e[0])
    if "non-overlapping" in message:
        for previous, entry in zip(ordered, ordered[1:], strict=False):
            if entry[0] <= previous[1]:
                return (
                    f"{entry} starts at or before the end of {previous}; start each range "
                    f"after the previous one ends, e.g. [{previous[1] + 1}, "
                    f"{max(entry[1], previous[1] + 1)}, {entry[2]}]"
                )
    if "start at 1" in message:
        first = ordered[0]
        return (
            f"the first range {first} starts at {first[0]}; start it at 1, e.g. "
            f"[1, {first[1]}, {first[2]}], so every batch size has a k"
        )
    return ""


def _entry_fix(entry: list[int], message: str) -> str:
    start, end, k = entry
    if "must be positive" in message:
        return "batch sizes start at 1"
    if "start must be <= end" in message:
        return f"swap them: [{end}, {start}, {k}]"
    if ">= 0" in message:
        return "use 0 to switch speculation off for those batch sizes"
    return ""


def check_schedule(
    schedule: Any, num_speculative_tokens: Any, source: str
) -> list[tuple[int, int, int]]:
    """``schedule`` (a ``num_speculative_tokens_per_batch_size`` value) checked with the
    installed vLLM's own rules, as ``(start, end, k)`` sorted by start; a :class:`ConfigError`
    naming the bad entry, the rule and the fix otherwise. Also refused: a k above
    ``num_speculative_tokens``, which vLLM would silently cap. Without vLLM's rules only the
    shape (a non-empty list of ``[start, end, k]`` integers) is checked."""
    where = f"{source}: {SCHEDULE_KEY}"
    example = "e.g. [[1, 8, 4], [9, 32, 2], [33, 256, 0]]"
    if not isinstance(schedule, list | tuple) or not schedule:
        raise ConfigError(
            f"{where}: expected a non-empty list of [start, end, k] batch-size ranges, got "
            f"{schedule!r:.80}; {example}"
        )
    entries: list[list[int]] = []
    for entry in schedule:
        if (
            not isinstance(entry, list | tuple)
            or len(entry) != 3
            or any(isinstance(v, bool) or not isinstance(v, int) for v in entry)
        ):
            raise ConfigError(
                f"{where}: entry {entry!r:.80} is not [start, end, k] (three integers: an "
                f"inclusive batch-size range and its k); {example}"
            )
        entries.append([int(v) for v in entry])
    rules = installed_rules()
    if rules is None:
        return sorted((s, e, k) for s, e, k in entries)
    for entry in entries:  # each entry alone, after a valid range up to its start
        alone = [entry] if entry[0] <= 1 else [[1, entry[0] - 1, 0], entry]
        try:
            rules.validate(alone)
        except ValueError as error:
            fix = _entry_fix(entry, str(error))
            raise ConfigError(
                f"{where}: entry {entry}: {str(error).rstrip('.')}{f'; {fix}' if fix else ''} "
                f"(vLLM's rule, {rules.source})"
            ) from None
    try:
        normal = rules.validate(entries)
    except ValueError as error:
        fix = _fix(str(error), entries)
        raise ConfigError(
            f"{where}: {str(error).rstrip('.')}{f'; {fix}' if fix else ''} "
            f"(vLLM's rule, {rules.source})"
        ) from None
    k = num_speculative_tokens
    if isinstance(k, int) and not isinstance(k, bool):
        over = [e for e in normal if e[2] > k]
        if over:
            raise ConfigError(
                f"{where}: entry {list(over[0])} asks for k={over[0][2]} but "
                f"num_speculative_tokens is {k}, and vLLM caps every entry at it; set "
                f"num_speculative_tokens to {max(e[2] for e in normal)} (the largest k in the "
                "schedule)"
            )
    return [(int(s), int(e), int(kk)) for s, e, kk in normal]


def check_schedule_support(method: str, engine_kwargs: Mapping[str, Any], source: str) -> None:
    """Refuse a schedule vLLM would take and then not act on: a method whose proposer ignores
    the scheduled k, or data parallelism (vLLM drops the schedule with a warning, since ranks
    could choose different k)."""
    why = method_facts(method).ignores_schedule
    if why is not None:
        raise ConfigError(
            f"{source}: {SCHEDULE_KEY} does not work with method {method!r}: {why}; remove "
            f"{SCHEDULE_KEY} and set num_speculative_tokens, or use a method that acts on it "
            "(draft_model and ngram run a schedule on vLLM 0.32, on CPU too)"
        )
    dp = engine_kwargs.get("data_parallel_size")
    if isinstance(dp, int) and not isinstance(dp, bool) and dp > 1:
        raise ConfigError(
            f"{source}: {SCHEDULE_KEY} with data_parallel_size={dp}: vLLM drops the schedule "
            "and runs num_speculative_tokens at every batch size (data-parallel ranks could "
            "choose different k and deadlock); run data_parallel_size=1, or remove "
            f"{SCHEDULE_KEY}"
        )


def k_at(entries: Sequence[tuple[int, int, int]], batch_size: int) -> int:
    """The k vLLM's scheduler uses at ``batch_size`` for sorted, valid ``entries`` (before its
    cap at ``num_speculative_tokens``): the range holding it; in a gap or past the last range,
    the k of the range before."""
    k = entries[0][2]
    for start, _, value in entries:
        if start > batch_size:
            break
        k = value
    return k
