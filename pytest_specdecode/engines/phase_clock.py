"""The clocks that time the phases of an engine step: the wall clock on a CPU, CUDA events on a
GPU.

On a GPU the host only queues work: a wall clock around a forward pass times the queueing, not
the pass. :class:`CudaEventClock` records a CUDA event on the current stream at each mark and
reads the time between two marks on the device, after the round (:meth:`~CudaEventClock.settle`
waits once for the last event), so the hot path never synchronizes. On a CPU everything runs
on the host and :class:`WallClock` is exact.

This module imports torch only to make a :class:`CudaEventClock`, and nothing of vLLM or of the
rest of this package: ``benchmarks/phase_clock_gpu.py`` checks it on a machine with torch alone.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol


class PhaseClock(Protocol):
    """Takes marks at points of a step and tells the seconds between two of them."""

    #: how its times are taken: ``"wall"`` or ``"cuda-events"`` (``StepProfile.clock``)
    name: str

    def mark(self) -> Any:
        """A mark for this point (cheap: called on the hot path)."""
        ...

    def settle(self, marks: Sequence[Any]) -> None:
        """Wait until every one of ``marks`` can be read (once, at the end of a round)."""
        ...

    def seconds(self, start: Any, end: Any) -> float:
        """Seconds from mark ``start`` to mark ``end`` (both settled)."""
        ...

    def recycle(self, marks: Sequence[Any]) -> None:
        """``marks`` are read and will not be used again."""
        ...


class WallClock:
    """Host wall time (``time.perf_counter``): exact where the work runs on the host (CPU)."""

    name = "wall"

    def mark(self) -> float:
        return time.perf_counter()

    def settle(self, marks: Sequence[Any]) -> None:
        pass

    def seconds(self, start: float, end: float) -> float:
        return float(end - start)

    def recycle(self, marks: Sequence[Any]) -> None:
        pass


class CudaEventClock:
    """Device time: each mark records a timing CUDA event on the current stream, where the
    device reaches it after the work queued before it; the time between two marks is read
    with ``Event.elapsed_time`` once both are done. Events are reused across rounds."""

    name = "cuda-events"

    def __init__(self) -> None:
        import torch

        self._event = torch.cuda.Event
        self._free: list[Any] = []

    def mark(self) -> Any:
        event = self._free.pop() if self._free else self._event(enable_timing=True)
        event.record()
        return event

    def settle(self, marks: Sequence[Any]) -> None:
        for event in marks:  # all on streams of this device; each wait ends once the last did
            event.synchronize()

    def seconds(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) / 1000.0

    def recycle(self, marks: Sequence[Any]) -> None:
        self._free.extend(marks)


def clock_for(device_type: str) -> PhaseClock:
    """The clock for a model on a torch device of type ``device_type``: CUDA events on
    ``"cuda"`` (ROCm included), the wall clock elsewhere."""
    if device_type == "cuda":
        return CudaEventClock()
    return WallClock()
