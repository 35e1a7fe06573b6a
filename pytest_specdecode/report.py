"""The JSON report: ``{"format_version", "results", "environment", "session"}``."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

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
