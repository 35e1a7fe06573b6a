"""How a model is named where a person reads it (terminal, HTML, docs): one home.

The built-in tiny models are ``tiny-target``, ``tiny-draft``, ``tiny-weak-draft`` and
``tiny-eagle3-head``; another local folder is shown by its name; a hub id as given. Reports keep
the full path in their ``target``/``draft`` fields (the detail); :func:`redact_paths` replaces
them for a report that is published (the recorded run in the docs).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["display_name", "redact_paths"]

#: The padded tiny target's cache folder: ``<cache>/tiny-<weights hash>/target``.
_TINY_TARGET = re.compile(r"(^|/)tiny-[0-9a-f]{12}/target$")
#: The committed tiny weights: ``.../pytest_specdecode/tiny/weights/<name>``.
_TINY_WEIGHTS = re.compile(
    r"(^|/)pytest_specdecode/tiny/weights/(target|draft|weak_draft|eagle3_head)$"
)


def display_name(model: object) -> str:
    """``model`` (a path or hub id) as a person reads it; ``-`` for none."""
    if not model:
        return "-"
    text = str(model).rstrip("/")
    if _TINY_TARGET.search(text):
        return "tiny-target"
    found = _TINY_WEIGHTS.search(text)
    if found:
        return "tiny-" + found.group(2).replace("_", "-")
    if _is_local(text):
        return text.rsplit("/", 1)[-1] or text
    return text


def _is_local(text: str) -> bool:
    """A filesystem path rather than a hub id (``org/name``, which may not exist locally)."""
    if text.startswith(("/", "./", "../", "~")) or (os.sep != "/" and os.sep in text):
        return True
    return "/" in text and Path(text).is_dir()


#: Absolute local paths inside a string (a folder, a shared library in LD_PRELOAD, ...).
_ABSOLUTE = re.compile(r"(?<![\w.:/])/(?:[\w.+-]+/)*[\w.+-]+")


def redact_paths(value: Any) -> Any:
    """``value`` (a report, or any part of one) with every absolute local path replaced by
    its display name: for a report that leaves the machine it was made on."""
    if isinstance(value, str):
        return _ABSOLUTE.sub(lambda m: display_name(m.group(0)), value)
    if isinstance(value, Mapping):
        return {redact_paths(k): redact_paths(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_paths(v) for v in value]
    return value
