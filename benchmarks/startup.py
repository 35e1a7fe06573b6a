"""Engine start-up: what the plugin adds to a bare vLLM start, the two engine modes, and the
compile cache; prints figures (no pass/fail).

    python benchmarks/startup.py overhead [--reps 3] [--speculative] [--mode in-process]
    python benchmarks/startup.py modes [--reps 3] [--blocks 6] [--trials 6] [--skip-starts]
                                       [--skip-figures] [--method ngram]
    python benchmarks/startup.py compile [--starts 2] [--cache-root DIR] [--env NAME=VALUE]
    python benchmarks/startup.py launch [--reps 2] [--starts 4] [--mode in-process]
                                        [--blocks 6] [--trials 6] [--skip-figures]

On the built-in tiny models (``pytest_specdecode.tiny``), each start in a fresh process (so
that every side pays its own interpreter and imports), timed from the process's launch to the
engine being ready:

- ``overhead``: the same engine started bare (``vllm.LLM`` with the final arguments and
  environment the plugin would give it, :func:`~pytest_specdecode.engines.placement.place`)
  and through the plugin (``EnginePool().acquire(config)``), interleaved (bare first in odd
  repetitions, plugin first in even ones); each start, the medians and the ratio
  plugin / bare (issue 15 asks for at most 1.05). Both in the pool's default engine mode, or
  both in ``--mode``.
- ``modes``: bare starts of the target and of the target with draft-model speculation in the
  ``in-process`` and ``multiprocess`` engine modes, interleaved, with a breakdown read from
  the time each log line arrived (the caller's imports, vLLM's engine-core process, its
  executor worker, model loading, the rest: KV cache, warm-up); then the measured figures in
  both modes, paired: ``--blocks`` blocks, each one ``Bench.run`` per mode (order alternating
  block to block) on the same prompts, the per-block ratios in-process / multiprocess of
  speedup and tokens/s with a 95% t-interval of their geometric mean, and acceptance per mode.
- ``compile``: ``--starts`` bare starts of the target without ``enforce_eager`` (vLLM compiles
  the model with torch.compile), printing each start's time and vLLM's compile-cache lines
  (saved, loaded, or "Compiling model again due to a load failure ... reason: ...").
  ``--cache-root`` sets ``VLLM_CACHE_ROOT`` (default: vLLM's, ``~/.cache/vllm``), ``--env
  NAME=VALUE`` any other variable (e.g. ``VLLM_USE_AOT_COMPILE=0``).
- ``launch``: how the plugin launches its engine workers (``engines/launch.py``): forked from
  a fork server that imported torch and vLLM, or spawned (``PYTEST_SPECDECODE_START_METHOD``).
  Each repetition runs one fresh process per method (order alternating), in which the pool
  starts ``--starts`` engines one after another (target, target + draft, ...; each closed
  before the next), printing every start's seconds to ready; then the medians of the first
  and of the later starts per method. Then the measured figures with both methods, paired as
  in ``modes`` (both in ``--mode``, default the pool's): per-block ratios fork server / spawn
  of speedup and tokens/s with a 95% t-interval, and each method's per-round log-ratio sd.

Run it on a quiet machine: every start and round is wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdecode.tiny import ENGINE_KWARGS  # noqa: E402 (no torch until a model is built)

MARK = "specdecode-startup:"

#: A bare start: import vLLM, build ``vllm.LLM`` with the given final arguments, say ready.
BARE = f"""
import json, sys
print("{MARK} importing", flush=True)
import vllm
from vllm import LLM  # vLLM imports its engine lazily: make the import phase whole
print("{MARK} imported", flush=True)
from pytest_specdecode.engines.worker import _has_request_metrics, run_mode, with_request_metrics
args = json.loads(sys.argv[1])
llm = vllm.LLM(args["target"], **with_request_metrics(args["kwargs"], _has_request_metrics()))
print("{MARK} ready " + json.dumps({{"engine_mode": run_mode(llm)}}), flush=True)
llm.llm_engine.engine_core.shutdown()
"""

#: A start through the plugin: the pool places and starts an engine worker.
PLUGIN = f"""
import json, sys
print("{MARK} importing", flush=True)
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.pool import EnginePool
print("{MARK} imported", flush=True)
args = json.loads(sys.argv[1])
pool = EnginePool(2, **({{"mode": args["mode"]}} if args["mode"] else {{}}))
engine = pool.acquire(EngineConfig.create(args["target"], args["spec"], args["engine_kwargs"]))
print("{MARK} ready " + json.dumps(engine.info), flush=True)
pool.close()
"""

#: Log lines that mark the phases of a start, first occurrence (see :func:`phases`).
LANDMARKS = {
    "imported": f"{MARK} imported",
    "core": "Initializing a V1 LLM engine",
    "load": "Starting to load model",
    "loaded": ("Loading weights took", "Model loading took"),
    "ready": f"{MARK} ready",
}


@dataclass
class Start:
    """One start in a fresh process: seconds to ready and the time each log line arrived."""

    seconds: float
    lines: list[tuple[float, str]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def first(self, *needles: str) -> float | None:
        for at, line in self.lines:
            if any(n in line for n in needles):
                return at
        return None

    def last(self, *needles: str, before: float | None = None) -> float | None:
        found = None
        for at, line in self.lines:
            if before is not None and at > before:
                break
            if any(n in line for n in needles):
                found = at
        return found

    def phases(self) -> dict[str, float | None]:
        """Seconds in each phase: imports (interpreter and ``import vllm``), engine core (from
        ``vllm.LLM()`` to vLLM's engine core initialising: its process's start and imports in
        the multiprocess mode), executor (to the model's load beginning: the executor worker's
        process in the multiprocess mode), model load (target and draft weights), rest (KV
        cache, warm-up, ready)."""
        imported = self.first(LANDMARKS["imported"])
        core = self.first(LANDMARKS["core"])
        load = self.first(LANDMARKS["load"])
        ready = self.seconds
        loaded = self.last(*LANDMARKS["loaded"], before=ready)
        marks = [0.0, imported, core, load, loaded, ready]
        names = ["imports", "engine core", "executor", "model load", "rest"]
        out: dict[str, float | None] = {}
        for name, a, b in zip(names, marks, marks[1:], strict=False):
            out[name] = None if a is None or b is None else b - a
        return out

    def describe(self) -> str:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in self.phases().items() if v is not None)
        return f"{self.seconds:6.1f} s ({parts})"


def launch(code: str, payload: dict[str, Any], env: dict[str, str], timeout: float) -> Start:
    """Run ``code`` in a fresh interpreter; the time from launch to its ready line."""
    full = {**os.environ, **env, "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"}
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(payload)], env=full, cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    start = Start(seconds=float("nan"))
    done = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            at = time.perf_counter() - began
            start.lines.append((at, line.rstrip("\n")))
            if line.startswith(f"{MARK} ready"):
                start.seconds = at
                start.info = json.loads(line[len(f"{MARK} ready") :])
                done.set()
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    done.wait(timeout)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        pass
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    reader.join(5)
    if start.seconds != start.seconds:  # NaN: it never became ready
        tail = "\n".join(line for _, line in start.lines[-30:])
        raise RuntimeError(f"the start failed (exit {proc.returncode}):\n{tail}")
    return start


def tiny_configs() -> dict[str, tuple[str, dict[str, Any] | None]]:
    from pytest_specdecode.tiny import tiny_models

    models = tiny_models()
    draft = {"method": "draft_model", "model": str(models.draft), "num_speculative_tokens": 4}
    return {"target": (str(models.target), None), "target + draft": (str(models.target), draft)}


def bare_start(
    target: str,
    spec: dict[str, Any] | None,
    kwargs: dict[str, Any],
    mode: str | None,
    timeout: float,
) -> Start:
    """``vllm.LLM`` in a fresh process, with the arguments and environment ``place`` gives
    (in ``mode``; None: ``place``'s default, as the pool calls it)."""
    from pytest_specdecode.engines.config import EngineConfig
    from pytest_specdecode.engines.hardware import detect_device
    from pytest_specdecode.engines.placement import DEFAULT_MODE, place

    config = EngineConfig.create(target, spec, kwargs)
    placement = place(config, detect_device(), 2, mode=mode or DEFAULT_MODE)
    payload = {"target": target, "kwargs": placement.engine_kwargs}
    return launch(BARE, payload, placement.env, timeout)


def plugin_start(
    target: str,
    spec: dict[str, Any] | None,
    kwargs: dict[str, Any],
    mode: str | None,
    timeout: float,
) -> Start:
    """``EnginePool().acquire`` in a fresh process (in ``mode``; None: the pool's own)."""
    payload = {"target": target, "spec": spec, "engine_kwargs": kwargs, "mode": mode}
    return launch(PLUGIN, payload, {}, timeout)


def overhead(args: argparse.Namespace) -> None:
    name = "target + draft" if args.speculative else "target"
    target, spec = tiny_configs()[name]
    times: dict[str, list[float]] = {"bare": [], "plugin": []}
    print(f"{name}, {ENGINE_KWARGS}; {args.reps} repetitions, interleaved")
    for rep in range(args.reps):
        order = ("bare", "plugin") if rep % 2 == 0 else ("plugin", "bare")
        for side in order:
            if side == "bare":
                done = bare_start(target, spec, dict(ENGINE_KWARGS), args.mode, args.timeout)
            else:
                done = plugin_start(target, spec, dict(ENGINE_KWARGS), args.mode, args.timeout)
            times[side].append(done.seconds)
            mode = done.info.get("engine_mode", "?")
            print(f"  rep {rep + 1} {side:6s} {done.seconds:6.1f} s  [{mode}]", flush=True)
    bare, plugin = (statistics.median(times[s]) for s in ("bare", "plugin"))
    pairs = [p / b for b, p in zip(times["bare"], times["plugin"], strict=True)]
    print(
        f"median start: bare {bare:.1f} s, plugin {plugin:.1f} s; ratio plugin / bare "
        f"{plugin / bare:.3f} (per repetition: {', '.join(f'{r:.3f}' for r in pairs)})"
    )


def mode_starts(args: argparse.Namespace) -> None:
    from pytest_specdecode.engines.placement import IN_PROCESS, MULTIPROCESS

    print(f"bare starts, {args.reps} repetitions per mode, interleaved; {ENGINE_KWARGS}")
    for name, (target, spec) in tiny_configs().items():
        seconds: dict[str, list[float]] = {IN_PROCESS: [], MULTIPROCESS: []}
        for rep in range(args.reps):
            order = (IN_PROCESS, MULTIPROCESS) if rep % 2 == 0 else (MULTIPROCESS, IN_PROCESS)
            for mode in order:
                done = bare_start(target, spec, dict(ENGINE_KWARGS), mode, args.timeout)
                seconds[mode].append(done.seconds)
                ran = done.info.get("engine_mode")
                print(f"  {name:15s} {mode:12s} [{ran}] {done.describe()}", flush=True)
        inproc, multi = (statistics.median(seconds[m]) for m in (IN_PROCESS, MULTIPROCESS))
        print(
            f"{name}: median in-process {inproc:.1f} s, multiprocess {multi:.1f} s "
            f"(saves {multi - inproc:.1f} s)"
        )


class ModeSource:
    """Engines of one engine mode, all resident (an ``EngineSource`` for ``Bench``)."""

    def __init__(self, mode: str, max_engines: int = 2) -> None:
        from pytest_specdecode.engines.hardware import detect_device
        from pytest_specdecode.engines.protocol import QUIET_S

        self.mode = mode
        self.max_engines = max_engines
        self.quiet_seconds = QUIET_S
        self.starts = self.restarts = 0
        self.start_seconds = self.stop_seconds = 0.0
        self.sequential_reasons: list[str] = []
        self.device = detect_device()
        self.log_dir = tempfile.mkdtemp(prefix="specdecode-startup-")
        self.engines: dict[str, Any] = {}

    def acquire(
        self, config: Any, *, keep: Sequence[Any] = (), timeout: float | None = None
    ) -> Any:
        from pytest_specdecode.engines.local import Engine
        from pytest_specdecode.engines.placement import place

        engine = self.engines.get(config.key)
        if engine is None:
            placement = place(config, self.device, self.max_engines, mode=self.mode)
            engine = Engine(config, placement, timeout=900.0, log_dir=self.log_dir)
            print(
                f"  started {config.describe()} [{engine.info.get('engine_mode')}] in "
                f"{engine.start_seconds:.1f} s",
                flush=True,
            )
            self.engines[config.key] = engine
            self.starts += 1
            self.start_seconds += engine.start_seconds
        engine.timeout = timeout or 900.0
        return engine

    def is_running(self, config: Any) -> bool:
        engine = self.engines.get(config.key)
        return engine is not None and bool(engine.alive)

    def plan(self, upcoming: Any) -> None:
        pass  # every engine stays resident

    def memory_gib(self, engine: Any) -> float | None:
        from pytest_specdecode.engines.memory import engine_memory_gib

        return engine_memory_gib(engine.pid, self.device.kind) if engine.pid else None

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()
        self.engines.clear()


def paired_blocks(
    sources: dict[str, Any],
    engines: tuple[str, Any, Any],
    args: argparse.Namespace,
    *,
    name: str,
    label: str,
) -> dict[str, list[Any]]:
    """Both sources' engines started first, then ``args.blocks`` blocks of one ``Bench.run``
    per source (order alternating), each printed; then the per-block ratios first source /
    second of speedup and tokens/s (geometric mean, 95% t-interval). The results per source."""
    from pytest_specdecode import Bench
    from pytest_specdecode.measure.stats import ratio_interval

    target, spec, workload = engines
    keys = tuple(sources)
    rows: dict[str, list[Any]] = {k: [] for k in keys}
    try:
        benches = {
            k: Bench(
                target,
                spec,
                dict(ENGINE_KWARGS),
                source=sources[k],
                cost_ratio="off",
                progress=None,
                name=f"{name}-{k}",
            )
            for k in keys
        }
        for k in keys:  # start all four engines before any timed round
            benches[k].engine("baseline")
            benches[k].engine("speculative")
        for block in range(args.blocks):
            for k in keys if block % 2 == 0 else keys[::-1]:
                r = benches[k].run(workload, max_tokens=args.max_tokens, trials=args.trials)
                rows[k].append(r)
                print(
                    f"  block {block + 1} {k:12s} speedup {r.speedup:.3f} "
                    f"[{r.speedup_ci[0]:.3f}-{r.speedup_ci[1]:.3f}], tokens/s baseline "
                    f"{r.baseline.tokens_per_second:.1f} speculative "
                    f"{r.speculative.tokens_per_second:.1f}, acceptance {r.acceptance_rate:.4f}"
                    f" (length {r.mean_acceptance_length:.3f}), match {r.match_rate:.3f}",
                    flush=True,
                )
    finally:
        for source in sources.values():
            source.close()
    figures = {
        "speedup": lambda r: r.speedup,
        "baseline tokens/s": lambda r: r.baseline.tokens_per_second,
        "speculative tokens/s": lambda r: r.speculative.tokens_per_second,
    }
    print(f"ratio {label} per block (geometric mean, 95% t-interval):")
    for figure, get in figures.items():
        ratios = [get(a) / get(b) for a, b in zip(rows[keys[0]], rows[keys[1]], strict=True)]
        geo, (low, high) = ratio_interval(ratios)
        print(
            f"  {figure:21s} {geo:.4f} ({(geo - 1) * 100:+.2f}%), 95% CI {low:.4f}-{high:.4f}; "
            f"per block {', '.join(f'{x:.3f}' for x in ratios)}"
        )
    return rows


def mode_figures(args: argparse.Namespace) -> None:
    from pytest_specdecode.engines.placement import IN_PROCESS, MULTIPROCESS
    from pytest_specdecode.tiny.corpus import prompts

    target, spec = tiny_configs()["target + draft"]
    if args.method == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    workload = prompts("structured", args.prompts)
    modes = (IN_PROCESS, MULTIPROCESS)
    sources = {m: ModeSource(m) for m in modes}
    print(
        f"paired figures: {args.method} k=4, {args.prompts} structured prompts x "
        f"{args.max_tokens} tokens, {args.blocks} blocks of one Bench.run per mode "
        f"({args.trials} rounds + 1 warm-up each), mode order alternating"
    )
    rows = paired_blocks(
        sources, (target, spec, workload), args, name="startup", label="in-process / multiprocess"
    )
    for m in modes:
        acc = [r.acceptance_rate for r in rows[m]]
        length = [r.mean_acceptance_length for r in rows[m]]
        print(
            f"  acceptance {m:12s} mean {statistics.mean(acc):.4f} (per block "
            f"{min(acc):.4f}-{max(acc):.4f}), acceptance length {statistics.mean(length):.3f}"
        )


#: Starts through the pool in one process, one after another, printing each start's seconds.
SEQUENCE = f"""
import json, sys, time
args = json.loads(sys.argv[1])
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.pool import EnginePool
for i, (target, spec) in enumerate(args["configs"]):
    pool = EnginePool(2, **({{"mode": args["mode"]}} if args["mode"] else {{}}))
    began = time.perf_counter()
    engine = pool.acquire(EngineConfig.create(target, spec, args["engine_kwargs"]))
    seconds = time.perf_counter() - began
    print("{MARK} start " + json.dumps({{"seconds": seconds, "mode": engine.info.get("engine_mode")}}), flush=True)
    pool.close()
print("{MARK} ready {{}}", flush=True)
"""  # noqa: E501

METHODS = ("spawn", "forkserver")


def launch_starts(args: argparse.Namespace) -> None:
    from pytest_specdecode.engines.launch import START_METHOD_ENV

    configs = list(tiny_configs().values())
    sequence = [configs[i % 2] for i in range(args.starts)]
    payload = {"configs": sequence, "engine_kwargs": dict(ENGINE_KWARGS), "mode": args.mode}
    print(
        f"starts: {args.starts} engines one after another in one process per method "
        f"(target, target + draft, ...), engine mode {args.mode or 'the pool default'}, "
        f"{args.reps} repetitions, method order alternating"
    )
    seconds: dict[str, list[list[float]]] = {m: [] for m in METHODS}
    for rep in range(args.reps):
        for method in METHODS if rep % 2 == 0 else METHODS[::-1]:
            run = launch(SEQUENCE, payload, {START_METHOD_ENV: method}, args.timeout)
            starts = [
                json.loads(line.split(" start ", 1)[1])
                for _, line in run.lines
                if line.startswith(f"{MARK} start ")
            ]
            values = [float(x["seconds"]) for x in starts]
            seconds[method].append(values)
            print(
                f"  rep {rep + 1} {method:10s} [{starts[0]['mode']}] starts "
                f"{', '.join(f'{v:.1f}' for v in values)} s",
                flush=True,
            )
    for method in METHODS:
        first = statistics.median(v[0] for v in seconds[method])
        later = statistics.median(x for v in seconds[method] for x in v[1:])
        print(f"  {method:10s} first start median {first:.1f} s, later starts median {later:.1f} s")


class LaunchSource(ModeSource):
    """Engines launched with one start method (the variable set while each starts)."""

    def __init__(self, method: str, mode: str) -> None:
        super().__init__(mode)
        self.method = method

    def acquire(
        self, config: Any, *, keep: Sequence[Any] = (), timeout: float | None = None
    ) -> Any:
        from pytest_specdecode.engines.launch import START_METHOD_ENV

        saved = os.environ.get(START_METHOD_ENV)
        os.environ[START_METHOD_ENV] = self.method
        try:
            return super().acquire(config, keep=keep, timeout=timeout)
        finally:
            if saved is None:
                del os.environ[START_METHOD_ENV]
            else:
                os.environ[START_METHOD_ENV] = saved


def launch_figures(args: argparse.Namespace) -> None:
    import math

    from pytest_specdecode.engines.placement import DEFAULT_MODE
    from pytest_specdecode.tiny.corpus import prompts

    target, spec = tiny_configs()["target + draft"]
    workload = prompts("structured", args.prompts)
    mode = args.mode or DEFAULT_MODE
    sources = {m: LaunchSource(m, mode) for m in ("forkserver", "spawn")}
    print(
        f"paired figures: draft_model k=4, {args.prompts} structured prompts x "
        f"{args.max_tokens} tokens, engine mode {mode}, {args.blocks} blocks of one Bench.run "
        f"per method ({args.trials} rounds + 1 warm-up each), method order alternating"
    )
    rows = paired_blocks(
        sources, (target, spec, workload), args, name="launch", label="fork server / spawn"
    )
    for m in METHODS:
        widths = [math.log(r.speedup_ci[1] / r.speedup_ci[0]) for r in rows[m]]
        print(
            f"  {m:10s} speedup interval width (log high/low) median "
            f"{statistics.median(widths):.4f}, per block {', '.join(f'{w:.3f}' for w in widths)}"
        )


def compile_cache(args: argparse.Namespace) -> None:
    target, _ = tiny_configs()["target"]
    kwargs = {k: v for k, v in ENGINE_KWARGS.items() if k != "enforce_eager"}
    env = {"VLLM_CACHE_ROOT": args.cache_root} if args.cache_root else {}
    env.update(item.split("=", 1) for item in args.env)  # type: ignore[misc]
    os.environ.update(env)
    needles = (
        "Compiling model again",
        "Directly load AOT",
        "saved AOT compiled",
        "unable to save AOT",
        "torch.compile and initial profiling",
        "torch.compile took",
        "Dynamo bytecode transform time",
        "Compiling a graph",
        "Using cache directory",
        "compile cache",
    )
    print(f"{args.starts} bare starts of the target without enforce_eager ({kwargs}); {env}")
    for i in range(args.starts):
        done = bare_start(target, None, kwargs, args.mode, args.timeout)
        print(f"  start {i + 1}: {done.describe()} [{done.info.get('engine_mode')}]")
        for at, line in done.lines:
            if any(n in line for n in needles):
                print(f"    {at:6.1f} s  {line[:400]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=("overhead", "modes", "compile", "launch"))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--speculative", action="store_true", help="overhead: target + draft")
    parser.add_argument("--skip-starts", action="store_true", help="modes: figures only")
    parser.add_argument("--skip-figures", action="store_true", help="modes: starts only")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--method", choices=("draft_model", "ngram"), default="draft_model")
    parser.add_argument("--starts", type=int, default=None, help="compile (2), launch (4)")
    parser.add_argument("--cache-root", default=None)
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="compile: set for vLLM"
    )
    parser.add_argument(
        "--mode", default=None, help="overhead, compile: engine mode (default: the pool's)"
    )
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    if args.starts is None:
        args.starts = 4 if args.part == "launch" else 2
    from pytest_specdecode.engines.hardware import cpu_model

    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; load {os.getloadavg()}")
    if args.part == "overhead":
        overhead(args)
    elif args.part == "modes":
        if not args.skip_starts:
            mode_starts(args)
        if not args.skip_figures:
            mode_figures(args)
    elif args.part == "launch":
        if not args.skip_starts:
            launch_starts(args)
        if not args.skip_figures:
            launch_figures(args)
    else:
        compile_cache(args)


if __name__ == "__main__":
    main()
