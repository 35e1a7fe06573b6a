"""Prompt files: JSON Lines, each line validated against ``schemas/prompts.schema.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import ConfigError


@dataclass(frozen=True)
class Prompt:
    """One prompt of a prompt file."""

    prompt: str
    id: str = ""
    category: str = ""
    output_schema: dict[str, Any] | None = None
    notes: str = ""
    source: str = field(default="", compare=False)  # "file:line"


@cache
def prompt_schema() -> dict[str, Any]:
    """The JSON Schema every line of a prompt file must satisfy."""
    text = resources.files("pytest_specdecode").joinpath("schemas/prompts.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def load_prompts(path: str | Path) -> list[Prompt]:
    """Read a JSON Lines prompt file; errors name the file, the line and the reason.

    Blank lines and lines starting with ``#`` are skipped. The file is UTF-8 (a byte order
    mark is dropped); lines end at ``\\n`` or ``\\r\\n`` only (:func:`~.workloads.file_lines`).
    """
    import jsonschema

    path = Path(path)
    lines = file_lines(read_prompt_file(path))
    validator = jsonschema.Draft202012Validator(prompt_schema())
    prompts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"prompt file {path}, line {number}"
        data = _parse(line, where)
        error = jsonschema.exceptions.best_match(validator.iter_errors(data))
        if error is not None:
            at = "/".join(str(p) for p in error.absolute_path)
            raise ConfigError(f"{where}: {error.message}" + (f" (at {at})" if at else ""))
        prompts.append(Prompt(source=f"{path}:{number}", **data))
    if not prompts:
        raise ConfigError(f"prompt file {path}: holds no prompt")
    return prompts


def _parse(line: str, where: str) -> Any:
    """One line's JSON; what Python's parser refuses beyond JSON syntax (an integer of more
    than 4,300 digits, nesting deeper than the interpreter's recursion limit) is refused with
    ``where`` too."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    except ValueError as exc:  # e.g. an integer beyond int's digit limit
        raise ConfigError(f"{where}: a value Python cannot read ({exc})") from None
    except RecursionError:
        raise ConfigError(
            f"{where}: nested too deeply to read (arrays or objects inside each other hundreds "
            "of levels deep)"
        ) from None


# The standard sets shipped with the package, the user's own files and chat templates
# (pytest_specdecode/workloads.py): prompts.standard, prompts.from_file, prompts.chat, and
# conversations for Bench.conversation: prompts.standard_conversations,
# prompts.conversations_from_file; shared-prefix traffic: prompts.shared_prefix.
from .workloads import (  # noqa: E402
    STANDARD_SETS,
    chat,
    conversations_from_file,
    file_lines,
    from_file,
    read_prompt_file,
    shared_prefix,
    standard,
    standard_conversations,
)

__all__ = [
    "STANDARD_SETS",
    "Prompt",
    "chat",
    "conversations_from_file",
    "from_file",
    "load_prompts",
    "prompt_schema",
    "shared_prefix",
    "standard",
    "standard_conversations",
]
