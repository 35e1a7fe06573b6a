"""SIGTERM handled as Ctrl-C while local engines run, and both held back around a worker's
start.

Python's default SIGTERM ends the process at once: no ``finally`` block, no ``atexit`` handler,
no pytest summary. The engines still end (each worker kills its process group when its parent
goes) but the pool's log folder stays behind. While a pool holds engines, SIGTERM therefore
raises ``KeyboardInterrupt`` as Ctrl-C does, and the same clean-up runs: engines shut down,
shared memory and the log folder are removed, pytest prints its summary and exits with its
interrupted status (2), and a script ends as on Ctrl-C.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

#: The signals that interrupt a run.
INTERRUPTS = (signal.SIGINT, signal.SIGTERM)

_holders = 0  # pools that asked for SIGTERM as Ctrl-C and have not closed
_previous: object = None  # the SIGTERM handler before ours (None: ours is not installed)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"{signal.Signals(signum).name} (handled as Ctrl-C)")


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def sigterm_as_interrupt() -> None:
    """From now until the matching :func:`sigterm_restored`, SIGTERM raises
    ``KeyboardInterrupt`` in the main thread. Only where SIGTERM has its default action (a
    handler of the caller's own is left alone) and from the main thread (where Python runs
    signal handlers)."""
    global _holders, _previous
    _holders += 1
    if _previous is None and _main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        _previous = signal.signal(signal.SIGTERM, _interrupt)


def sigterm_restored() -> None:
    """One holder is done; the last one puts the previous SIGTERM handler back."""
    global _holders, _previous
    _holders = max(0, _holders - 1)
    if _holders or _previous is None or not _main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is _interrupt:
        signal.signal(signal.SIGTERM, _previous)  # type: ignore[arg-type]
    _previous = None


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back until the block ends (a worker started and registered is
    never lost to an interrupt landing in between); then deliver them. A signal without a
    Python handler (the default action, ignored, or set outside Python) is left alone."""
    if not _main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in INTERRUPTS}
    held = [s for s, h in previous.items() if callable(h)]
    received: list[int] = []
    for s in held:
        signal.signal(s, lambda signum, _frame: received.append(signum))
    try:
        yield
    finally:
        for s in held:
            signal.signal(s, previous[s])
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)
