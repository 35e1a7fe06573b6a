"""Output files: checked before the session runs, each written on its own at the end."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError


def check_writable(path: str, source: str) -> None:
    """Fail now (not after the run) when ``path`` cannot become a file: it is a folder, a
    parent is a file, or the nearest existing folder cannot be written. A symbolic link is
    written through: its target is checked."""
    target = Path(path).expanduser()
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    if target.is_dir():
        raise ConfigError(f"{source}: {path!r} is a folder; give the path of a file")
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(
            f"{source}: cannot write {path!r}: {str(parent)!r} is a file, not a folder"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{source}: cannot write {path!r}: the folder {str(parent)!r} is not writable"
        )
    if target.exists() and not os.access(target, os.W_OK):
        raise ConfigError(f"{source}: cannot write {path!r}: the file is read-only")


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (whether or not it exists yet)."""
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
