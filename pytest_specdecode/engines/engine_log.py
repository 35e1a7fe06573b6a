"""What an engine log says went wrong: the error lines of the tracebacks vLLM's processes
logged (its engine core, its model worker), for the message of an engine that died."""

from __future__ import annotations

import re

#: vLLM's prefix on a line another process logged: ``(EngineCore pid=14104) ERROR 12-04
#: 16:50:37 [core.py:1512] `` (the level, time and place only on lines its logger wrote).
_PREFIX = re.compile(r"^(\([^()]* pid=\d+\) )(?:[A-Z]+ [\d-]+ [\d:.]+ \[[^\]]*\] )?")
#: The line that ends a Python traceback: ``RuntimeError: ...``, ``vllm.x.SomeError``.
_RAISED = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)(?::|$)")
#: Errors that say only that the engine died (the message has that already).
_ONLY_DEATH = {"EngineDeadError"}
#: How much of a log's end is searched: one engine call's tracebacks, not the engine's life.
SEARCHED_LINES = 400


def raised(text: str, most: int = 3) -> list[str]:
    """The error line of each traceback in ``text`` (its last :data:`SEARCHED_LINES` lines;
    each process's lines read apart by vLLM's prefix), each once, in the order logged; the
    last ``most`` of them."""
    found: list[str] = []
    reading: set[str] = set()  # processes whose traceback is being read
    for line in text.splitlines()[-SEARCHED_LINES:]:
        prefix = _PREFIX.match(line)
        who = prefix.group(1) if prefix else ""
        bare = (line[prefix.end() :] if prefix else line).rstrip()
        if bare.startswith("Traceback (most recent call last)"):
            reading.add(who)
            continue
        if who not in reading or not bare or bare[0].isspace():
            continue  # not in a traceback, or one of its frames
        reading.discard(who)
        error = _RAISED.match(bare)
        if error and error.group(1) not in _ONLY_DEATH and bare not in found:
            found.append(bare)
    return found[-most:]


def raised_in(path: str, most: int = 3) -> list[str]:
    """:func:`raised` of the log file at ``path`` (none when it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return raised(fh.read(), most)
    except OSError:
        return []
