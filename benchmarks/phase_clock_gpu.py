"""Self-check of the phase clock (``pytest_specdecode/engines/phase_clock.py``): does it split a
step's time by phase as a synchronized reference does? Needs torch only (no vLLM).

    python benchmarks/phase_clock_gpu.py             # every check (a CPU: the split alone)
    python benchmarks/phase_clock_gpu.py --steps 20  # fewer steps (a smoke run)
    python benchmarks/phase_clock_gpu.py --check graph   # one check: split, marks or graph

Each step runs three "phases" of matrix products of known relative cost (1, 2 and 4 products
of the same size) back to back, timed the way the engine worker times a step: a clock mark
between phases, nothing waited for until the end (``settle``). Interleaved with those steps, a
reference times each phase alone, synchronizing the device before and after it
(``torch.cuda.synchronize()``; nothing to wait for on a CPU) with the wall clock. It prints
both splits (medians per step), the host wall clock's split of the unsynchronized steps (what
a wall clock alone would report on a GPU: the time to queue the work), and exits 1 when a
phase's share measured by the clock differs from the reference's by more than 10% of it, or
the clock's step total from the synchronized wall time of the steps by more than 10%.

Two more checks need a CUDA GPU (on a CPU, ``--check all`` runs the split alone and says so;
``--check marks`` or ``--check graph`` exits 2, "needs a CUDA GPU"):

- ``marks``: what a mark costs. Steps of one small matrix product each, run back to back with
  and without a clock mark after each product (the clock's reused events, as in every round but
  the first; with new events too): host microseconds per mark (the time to queue it) and device
  microseconds per mark (two events around the whole run), medians of interleaved repeats. A
  figure, not a pass/fail check. The default product (1024x1024) outlasts its launch, so the
  device runs behind the host; with ``--mark-size 64`` the device waits on the host instead.
- ``graph``: a captured CUDA graph's replay timed by marks. A few chained matrix products are
  captured in a ``torch.cuda.CUDAGraph`` (warmed up on a side stream first, as torch's docs
  ask); replays run back to back with a mark between two, and each replay is also timed alone
  between two ``torch.cuda.synchronize()``. It fails when the marks' median replay differs from
  the synchronized one by more than 10%, or their total from the synchronized wall time of the
  replays by more than 10%. vLLM's V2 runner replays its CUDA graphs between the marks the same
  way (``step_timing.forward_start``, then the model or its graph on the current stream).

Exit status: 0 when every check run agrees, 1 when one disagrees, 2 when a check asked for
cannot run.
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
#: The checks, in the order ``--check all`` runs them; those after the split need a GPU.
CHECKS = ("split", "marks", "graph")
GPU_CHECKS = CHECKS[1:]


def load_clock_module() -> Any:
    """The clock module, loaded from its file alone (no other part of the package)."""
    spec = importlib.util.spec_from_file_location("specdecode_phase_clock", CLOCK_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def split_check(torch: Any, args: argparse.Namespace) -> bool:
    """The clock's split of a step against the synchronized reference; whether they agree."""
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
    return ok


def mark_cost(torch: Any, args: argparse.Namespace) -> None:
    """Print what one mark of the CUDA-event clock costs, on the host and on the device."""
    clocks = load_clock_module()
    clock = clocks.CudaEventClock()
    size, steps = args.mark_size, args.mark_steps
    x = torch.randn(size, size, device="cuda")
    y = torch.randn(size, size, device="cuda") / size**0.5
    z = torch.empty_like(x)
    begin = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)

    def run(marker: Any) -> tuple[float, float]:
        """Seconds per step on the host (queueing) and on the device; marks by ``marker``."""
        marks: list[Any] = []
        torch.cuda.synchronize()
        begin.record()
        start = time.perf_counter()
        for _ in range(steps):
            torch.mm(x, y, out=z)
            if marker is not None:
                marks.append(marker.mark())
        host = time.perf_counter() - start
        end.record()
        end.synchronize()
        device = begin.elapsed_time(end) / 1000.0
        if marker is not None:
            marker.settle(marks)
            marker.recycle(marks)
        return host / steps, device / steps

    for _ in range(2):  # warm-up: the product's kernel chosen, the clock's events made
        run(None)
        run(clock)
    plain: list[tuple[float, float]] = []
    marked: list[tuple[float, float]] = []
    fresh: list[tuple[float, float]] = []  # a new clock: every mark makes its event
    for _ in range(args.repeats):  # interleaved: drifts hit all three alike
        plain.append(run(None))
        marked.append(run(clock))
        fresh.append(run(clocks.CudaEventClock()))
    median = statistics.median
    host = [median(h for h, _ in runs) for runs in (plain, marked, fresh)]
    device = [median(d for _, d in runs) for runs in (plain, marked, fresh)]
    print(f"\nmark cost: {steps} steps of one {size}x{size} product, {args.repeats} repeats "
          "(medians, per step)")  # fmt: skip
    print(f"{'':<22} {'host us':>10} {'device us':>10}")
    labels = ("no mark", "a mark (reused event)", "a mark (new event)")
    for label, h, d in zip(labels, host, device, strict=True):
        print(f"{label:<22} {h * 1e6:>10.2f} {d * 1e6:>10.2f}")
    per_host, per_device = (host[1] - host[0]) * 1e6, (device[1] - device[0]) * 1e6
    print(f"per mark: host {per_host:.2f} us ({(host[2] - host[0]) * 1e6:.2f} us with a new "
          f"event), device {per_device:.2f} us; a speculative step's 8 marks: host "
          f"{8 * per_host:.1f} us, device {8 * per_device:.1f} us")  # fmt: skip


def graph_check(torch: Any, args: argparse.Namespace) -> bool:
    """A captured CUDA graph's replays timed by the clock's marks against synchronized
    replays; whether they agree."""
    clock = load_clock_module().CudaEventClock()
    size, replays = args.graph_size, args.replays
    a = torch.randn(size, size, device="cuda")
    b = torch.randn(size, size, device="cuda") / size**0.5  # chained products stay near 1
    outs = [torch.empty_like(a) for _ in range(args.graph_products)]

    def work() -> None:
        x = a
        for out in outs:
            torch.mm(x, b, out=out)
            x = out

    side = torch.cuda.Stream()  # warm-up on a side stream before capture (torch's docs)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            work()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()

    def timed(run: Any) -> tuple[list[float], float, float, float]:
        """Per call of ``run`` by the marks, their total, the synchronized wall time of the
        calls and the host's time to queue them (per call)."""
        torch.cuda.synchronize()
        start = time.perf_counter()
        marks = [clock.mark()]
        for _ in range(replays):
            run()
            marks.append(clock.mark())
        queued = time.perf_counter() - start
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
        clock.settle(marks)
        each = [clock.seconds(marks[i], marks[i + 1]) for i in range(replays)]
        total = clock.seconds(marks[0], marks[-1])
        clock.recycle(marks)
        return each, total, wall, queued / replays

    each, total, wall, queued = timed(graph.replay)
    eager, _, _, eager_queued = timed(work)
    reference = []
    for _ in range(replays):
        torch.cuda.synchronize()
        start = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        reference.append(time.perf_counter() - start)
    median = statistics.median
    by_marks, synced = median(each), median(reference)
    off = abs(by_marks - synced) / synced if synced else 0.0
    total_off = abs(total - wall) / wall if wall else 0.0
    ok = off <= TOLERANCE and total_off <= TOLERANCE
    print(f"\ngraph replay: {args.graph_products} chained {size}x{size} products captured in a "
          f"CUDA graph, {replays} replays (medians)")  # fmt: skip
    print(f"replay by the marks {by_marks * 1e3:.3f} ms, synchronized alone {synced * 1e3:.3f} ms "
          f"(off by {off:.1%}); the host queued one in {queued * 1e6:.1f} us")  # fmt: skip
    print(f"replays' total by the marks {total * 1e3:.3f} ms, synchronized wall "
          f"{wall * 1e3:.3f} ms (off by {total_off:.1%})")  # fmt: skip
    print(f"the same products eager, by the marks: {median(eager) * 1e3:.3f} ms "
          f"(queued in {eager_queued * 1e6:.1f} us)")  # fmt: skip
    verdict = "agree" if ok else "DISAGREE"
    print(f"{verdict}: graph replays by the marks and synchronized within {TOLERANCE:.0%}")
    return ok


def describe(torch: Any) -> str:
    """The GPU, its driver (by NVML where pynvml is installed) and torch's CUDA."""
    said = f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        said += f", driver {driver.decode() if isinstance(driver, bytes) else driver}"
    except Exception:  # noqa: BLE001 - the driver is a detail of the report
        pass
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Self-check of the phase clock: its split of a step against a synchronized "
        "reference; on a CUDA GPU also a mark's cost and a CUDA graph's replay timed by marks."
    )
    parser.add_argument("--check", choices=("all", *CHECKS), default="all",
                        help="which check to run (default all: on a CPU, the split)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=60, help="steps of each kind (default 60)")
    parser.add_argument("--size", type=int, default=0, help="matrix size (default: by device)")
    parser.add_argument("--mark-steps", type=int, default=200,
                        help="marks: steps per run (default 200)")  # fmt: skip
    parser.add_argument("--mark-size", type=int, default=1024,
                        help="marks: the product's matrix size (default 1024)")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=20,
                        help="marks: runs of each kind (default 20)")  # fmt: skip
    parser.add_argument("--replays", type=int, default=50,
                        help="graph: replays of each kind (default 50)")  # fmt: skip
    parser.add_argument("--graph-size", type=int, default=2048,
                        help="graph: matrix size (default 2048)")  # fmt: skip
    parser.add_argument("--graph-products", type=int, default=4,
                        help="graph: chained products captured (default 4)")  # fmt: skip
    args = parser.parse_args(argv)

    import torch

    cuda = torch.cuda.is_available()
    if not cuda and args.check in GPU_CHECKS:
        print(f"phase_clock_gpu: --check {args.check} needs a CUDA GPU (torch {torch.__version__} "
              "sees none: torch.cuda.is_available() is False); on a CPU only --check split "
              "runs", file=sys.stderr)  # fmt: skip
        return 2
    checks = CHECKS if args.check == "all" else (args.check,)
    if cuda:
        print(f"GPU: {describe(torch)}")
    ok = True
    if "split" in checks:
        ok &= split_check(torch, args)
    if not cuda:
        if args.check == "all":
            print(f"\n{', '.join(GPU_CHECKS)}: not run, they need a CUDA GPU")
        return 0 if ok else 1
    if "marks" in checks:
        mark_cost(torch, args)
    if "graph" in checks:
        ok &= graph_check(torch, args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
