"""Self-check of the phase clock (``pytest_specdecode/engines/phase_clock.py``): does it split a
step's time by phase as a synchronized reference does? Needs torch only (no vLLM).

    python benchmarks/phase_clock_gpu.py             # CUDA events on a GPU, else the wall clock
    python benchmarks/phase_clock_gpu.py --steps 20  # fewer steps (a smoke run)

Each step runs three "phases" of matrix products of known relative cost (1, 2 and 4 products
of the same size) back to back, timed the way the engine worker times a step: a clock mark
between phases, nothing waited for until the end (``settle``). Interleaved with those steps, a
reference times each phase alone, synchronizing the device before and after it
(``torch.cuda.synchronize()``; nothing to wait for on a CPU) with the wall clock. It prints
both splits (medians per step), the host wall clock's split of the unsynchronized steps (what
a wall clock alone would report on a GPU: the time to queue the work), and exits 1 when a
phase's share measured by the clock differs from the reference's by more than 10% of it, or
the clock's step total from the synchronized wall time of the steps by more than 10%.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLOCK_FILE = ROOT / "pytest_specdecode" / "engines" / "phase_clock.py"
#: Products per phase: the phases' relative costs.
PHASES = {"light": 1, "middle": 2, "heavy": 4}
#: Largest relative difference allowed between measured and reference shares (and totals).
TOLERANCE = 0.10


def load_clock_module() -> Any:
    """The clock module, loaded from its file alone (no other part of the package)."""
    spec = importlib.util.spec_from_file_location("specdecode_phase_clock", CLOCK_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="steps of each kind (default 60)")
    parser.add_argument("--size", type=int, default=0, help="matrix size (default: by device)")
    args = parser.parse_args(argv)

    import torch

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    size = args.size or (4096 if cuda else 192)
    if not cuda:
        torch.set_num_threads(1)  # one core: steadier on a shared machine
    clock = load_clock_module().clock_for(device.type)
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)

    def work(products: int) -> None:
        for _ in range(products):
            torch.mm(a, b)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def measured_step() -> tuple[list[Any], list[float]]:
        marks, host = [clock.mark()], [time.perf_counter()]
        for products in PHASES.values():
            work(products)
            marks.append(clock.mark())
            host.append(time.perf_counter())
        return marks, host

    def reference_step() -> list[float]:
        spent = []
        for products in PHASES.values():
            sync()
            start = time.perf_counter()
            work(products)
            sync()
            spent.append(time.perf_counter() - start)
        return spent

    for _ in range(3):  # warm-up: kernels chosen, caches and clocks up
        measured_step()
        reference_step()
    sync()

    # per phase, one value per step; medians over steps (a shared machine's hiccups aside)
    measured_steps: list[list[float]] = [[] for _ in PHASES]
    host_steps: list[list[float]] = [[] for _ in PHASES]
    reference_steps: list[list[float]] = [[] for _ in PHASES]
    totals: list[float] = []  # the clock's step totals
    walls: list[float] = []  # synchronized wall time of each unsynchronized step
    for _ in range(args.steps):
        sync()
        start = time.perf_counter()
        marks, stamps = measured_step()
        sync()
        walls.append(time.perf_counter() - start)
        clock.settle(marks)
        for i in range(len(PHASES)):
            measured_steps[i].append(clock.seconds(marks[i], marks[i + 1]))
            host_steps[i].append(stamps[i + 1] - stamps[i])
        totals.append(clock.seconds(marks[0], marks[-1]))
        clock.recycle(marks)
        for i, spent in enumerate(reference_step()):
            reference_steps[i].append(spent)
    median = statistics.median
    measured = [median(v) for v in measured_steps]
    host = [median(v) for v in host_steps]
    reference = [median(v) for v in reference_steps]
    total, wall = median(totals), median(walls)

    def shares(values: list[float]) -> list[float]:
        whole = sum(values)
        return [v / whole if whole > 0 else 0.0 for v in values]

    name = torch.cuda.get_device_name() if cuda else "host"
    print(f"device {device.type} ({name}), clock {clock.name}, {args.steps} steps, "
          f"matrices {size}x{size}, torch {torch.__version__}")  # fmt: skip
    print(f"{'phase':<8} {'products':>8} {'clock ms':>10} {'share':>7} {'reference ms':>13} "
          f"{'share':>7} {'host wall ms':>13} {'share':>7}")  # fmt: skip
    ok = True
    rows = zip(PHASES.items(), measured, shares(measured), reference, shares(reference),
               host, shares(host), strict=True)  # fmt: skip
    for (name, products), m, ms, r, rs, h, hs in rows:
        off = abs(ms - rs) / rs if rs else 0.0
        ok &= off <= TOLERANCE
        print(f"{name:<8} {products:>8} {m * 1e3:>10.3f} {ms:>7.1%} "
              f"{r * 1e3:>13.3f} {rs:>7.1%} {h * 1e3:>13.3f} {hs:>7.1%}"
              f"   share off by {off:.1%}")  # fmt: skip
    total_off = abs(total - wall) / wall if wall else 0.0
    ok &= total_off <= TOLERANCE
    print(f"step total by the clock {total * 1e3:.3f} ms, synchronized wall "
          f"{wall * 1e3:.3f} ms (off by {total_off:.1%})")  # fmt: skip
    verdict = "agree" if ok else "DISAGREE"
    print(f"{verdict}: the clock's split and the synchronized reference within {TOLERANCE:.0%}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
