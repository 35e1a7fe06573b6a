"""Imported first by an engine fork server (:mod:`.launch`): its output goes to
``/dev/null``, not to the terminal of the caller whose streams it inherited (a worker forked
from it sends its own output to its engine log). Imported anywhere else, it does nothing."""

from __future__ import annotations

import multiprocessing.forkserver
import os
import sys


def _in_fork_server() -> bool:
    """Whether this import runs inside ``multiprocessing.forkserver.main`` (its preloads)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is multiprocessing.forkserver.main.__code__:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _silence() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


if _in_fork_server():
    _silence()
