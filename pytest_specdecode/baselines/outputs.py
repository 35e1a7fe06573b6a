"""Output files: checked before the session runs, each written on its own at the end."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError

#: How a command-line output option names standard output; the paths that name it too.
STDOUT = "-"
STDOUT_PATHS = (STDOUT, "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def is_stdout(path: str | None) -> bool:
    """Whether an output path of the command line names standard output (``-``, or
    ``/dev/stdout``, which is then written as stdout rather than opened as a file)."""
    return path in STDOUT_PATHS


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
    """Whether two paths name one file (whether or not it exists yet): the same path once
    ``~``, ``.``, ``..`` and symbolic links are resolved, or one file under two hard links."""
    first, second = Path(a).expanduser(), Path(b).expanduser()
    if first.resolve() == second.resolve():
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist (yet)
        return False


def check_not_input(path: str, source: str, inputs: Sequence[tuple[str, str]]) -> None:
    """Refuse an output ``path`` (given by ``source``) that names one of the ``inputs``
    (``(path, what it is)``): writing it would replace a file being read."""
    for input_path, what in inputs:
        if same_file(path, input_path):
            raise ConfigError(
                f"{source} {path!r} is the {what} {input_path!r}: writing it would replace "
                f"that file with this command's output. Give {source} another path"
            )
