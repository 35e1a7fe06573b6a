"""The JSON report: ``{"format_version", "results", "environment", "session"}``.

Files are written atomically (a temporary file and a rename), through a symbolic link to the
file it names, keep an existing file's permissions (else the usual ``0o666`` less the umask),
and never hold NaN or Infinity, which JSON does not have; reading refuses them too.

A saved run (``--specdecode-save``) and a baseline (``--specdecode-update-baseline``) are
merged, never replaced: under a lock, the file is re-read and this run's results take the place
of the entries they match; every other entry is kept as it was, with the environment it was
measured in (each result of such a file carries its own ``environment``). A file that cannot be
read is refused and left as it is.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import secrets
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..measure.sequential import Session
from .compare import ResultKey, StoredResults, environment_differences, own_environment

FORMAT_VERSION = 1
#: Suffix of the lock file held beside a baseline while it is updated.
LOCK_SUFFIX = ".lock"
#: Report keys of what tests make besides results: lists of entries with a ``nodeid`` (and an
#: optional ``label``), merged per test like the results.
PRODUCTS = ("sweeps", "rankings", "distribution_checks", "loads", "schedule_checks")


def resolved(path: str | os.PathLike[str]) -> Path:
    """The file ``path`` names: a symbolic link's target (followed to the end, the target need
    not exist yet), so that a write replaces the target and the link stays a link."""
    target = Path(os.path.realpath(path))
    if target.is_symlink():  # realpath stops at a loop
        raise OSError(errno.ELOOP, "a loop of symbolic links", os.fspath(path))
    return target


def _create_temp(target: Path) -> tuple[int, Path]:
    """A new file beside ``target``, created with mode ``0o666`` so that the umask applies (as
    for any file a program creates; ``tempfile.mkstemp`` would give ``0o600``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name beside {target}")


def _is_special(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` (its links followed) is there and neither a plain file nor a folder:
    a pipe, a socket or a device."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: a reader sees the old
    file or the new one, never half of one. An existing file keeps its permission bits; a new
    one gets ``0o666`` less the umask. A symbolic link is written through (:func:`resolved`).
    What is not a plain file (a pipe, a device: ``/dev/stderr``, ``/dev/null``) is written
    into as it is: a rename would put a plain file in its place."""
    if _is_special(path):
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(text)
        return
    target = resolved(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mode = None
    fd, tmp = _create_temp(target)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
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
    """Write ``report`` as JSON; a NaN or infinite number in it is a ``ValueError`` naming where
    (``Result.to_dict`` already stores those as null)."""
    try:
        text = json.dumps(report, indent=2, sort_keys=False, allow_nan=False)
    except ValueError as exc:
        where = _non_finite_at(report)
        if where is None:
            raise
        raise ValueError(
            f"{path}: not written: {where[1]} at {_path_text(where[0])} (JSON has no NaN or "
            "Infinity; store an unknown figure as None)"
        ) from exc
    atomic_write_text(path, text + "\n")


@cache
def results_schema() -> dict[str, Any]:
    """The JSON Schema of report, saved-run and baseline files (generated from the report model:
    :func:`~.report.report_schema`)."""
    text = resources.files("pytest_specdecode").joinpath("schemas/results.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


class _NonFinite:
    """Stands for a NaN/Infinity literal (or a number too large for a float) while parsing, so
    that the loader can say where it was."""

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_float(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _non_finite_at(value: Any, path: tuple[str | int, ...] = ()) -> tuple[Any, str] | None:
    """Where the first NaN/Infinity in ``value`` is, and how it was written."""
    if isinstance(value, _NonFinite):
        return path, value.text
    if isinstance(value, float) and not math.isfinite(value):
        return path, repr(value)
    if isinstance(value, Mapping):
        items: Iterator[tuple[Any, Any]] = iter(value.items())
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _non_finite_at(item, (*path, key))
        if found is not None:
            return found
    return None


def _path_text(path: Sequence[Any]) -> str:
    return "/".join(str(p) for p in path) or "top level"


#: The deepest nesting of objects and lists a report file may have (the report itself is one
#: level): a report pytest-specdecode writes is about 10 deep. Deeper data is refused where it
#: is read, so that nothing drawing, copying or checking it runs out of recursion.
MAX_DEPTH = 64


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` (parsed JSON) nests objects and lists more than ``limit`` levels deep;
    a loop, not a recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterator[Any] = iter(item.values())
        elif isinstance(item, list):
            children = iter(item)
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _too_deep(what: str, target: Path) -> str:
    return (
        f"{what} {target}: nested more than {MAX_DEPTH} levels deep; a report pytest-specdecode "
        "writes is about 10 deep: is it one of its report files?"
    )


def load(path: str | os.PathLike[str], what: str = "results file") -> dict[str, Any]:
    """Read and validate a report/baseline file; any problem is a :class:`ConfigError` naming
    the file and what is wrong (never silently replaced), nesting deeper than
    :data:`MAX_DEPTH` too."""
    import jsonschema

    target = Path(path)
    try:
        raw = target.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{what} {target}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} {target}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
            f"{exc.start}); is it a JSON file written by pytest-specdecode?"
        ) from None
    try:
        data = json.loads(text, parse_constant=_NonFinite, parse_float=_parse_float)
    except json.JSONDecodeError as exc:
        hint = " (the file looks truncated)" if exc.pos >= len(text.rstrip()) - 1 else ""
        raise ConfigError(
            f"{what} {target}: not valid JSON at line {exc.lineno} column {exc.colno}: "
            f"{exc.msg}{hint}"
        ) from None
    except RecursionError:  # nested deeper than the parser goes
        raise ConfigError(_too_deep(what, target)) from None
    except ValueError as exc:  # e.g. an integer of 5000 digits
        raise ConfigError(f"{what} {target}: cannot be parsed as JSON: {exc}") from None
    if _deeper_than(data, MAX_DEPTH):  # before anything walks it (and every later reader)
        raise ConfigError(_too_deep(what, target))
    non_finite = _non_finite_at(data)
    if non_finite is not None:
        at, literal = non_finite
        raise ConfigError(
            f"{what} {target}: invalid at {_path_text(at)}: {literal} is not a finite number "
            "(JSON has no NaN or Infinity; pytest-specdecode writes an unknown figure as null)"
        )
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
        raise ConfigError(f"{what} {target}: invalid at {_path_text(error.absolute_path)}: "
                          f"{error.message}")  # fmt: skip
    result: dict[str, Any] = data
    return result


@contextlib.contextmanager
def locked(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive lock for ``path``: ``flock`` on the lock file ``<path>.lock`` beside
    it (beside a symbolic link's target: :func:`resolved`), removed again on release. Blocks
    while another process holds it."""
    import fcntl

    target = resolved(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = target.with_name(target.name + LOCK_SUFFIX)
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    while True:
        fd = os.open(lock, flags, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # The holder before us may have removed the lock file: then ours is stale, retry.
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.stat(lock), os.fstat(fd)):
                    break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


#: Saving sessions a baseline entry remembers (the newest ones).
MAX_SESSIONS = 10


def with_sessions(
    fresh_results: Sequence[Mapping[str, Any]],
    stored: Mapping[str, Any] | None,
    environment: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """``fresh_results`` with the saving sessions of the same results in ``stored`` (a file
    saved before into the same path) and this one, from which the regression rule estimates
    the between-session variance. History is kept only when the stored result's environment
    (:func:`~.compare.own_environment`) and the engines' configuration are this run's: a real
    change starts it again."""
    old = StoredResults([] if stored is None else stored["results"])
    stored_environment = {} if stored is None else stored.get("environment")
    merged = []
    for result in fresh_results:
        entry = dict(result)
        ratios = entry.get("ratios") or []
        if len(ratios) >= 2:
            before = old.find(ResultKey.of(entry))
            history: list[Any] = []
            if (
                before is not None
                and all(before.get(k) == entry.get(k) for k in ("target", "speculative_config"))
                and not environment_differences(
                    own_environment(before, stored_environment), environment
                )
            ):
                history = list(before.get("sessions") or [])
                if not history and len(before.get("ratios") or []) >= 2:
                    history = [Session.of(before["ratios"]).to_dict()]
            entry["sessions"] = [*history, Session.of(ratios).to_dict()][-MAX_SESSIONS:]
        merged.append(entry)
    return merged


def _merged(stored: Sequence[Mapping[str, Any]], fresh: Sequence[Mapping[str, Any]]) -> list[Any]:
    """``stored`` with each entry that a ``fresh`` one matches (as a comparison matches them,
    :class:`~.compare.StoredResults`) replaced in place, and the fresh entries that match none
    at the end."""
    matching = StoredResults(stored).match(fresh)
    replacing: dict[int, list[Mapping[str, Any]]] = {}
    added = []
    for new, old in matching.pairs:
        if old is None:
            added.append(new)
        else:
            replacing.setdefault(id(old), []).append(new)
    return [dict(e) for r in stored for e in replacing.get(id(r), [r])] + [dict(r) for r in added]


def merge_results(
    stored: Mapping[str, Any] | None,
    fresh_results: Sequence[Mapping[str, Any]],
    environment: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The results of a saved run or baseline once this run's are in: ``stored`` (the file
    as it was, or None) with the entries this run produced replaced by its fresh ones
    (:func:`with_sessions`) and new ones added; every other entry is kept. Each result carries
    the environment it was measured in: this run's for the fresh ones, the stored entry's own
    (or its file's, for a file written before entries had one) for the others."""
    fresh = [
        {**r, "environment": dict(environment)}
        for r in with_sessions(fresh_results, stored, environment)
    ]
    if stored is None:
        return fresh
    file_environment = stored.get("environment")
    kept = [
        {**r, "environment": dict(own_environment(r, file_environment))} for r in stored["results"]
    ]
    return _merged(kept, fresh)


def load_to_merge(path: str | os.PathLike[str], what: str) -> dict[str, Any] | None:
    """The file at ``path`` that this run's results will be merged into, or None when there is
    none. A file that cannot be read, or that a newer pytest-specdecode wrote, is a
    :class:`ConfigError` naming the fix: it may hold other runs' entries, so it is never
    replaced."""
    if not os.path.exists(path):  # (a dangling symbolic link: its target is created)
        return None
    try:
        return load(path, what)
    except ConfigError as exc:
        raise ConfigError(
            f"{exc} -- left as it is: this run merges its results into that file and never "
            "replaces one it cannot read (it may hold other tests' entries). Repair it, or move "
            "it away to start a new file, or write to another path"
        ) from None


def save_run(
    path: str | os.PathLike[str],
    report: dict[str, Any],
    derive: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Merge a saved run into ``path`` and return what was written: under :func:`locked`, the
    file is read again and this run's results and products (:data:`PRODUCTS`) take the place
    of the entries they match, every other entry is kept (:func:`merge_results`); the rest
    (environment, session, comparisons) is this run's. ``derive`` recomputes what is made
    from the merged results (the checklist). An unreadable file is refused
    (:func:`load_to_merge`) and left as it is."""
    with locked(path):
        stored = load_to_merge(path, "saved run")
        data = {
            **report,
            "results": merge_results(stored, report["results"], report["environment"]),
        }
        for kind in PRODUCTS:
            if stored is not None and (stored.get(kind) or report.get(kind)):
                data[kind] = _merged(stored.get(kind) or [], report.get(kind) or [])
        if derive is not None:
            data = derive(data)
        write(path, data)
    return data


def update_baseline(
    path: str | os.PathLike[str],
    fresh_results: Sequence[Mapping[str, Any]],
    environment: dict[str, Any],
    session: dict[str, Any],
) -> dict[str, Any]:
    """Replace the entries of the baseline ``path`` that this run produced (matched as a
    comparison matches them, :class:`~.compare.StoredResults`), keep the others with their own
    environment (:func:`merge_results`), and return what was written. The file is read again
    under :func:`locked`, so a run that updated it meanwhile keeps its entries. A missing file
    is created; an unreadable one is a :class:`ConfigError` and is left as it is."""
    with locked(path):
        stored = load_to_merge(path, "baseline file")
        data = build(merge_results(stored, fresh_results, environment), environment, session)
        write(path, data)
    return data
