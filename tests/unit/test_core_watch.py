"""The worker answers "dead" for a call vLLM never wakes after its engine core died."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from pytest_specdecode.engines import worker


class _Core:
    """An engine whose core process can be made to have died."""

    def __init__(self) -> None:
        self.dead = False

    def core_exit(self) -> str | None:
        return "process EngineCore_DP0 (pid 7) killed by SIGKILL" if self.dead else None


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    exited = threading.Event()

    def fake_exit(code: int) -> None:  # the worker would exit here; the watch thread ends
        exited.set()

    monkeypatch.setattr(worker, "DEAD_CORE_GRACE", 0.3)
    monkeypatch.setattr(worker, "_kill_group_and_exit", fake_exit)
    return exited


def test_a_call_left_hanging_by_a_dead_core_is_answered_dead(exits: threading.Event) -> None:
    parent, child = multiprocessing.Pipe()
    engine = _Core()
    watch = worker._CoreWatch(child, engine)
    watch.start()
    watch.busy_since = time.monotonic()  # a generate call that vLLM never wakes
    assert not parent.poll(1.0)  # the core runs: nothing is said
    engine.dead = True
    assert parent.poll(5.0)
    kind, cause = parent.recv()
    assert kind == "dead"
    assert "killed by SIGKILL" in cause and "did not raise within" in cause
    assert exits.wait(5.0)


def test_an_idle_worker_leaves_a_dead_core_to_the_next_call(exits: threading.Event) -> None:
    parent, child = multiprocessing.Pipe()
    engine = _Core()
    engine.dead = True
    worker._CoreWatch(child, engine).start()  # no call in progress: vLLM raises on the next
    assert not parent.poll(1.5)
    assert not exits.is_set()
