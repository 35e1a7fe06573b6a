"""What engine processes leave in ``/dev/shm`` when they are killed, and its cleanup.

vLLM's processes create shared memory (the message queues between its engine core and its
model process) that they unlink only when they exit normally. Spawned processes report what
they create to the resource tracker they inherit, so without care an engine killed rather than
shut down has its segments blamed on the caller: the caller's tracker unlinks them when the
caller exits and warns ``There appear to be N leaked shared_memory objects``. The engine worker
therefore gives its process tree a resource tracker of its own (:func:`own_resource_tracker`),
in a session of its own so that killing the engine's process group spares it: it unlinks what
the tree left once every process of the tree has exited, and writes its warning to the engine
log. Intel OpenMP (which vLLM for CPU preloads) registers each process in a file
``/dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid>`` that only a normal exit removes:
:func:`remove_openmp_files` removes those of processes that are gone.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from multiprocessing import resource_tracker

import psutil

SHM_DIR = "/dev/shm"
#: Intel OpenMP's per-process registration file (``<pid>_<uid>`` follow).
OPENMP_FILE_PREFIX = "__KMP_REGISTERED_LIB_"
_TRACKER = "from multiprocessing.resource_tracker import main; main({fd})"


def own_resource_tracker() -> int:
    """Start a resource tracker for this process and the processes it spawns, in a session of
    its own, with this process's stdout and stderr; return its pid.

    Replaces the tracker this process inherited (a spawned child shares its parent's), as a
    spawned child adopts its parent's: by setting the module tracker's descriptor. The tracker
    ends once every process holding that descriptor has exited, and then unlinks what they left.
    """
    read, write = os.pipe()
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # it runs no OpenMP
    try:
        tracker = subprocess.Popen(
            [sys.executable, "-c", _TRACKER.format(fd=read)],
            pass_fds=(read,),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    inherited = resource_tracker._resource_tracker
    old = inherited._fd  # type: ignore[attr-defined]
    inherited._fd = write  # type: ignore[attr-defined]
    inherited._pid = None  # type: ignore[attr-defined]  # not ours to wait for, as in a child
    if old is not None:
        try:
            os.close(old)
        except OSError:
            pass
    return tracker.pid


def running(pid: int) -> bool:
    """Whether ``pid`` is a running process (not a zombie)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(pids: Iterable[int], timeout: float = 2.0) -> list[int]:
    """Wait until ``pids`` have exited (zombies count as exited), at most ``timeout``
    seconds; return those still running."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if running(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if running(p)]
    return left


def remove_openmp_files(
    pids: Iterable[int], *, exiting: bool = False, directory: str = SHM_DIR
) -> list[str]:
    """Remove Intel OpenMP's registration files of ``pids`` that are no longer running (with
    ``exiting``, this process's own too: it is about to exit); return the paths removed."""
    removed = []
    me = os.getpid()
    for pid in pids:
        if running(pid) and not (exiting and pid == me):
            continue
        for path in glob.glob(os.path.join(directory, f"{OPENMP_FILE_PREFIX}{pid}_*")):
            try:
                os.unlink(path)
            except OSError:
                continue
            removed.append(path)
    return removed
