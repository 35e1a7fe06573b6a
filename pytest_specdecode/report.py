"""The JSON report: ``{"format_version", "results", "environment", "session"}``."""

from __future__ import annotations

import json
import os
import tempfile
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import ConfigError

FORMAT_VERSION = 1


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: a reader sees the old
    file or the new one, never half of one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def build(
    results: list[dict[str, Any]], environment: dict[str, Any], session: dict[str, Any]
) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "results": results,
        "environment": environment,
        "session": session,
    }


def write(path: str | os.PathLike[str], report: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(report, indent=2, sort_keys=False) + "\n")


@cache
def results_schema() -> dict[str, Any]:
    """The JSON Schema of report, saved-run and baseline files."""
    text = resources.files("pytest_specdecode").joinpath("schemas/results.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def load(path: str | os.PathLike[str], what: str = "results file") -> dict[str, Any]:
    """Read and validate a report/baseline file; any problem is a :class:`ConfigError` naming
    the file and what is wrong (never silently replaced)."""
    import jsonschema

    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{what} {target}: cannot be read ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = " (the file looks truncated)" if exc.pos >= len(text.rstrip()) - 1 else ""
        raise ConfigError(
            f"{what} {target}: not valid JSON at line {exc.lineno} column {exc.colno}: "
            f"{exc.msg}{hint}"
        ) from None
    if isinstance(data, dict) and data.get("format_version") not in (None, FORMAT_VERSION):
        raise ConfigError(
            f"{what} {target}: format_version {data.get('format_version')!r} is not supported "
            f"by this pytest-specdecode (reads version {FORMAT_VERSION}); re-save it with the "
            "version that wrote it, or upgrade pytest-specdecode"
        )
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(results_schema()).iter_errors(data)
    )
    if error is not None:
        at = "/".join(str(p) for p in error.absolute_path) or "top level"
        raise ConfigError(f"{what} {target}: invalid at {at}: {error.message}")
    result: dict[str, Any] = data
    return result
