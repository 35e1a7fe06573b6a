"""What killed engine processes leave in /dev/shm is cleaned up, and never blamed on the caller."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from pytest_specdecode.engines.leftovers import OPENMP_FILE_PREFIX, remove_openmp_files

#: A spawned child (sharing this script's resource tracker, as an engine worker does) that
#: takes a tracker of its own, creates shared memory and is killed before unlinking it.
CHILD = """
import multiprocessing, os, signal, sys
from multiprocessing import shared_memory

def child(own, log):
    fd = os.open(log, os.O_WRONLY | os.O_CREAT)
    os.dup2(fd, 2)
    if own:
        from pytest_specdecode.engines.leftovers import own_resource_tracker
        own_resource_tracker()
    shm = shared_memory.SharedMemory(create=True, size=4096)
    print(shm.name, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=child, args=(sys.argv[1] == "own", sys.argv[2]))
    p.start()
    p.join()
"""


def _run(tmp_path: Path, own: bool) -> tuple[str, str, str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(CHILD))
    log = tmp_path / "child.log"
    done = subprocess.run(
        [sys.executable, str(script), "own" if own else "inherited", str(log)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    name = done.stdout.strip().lstrip("/")
    deadline = time.monotonic() + 10  # the child's tracker ends a moment after the child
    while os.path.exists(f"/dev/shm/{name}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/dev/shm/{name}"), "the killed child's shared memory leaked"
    while "leaked" not in log.read_text() and own and time.monotonic() < deadline:
        time.sleep(0.05)
    return name, done.stderr, log.read_text()


def test_a_killed_child_with_its_own_tracker_is_not_blamed_on_the_parent(tmp_path: Path) -> None:
    _, parent_stderr, child_log = _run(tmp_path, own=True)
    assert "leaked" not in parent_stderr, parent_stderr
    assert "leaked shared_memory" in child_log  # its own tracker cleaned up and said so


def test_without_it_the_parent_is_blamed(tmp_path: Path) -> None:
    """What the engine worker's own tracker prevents: the caller's tracker warns at exit."""
    _, parent_stderr, _ = _run(tmp_path, own=False)
    assert "leaked shared_memory" in parent_stderr, parent_stderr


def test_openmp_files_of_exited_processes_are_removed(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], text=True,
                          capture_output=True, check=True).stdout.strip()  # fmt: skip
    me = os.getpid()
    for pid in (gone, me):
        (tmp_path / f"{OPENMP_FILE_PREFIX}{pid}_0").write_text("x")
    removed = remove_openmp_files([int(gone), me], directory=str(tmp_path))
    assert removed == [str(tmp_path / f"{OPENMP_FILE_PREFIX}{gone}_0")]  # a running one stays
    assert remove_openmp_files([me], exiting=True, directory=str(tmp_path)) == [
        str(tmp_path / f"{OPENMP_FILE_PREFIX}{me}_0")
    ]
    assert list(tmp_path.iterdir()) == []
