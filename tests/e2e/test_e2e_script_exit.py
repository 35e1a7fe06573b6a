"""The README's plain ``Bench`` script (``examples/bench_tiny.py``) on real engines ends with its
own output: no warning on stderr after it (multiprocessing's resource tracker blamed the
script for shared memory that vLLM's killed processes left), and nothing left in ``/dev/shm``
by any process of the run; after a clean exit and after Ctrl-C alike."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ..e2e_support import (
    default_sigint,
    kill_run,
    needs_vllm,
    processes_with_tag,
    surviving_processes,
    tagged_env,
)

pytestmark = [needs_vllm, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bench_tiny.py"
SHM = Path("/dev/shm")
#: Intel OpenMP's per-process registration file in /dev/shm (``<pid>_<uid>`` follow).
OPENMP_FILE = "__KMP_REGISTERED_LIB_"
#: How long the script may take to exit after the Ctrl-C.
EXIT_SECONDS = 20


def _cheaper(source: str, trials: int, max_tokens: int) -> str:
    """The example with fewer rounds and tokens (the same code otherwise)."""
    for old, new in (
        ("trials=5", f"trials={trials}"),
        ("max_tokens=64", f"max_tokens={max_tokens}"),
    ):
        assert old in source, f"{EXAMPLE} no longer has {old!r}: update this test"
        source = source.replace(old, new)
    return source


class Script:
    """The example run as a plain script in a session of its own (as from a terminal), its
    stderr lines collected as they come, and what its processes hold in /dev/shm recorded."""

    def __init__(self, root: Path, trials: int, max_tokens: int) -> None:
        path = root / "bench_tiny.py"
        path.write_text(_cheaper(EXAMPLE.read_text(), trials, max_tokens))
        self.tag = f"specdecode-exit-{uuid.uuid4().hex}"
        self.pids: dict[int, str] = {}  # every process of the run seen, with its command
        self.shm: set[str] = set()  # /dev/shm names the run's processes mapped or opened
        self.lines: list[str] = []
        # What /dev/shm held before: a file that a dead process of an earlier run left under a
        # pid this run's processes reuse is not this run's.
        self.before = {path.name for path in SHM.iterdir()}
        self.proc = subprocess.Popen(
            [sys.executable, str(path)], cwd=root, env=tagged_env(self.tag),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True, preexec_fn=default_sigint,
        )  # fmt: skip
        self.out: list[str] = []
        self._done = threading.Event()
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_out, daemon=True),
            threading.Thread(target=self._watch, daemon=True),
        ]
        for thread in self._readers:
            thread.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.out.append(line)

    def _watch(self) -> None:
        while not self._done.is_set():
            for entry in processes_with_tag(self.tag):
                pid = int(entry.split(":")[0])
                self.pids.setdefault(pid, entry)
                self.shm |= _shm_names(pid)
            time.sleep(0.5)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def seen(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def wait_for(self, text: str, timeout: float = 400) -> None:
        deadline = time.monotonic() + timeout
        while not self.seen(text):
            assert self.proc.poll() is None, f"the script ended before {text!r}:\n{self.stderr}"
            assert time.monotonic() < deadline, f"no {text!r} in {timeout} s:\n{self.stderr}"
            time.sleep(0.2)

    def finish(self, timeout: float) -> tuple[int, str]:
        """Wait for the exit; then the exit code and stdout."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the script still runs after {timeout} s:\n{self.stderr}")
        self._done.set()
        for thread in self._readers:
            thread.join(10)
        return self.proc.returncode, "".join(self.out)

    def after_progress(self) -> list[str]:
        """Stderr lines after the last ``[specdecode]`` progress line."""
        last = max((i for i, line in enumerate(self.lines) if line.startswith("[specdecode]")))
        return self.lines[last + 1 :]

    def left_in_shm(self) -> list[str]:
        """What the run's processes left in /dev/shm, once every one has exited."""
        assert surviving_processes(self.tag) == []
        openmp = {f"{OPENMP_FILE}{pid}_": pid for pid in [*self.pids, self.proc.pid]}
        left = []
        for path in SHM.iterdir():
            if path.name in self.before:
                continue
            if path.name in self.shm:
                left.append(path.name)
            for prefix, pid in openmp.items():
                if path.name.startswith(prefix):
                    left.append(f"{path.name} ({self.pids.get(pid, 'the script')})")
        return sorted(left)

    def kill_leftovers(self) -> None:
        self._done.set()
        kill_run(self.proc, self.tag)


def _shm_names(pid: int) -> set[str]:
    """/dev/shm files that ``pid`` maps or holds open."""
    names = set()
    try:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            if " /dev/shm/" in line:
                names.add(line.split(" /dev/shm/", 1)[1].split()[0])
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("/dev/shm/"):
                names.add(target.split("/dev/shm/", 1)[1].split()[0])
    except OSError:
        pass
    return names


@pytest.fixture
def script(tmp_path: Path) -> Iterator[Callable[[int, int], Script]]:
    started: list[Script] = []

    def start(trials: int, max_tokens: int) -> Script:
        started.append(Script(tmp_path, trials, max_tokens))
        return started[-1]

    yield start
    for s in started:
        s.kill_leftovers()


def test_the_example_script_ends_with_its_own_output(
    script: Callable[[int, int], Script],
) -> None:
    s = script(2, 8)  # trials, max_tokens
    code, out = s.finish(timeout=600)
    assert code == 0, s.stderr
    assert "verdict:" in out, out
    assert s.seen("round 2/2"), s.stderr
    assert s.after_progress() == [], s.stderr  # no resource-tracker warning, nothing at all
    assert s.shm, "the run's processes were never seen holding shared memory"
    assert s.left_in_shm() == []


def test_the_example_script_interrupted_in_a_round_leaves_nothing(
    script: Callable[[int, int], Script],
) -> None:
    s = script(50, 64)
    s.wait_for("round 1/50")
    os.killpg(s.proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the script's process group
    code, _ = s.finish(timeout=EXIT_SECONDS)
    assert code != 0
    tail = s.after_progress()
    assert tail and "KeyboardInterrupt" in tail[-1], s.stderr
    assert [line for line in tail if "Warning" in line or "leaked" in line] == [], s.stderr
    assert s.left_in_shm() == []
