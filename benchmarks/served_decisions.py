"""Regression decisions as a new user sees them in served mode; prints figures (no pass/fail).

    .tox/py/bin/python benchmarks/served_decisions.py                 # default cells and reps
    .tox/py/bin/python benchmarks/served_decisions.py --reps 2 --drop 0.3 --sds 0.05

It does what a user with two OpenAI-compatible servers whose speeds they control would do,
many times over. Two stand-in servers run in this process (stdlib ``ThreadingHTTPServer`` on
loopback, answering what ``pytest_specdecode/engines/served.py`` asks: ``/v1/models``,
``/version``, ``/health``, ``/metrics`` and streamed ``/v1/completions``):

- a completion request takes ``--base-ms`` (baseline) or ``--base-ms / --speedup``
  (speculative) times ``exp(N(0, sd))`` as the client times it (it sleeps that less the
  stand-in's own overhead inside the client's clock, about 1 ms, measured by the calibration
  sessions below), streaming its tokens in two chunks; the speculative server's times are also
  multiplied by its slowdown (1 unchanged, ``1 / (1 - drop)`` for a drop of the speedup by
  ``drop``), so that speed, noise and drop act on what the plugin measures;
- only the speculative server's ``/metrics`` has ``vllm:spec_decode_*`` counters; they move
  with every request (``K``-token drafts, each next position accepted with probability
  ``ACCEPT``, drawn from a generator seeded by the prompt, so that every request of a prompt
  counts alike, as greedy decoding does); both count finished requests.

The user's suite is one conftest-free test file (``SUITE``: one ``@pytest.mark.specdecode``
test calling ``specdecode.run(PROMPTS, max_tokens=128)``) run by ``pytest.main`` in this process
with ``-p no:cacheprovider -q``, both ``--specdecode-*-url`` options and ``--specdecode-report``.
One repetition is what a user does in CI: a saving session (``--specdecode-save``, sized by
its noise: 20 rounds or more, at most ``--specdecode-baseline-max-trials``) into a fresh file
(``--saves`` of them into that file, 1 by default: then no between-session variance is stored;
from 3 the rule adds the spread of their means), then ``--compares`` compared sessions
(``--specdecode-compare``, which stop when the regression rule decides, at most the rounds the
baseline planned) on the unchanged servers and as many after the drop, in
alternating order, as pull requests compared with one baseline on main. A false alarm is an
unchanged compared session that fails on a regression (pytest exit code 1 and a "<figure>
regressed" message in its output); power is the share of dropped sessions that fail so. The
sessions of one repetition share its baseline, so standard errors are taken between
repetitions. The noise levels take turns repetition by repetition, so a change in this
machine's load falls on all of them alike; a run stops starting repetitions after
``--minutes``.

The controlled noise is not the only one: this machine's own timing noise (thread wake-ups,
the GIL shared by the client and both servers, other processes) adds to it, and as it is
absolute it weighs most on the shorter (speculative) requests and moves the speedup with the
load, session to session. On this 2-CPU machine under a load average of 6-9 (other sessions'
benchmarks and vLLM tests), the machine's own per-round log-ratio sd under the normal
scheduler was about 0.3 at 8 ms, 0.2 at 20 ms and 0.06-0.3 at 50 ms: more than the
controlled noise. So the benchmark puts its threads under ``SCHED_FIFO`` (priority 1; where
that is refused, or with ``--no-realtime``, it says so and keeps the normal scheduler): a
woken server or client thread then runs at once, and the machine's own sd fell to about 0.02
at 8 ms under the same load. It costs other processes about two thirds of one CPU at that
priority (mostly pytest's own work between rounds). Every ``--calibrate`` repetitions a saving
session without noise or drop measures the overheads and the machine's own noise, and one
saving session per noise level on the dropped servers measures the drop actually achieved
(fixed rounds: no stopping rule biases it). The noise actually achieved is printed from the
saving sessions' rounds: each server's log-time sd, the per-round log-ratio sd (and a robust
one, which outliers such as a stalled thread do not inflate), the between-session sd. Figures
are ± one Monte Carlo standard error (a share seen 0 times gives the 95% upper bound 3/n
instead).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# ruff: noqa: E402 (imports after the path fix)
from pytest_specdecode.measure.detectable import DEFAULT_SAVED, FIRST_LOOK
from pytest_specdecode.settings import BY_NAME
from pytest_specdecode.tolerances import DEFAULT_TOLERANCES, FIGURES

MODEL = "served-stand-in"
K = 4  # draft tokens per proposal
ACCEPT = 0.8  # position i accepted with probability ACCEPT given the ones before it
MAX_TOKENS = 128  # enough drafts per round that acceptance's own noise stays small
BASE_MS = 8.0  # a baseline request's time (see the module's docstring)
PROMPT = "Summarise the release notes in one sentence."
FIXED_SAVED = DEFAULT_SAVED  # rounds of the calibration and dropped saving sessions
BASELINE_MAX_TRIALS = int(BY_NAME["baseline_max_trials"].default)
COMPARE_MAX_TRIALS = int(BY_NAME["compare_max_trials"].default)

SUITE = """\
import pytest

PROMPTS = {prompts!r}


@pytest.mark.specdecode("served")
def test_speedup_holds(specdecode):
    specdecode.run(PROMPTS, max_tokens={max_tokens})
"""


# -- the two servers -------------------------------------------------------------------------
class StandIn:
    """One OpenAI-compatible server whose speed is set from here (``sd``, ``slowdown``)."""

    def __init__(self, seconds: float, speculating: bool, seed: int) -> None:
        self.seconds = seconds  # a request's time (as the client measures it) before noise
        self.speculating = speculating
        self.sd = 0.0  # of a request's log time
        self.slowdown = 1.0
        #: what a request takes beyond its sleep inside the client's clock (measured)
        self.overhead = 0.0
        self.requests = 0
        self.counts = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
        self.per_position = [0] * K
        self.lock = threading.Lock()
        self.rng = random.Random(seed)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()  # no Nagle (as uvicorn): small writes leave at once
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, body: bytes, ctype: str = "application/json", code: int = 200) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def do_GET(self) -> None:
                if self.path.startswith("/v1/models"):
                    self._send(json.dumps({"data": [{"id": MODEL, "root": MODEL}]}).encode())
                elif self.path == "/version":
                    self._send(b'{"version": "stand-in"}')
                elif self.path == "/health":
                    self._send(b"")
                elif self.path == "/metrics":
                    self._send(server.metrics().encode(), "text/plain; version=0.0.4")
                else:
                    self._send(b"{}", code=404)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/completions" or not body.get("stream"):
                    self._send(b'{"error": "only streamed completions"}', code=400)
                    return
                tokens = int(body["max_tokens"])
                total = server.request_seconds()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                first = max(1, tokens // 4)
                time.sleep(total / 4)
                self._event({"choices": [_choice(0, first)]})
                time.sleep(total * 3 / 4)
                server.finish(str(body["prompt"]), tokens)  # counted before the last chunk
                self._event({"choices": [_choice(first, tokens)]})
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _event(self, event: dict[str, Any]) -> None:
                self._chunk(f"data: {json.dumps(event)}\n\n".encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def request_seconds(self) -> float:
        """The sleep that makes the time the client measures ``seconds * slowdown *
        exp(N(0, sd))``: speed, noise and slowdown act on the measured time."""
        with self.lock:
            noise = self.rng.gauss(0.0, self.sd) if self.sd else 0.0
        return max(0.0, self.seconds * self.slowdown * math.exp(noise) - self.overhead)

    def finish(self, prompt: str, tokens: int) -> None:
        """Count one finished request and, speculating, its drafts up to ``tokens``: the same
        for every request of one prompt, as greedy decoding drafts and accepts alike."""
        drafts = random.Random(f"{prompt}\0{tokens}")
        with self.lock:
            self.requests += 1
            made = 0
            while self.speculating and made < tokens:
                accepted = 0
                while accepted < K and drafts.random() < ACCEPT:
                    self.per_position[accepted] += 1
                    accepted += 1
                self.counts["drafts"] += 1
                self.counts["draft_tokens"] += K
                self.counts["accepted"] += accepted
                made += accepted + 1

    def metrics(self) -> str:
        labels = f'engine="0",model_name="{MODEL}"'
        with self.lock:
            lines = [
                "# TYPE vllm:request_success_total counter",
                f'vllm:request_success_total{{{labels},finished_reason="length"}} {self.requests}',
            ]
            if self.speculating:
                for name in ("drafts", "draft_tokens", "accepted"):
                    family = f"vllm:spec_decode_num_{name}"
                    if name == "accepted":
                        family += "_tokens"
                    lines += [f"# TYPE {family}_total counter",
                              f"{family}_total{{{labels}}} {self.counts[name]}"]  # fmt: skip
                family = "vllm:spec_decode_num_accepted_tokens_per_pos"
                lines.append(f"# TYPE {family}_total counter")
                lines += [
                    f'{family}_total{{{labels},position="{i}"}} {n}'
                    for i, n in enumerate(self.per_position)
                ]
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _choice(start: int, end: int) -> dict[str, Any]:
    ids = list(range(start, end))
    return {"index": 0, "text": "".join(f" t{i}" for i in ids), "token_ids": ids}


# -- the user's sessions ---------------------------------------------------------------------
@dataclass(frozen=True)
class Session:
    """What one pytest session gave."""

    code: int  # pytest's exit code
    regressed: tuple[str, ...]  # the figures pytest's output calls regressed
    rounds: int  # the result's paired rounds ("trials" in the report)
    ratios: tuple[float, ...]  # baseline time / speculative time per paired round
    seconds: tuple[tuple[float, ...], tuple[float, ...]]  # per round: baseline, speculative
    output: str  # pytest's output, for a session that ended unexpectedly

    @property
    def alarm(self) -> bool:
        """The session failed on a regression (what a CI shows red)."""
        return self.code == 1 and bool(self.regressed)

    @property
    def odd(self) -> bool:
        """Ended otherwise than passing or failing on a regression."""
        return self.code != 0 and not self.alarm


class Suite:
    """The user's project: a folder with the test file, run against the two servers."""

    def __init__(self, folder: Path, base: StandIn, spec: StandIn, prompts: int) -> None:
        self.folder = folder
        self.base, self.spec = base, spec
        prompt_list = [PROMPT if i == 0 else f"{PROMPT} ({i + 1})" for i in range(prompts)]
        (folder / "test_served_suite.py").write_text(
            SUITE.format(prompts=prompt_list, max_tokens=MAX_TOKENS)
        )
        self.baseline = folder / "baseline.json"
        self.report = folder / "report.json"

    def session(self, *options: str) -> Session:
        self.report.unlink(missing_ok=True)
        args = [
            str(self.folder), "--rootdir", str(self.folder), "-p", "no:cacheprovider", "-q",
            "--specdecode-baseline-url", self.base.url,
            "--specdecode-speculative-url", self.spec.url,
            "--specdecode-report", str(self.report), *options,
        ]  # fmt: skip
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = int(pytest.main(args))
        report = json.loads(self.report.read_text()) if self.report.exists() else {}
        result = (report.get("results") or [{}])[0]
        # a regressed figure fails its test with "regression: <key>: <figure> regressed: ..."
        text = out.getvalue()
        return Session(
            code,
            tuple(f for f in FIGURES if f": {f} regressed:" in text),
            int(result.get("trials") or 0),
            tuple(float(r) for r in result.get("ratios") or ()),
            tuple(  # type: ignore[arg-type]
                tuple(float(x) for x in (result.get(side) or {}).get("seconds") or ())
                for side in ("baseline", "speculative")
            ),
            text,
        )

    def save(self, fresh: bool = True, path: Path | None = None, fixed: bool = False) -> Session:
        """A saving session: into a fresh file, or (``fresh=False``) adding its session to the
        file's, as a repeated ``--specdecode-save`` into one file does; sized by its noise
        (the default), or ``fixed`` at :data:`FIXED_SAVED` rounds."""
        path = path or self.baseline
        if fresh:
            path.unlink(missing_ok=True)
        fixed_rounds = ("--specdecode-baseline-trials", str(FIXED_SAVED)) if fixed else ()
        return self.session("--specdecode-save", str(path), *fixed_rounds)

    def compare(self) -> Session:
        return self.session("--specdecode-compare", str(self.baseline))


# -- figures ---------------------------------------------------------------------------------
def share(groups: list[list[bool]]) -> str:
    """Share of hits over groups of sessions that share a baseline, ± its standard error
    (between groups: sessions on one baseline are not independent)."""
    hits, n = sum(sum(g) for g in groups), sum(len(g) for g in groups)
    if n == 0:
        return "-"
    if hits == 0:
        return f"0/{n} (< {min(100, 300 / n):.2g}%)"
    p = hits / n
    k = len(groups)
    spread = sum((sum(g) - p * len(g)) ** 2 for g in groups)
    if k < 2:
        return f"{hits}/{n} = {100 * p:.1f}%"
    se = math.sqrt(spread * k / (k - 1)) / n
    return f"{hits}/{n} = {100 * p:.1f}% ± {100 * se:.1f}%"


def _sd(values: list[list[float]]) -> float:
    """Pooled within-group sd."""
    values = [v for v in values if len(v) > 1]
    return (
        math.sqrt(statistics.fmean(statistics.variance(v) for v in values)) if values else math.nan
    )


def _mad_sd(values: list[list[float]]) -> float:
    """A robust sd (1.4826 x the median absolute deviation from each group's median), pooled:
    near the sd for normal noise, below it where rare outliers (a stalled thread) inflate it."""
    deviations = [abs(x - statistics.median(v)) for v in values if len(v) > 2 for x in v]
    return 1.4826 * statistics.median(deviations) if deviations else math.nan


def between_sd(logs: list[list[float]]) -> float:
    """Sd of the groups' means beyond what their own spread explains (0 when below)."""
    logs = [x for x in logs if len(x) > 1]
    if len(logs) < 3:
        return math.nan
    spread = statistics.variance([statistics.fmean(x) for x in logs])
    within = statistics.fmean(statistics.variance(x) / len(x) for x in logs)
    return math.sqrt(max(0.0, spread - within))


@dataclass
class Cell:
    """Everything one noise level gave: saving sessions and, per saving session, its
    compared sessions on the unchanged and on the dropped servers."""

    sd: float
    saves: list[Session] = field(default_factory=list)
    same: list[list[Session]] = field(default_factory=list)
    dropped: list[list[Session]] = field(default_factory=list)
    drop_saves: list[Session] = field(default_factory=list)  # on the dropped servers
    seconds: float = 0.0

    def noise_row(self) -> list[str]:
        saves = [s for s in self.saves if s.code == 0]
        logs = [[math.log(r) for r in s.ratios] for s in saves]
        sides = [[[math.log(x) for x in s.seconds[i]] for s in saves] for i in (0, 1)]
        speedup = math.exp(statistics.fmean(x for v in logs for x in v)) if logs else math.nan
        compared = [s for g in self.same for s in g]
        both = [[math.log(r) for r in s.ratios] for s in compared]
        return [
            f"{self.sd:.2f}", str(len(saves)), f"{speedup:.3f}",
            _f(_sd(sides[0])), _f(_sd(sides[1])), _f(_sd(logs)), _f(_mad_sd(logs)),
            _f(between_sd(logs)), _f(_sd(both)) if compared else "-", self.achieved_drop(),
        ]  # fmt: skip

    def achieved_drop(self) -> str:
        """The drop of the measured speedup: saving sessions on the dropped servers against
        those on the unchanged ones (fixed rounds, so no stopping rule biases it)."""
        means = [
            [statistics.fmean(math.log(r) for r in s.ratios) for s in group if s.code == 0]
            for group in (self.saves, self.drop_saves)
        ]
        if min(len(m) for m in means) < 2:
            return "-"
        diff = statistics.fmean(means[0]) - statistics.fmean(means[1])
        se = math.sqrt(sum(statistics.variance(m) / len(m) for m in means))
        return f"{100 * (1 - math.exp(-diff)):.1f}% ± {100 * se:.1f}% ({len(means[1])} saves)"

    def decision_row(self) -> list[str]:
        def rounds(groups: list[list[Session]]) -> str:
            values = [s.rounds for g in groups for s in g]
            if not values:
                return "-"
            return f"{statistics.fmean(values):.1f} (max {max(values)})"

        alarms = [[s.alarm for s in g] for g in self.same]
        speedup = sum("speedup" in s.regressed for g in self.same for s in g)
        odd = sum(s.odd for s in self.saves) + sum(
            s.odd for g in self.same + self.dropped for s in g
        )
        return [
            f"{self.sd:.2f}", f"{share(alarms)} ({speedup} on speedup)",
            share([[s.alarm for s in g] for g in self.dropped]), rounds([self.saves]),
            rounds(self.same), rounds(self.dropped), str(odd), f"{self.seconds:.0f} s",
        ]  # fmt: skip


def _f(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"


def table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


class Runner:
    """Runs repetitions on the two servers and keeps what they gave, per noise level."""

    def __init__(self, suite: Suite, drop: float, compares: int, saves: int) -> None:
        self.suite = suite
        self.slowdown = 1 / (1 - drop)
        self.compares = compares
        self.saves = saves
        self.shown = 0  # odd sessions whose output was shown
        self.overheads: tuple[list[float], list[float]] = ([], [])  # per calibration session

    def _set(self, sd: float, slowdown: float) -> None:
        self.suite.base.sd = self.suite.spec.sd = sd
        self.suite.spec.slowdown = slowdown

    def _check(self, session: Session, what: str) -> Session:
        if session.odd and self.shown < 3:
            self.shown += 1
            print(f"  {what}: exit code {session.code}; its output ends:", file=sys.stderr)
            print("  " + session.output[-2000:].replace("\n", "\n  "), file=sys.stderr)
        return session

    def calibrate(self, cell: Cell) -> None:
        """A saving session with no noise nor drop: what a round measures beyond its sleep is
        each server's overhead (the median over these sessions, subtracted from the sleeps
        from then on)."""
        started = time.perf_counter()
        self._set(0.0, 1.0)
        save = self._check(self.suite.save(fixed=True), "calibration saving session")
        cell.saves.append(save)
        if save.code == 0:
            for server, times, found in zip(
                (self.suite.base, self.suite.spec), save.seconds, self.overheads, strict=True
            ):
                sleep = server.seconds - server.overhead
                found.append(max(0.0, statistics.median(times) - sleep))
                server.overhead = statistics.median(found)
        cell.seconds += time.perf_counter() - started

    def check_drop(self, cell: Cell) -> None:
        """A saving session on the dropped servers into a scratch file: how much the measured
        speedup actually drops (no stopping rule involved)."""
        started = time.perf_counter()
        self._set(cell.sd, self.slowdown)
        scratch = self.suite.folder / "dropped.json"
        dropped = self.suite.save(path=scratch, fixed=True)
        cell.drop_saves.append(self._check(dropped, "dropped saving"))
        self._set(cell.sd, 1.0)
        cell.seconds += time.perf_counter() - started

    def repetition(self, cell: Cell, rep: int) -> None:
        """``saves`` saving sessions into one fresh file, then ``compares`` compared sessions on
        the unchanged servers and as many on the dropped one, alternating (which comes first
        alternates too)."""
        started = time.perf_counter()
        self._set(cell.sd, 1.0)
        saved = True
        for i in range(self.saves):
            save = self._check(self.suite.save(i == 0), f"sd {cell.sd:g} saving session")
            cell.saves.append(save)
            saved = saved and save.code == 0
        if saved:
            same: list[Session] = []
            dropped: list[Session] = []
            for i in range(2 * self.compares):
                drop = (i + rep) % 2 == 1
                self._set(cell.sd, self.slowdown if drop else 1.0)
                session = self._check(self.suite.compare(), f"sd {cell.sd:g} compared session")
                (dropped if drop else same).append(session)
            cell.same.append(same)
            cell.dropped.append(dropped)
        self._set(cell.sd, 1.0)
        cell.seconds += time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=300, help="most repetitions per noise level")
    parser.add_argument(
        "--minutes", type=float, default=10.0, help="start no repetition after this long"
    )
    parser.add_argument("--sds", default="0.05,0.07", help="per-request log sds (comma list)")
    parser.add_argument("--drop", type=float, default=0.10, help="drop of the speedup")
    parser.add_argument("--speedup", type=float, default=2.0)
    parser.add_argument("--base-ms", type=float, default=BASE_MS, help="baseline request time")
    parser.add_argument("--prompts", type=int, default=1, help="prompts per run(), concurrent")
    parser.add_argument(
        "--compares", type=int, default=2,
        help="compared sessions per saving session on the unchanged servers (as many dropped)",
    )  # fmt: skip
    parser.add_argument(
        "--saves", type=int, default=1,
        help="saving sessions per baseline file (3 or more: the rule adds their spread)",
    )  # fmt: skip
    parser.add_argument(
        "--calibrate", type=int, default=10,
        help="every this many repetitions, one saving session without noise (overheads, the "
        "machine's own noise) and one per level on the dropped servers (0: none)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--no-realtime", action="store_true",
        help="keep the normal scheduler (then other processes' load adds its jitter)",
    )  # fmt: skip
    args = parser.parse_args()
    sds = [float(s) for s in args.sds.split(",") if s.strip()]
    started = time.perf_counter()
    scheduler = "normal (--no-realtime)" if args.no_realtime else _realtime()
    print("command: " + " ".join([Path(sys.executable).name, *sys.argv]))
    print(f"started {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {_load()}, "
          f"{os.cpu_count()} CPUs; pytest {pytest.__version__}; scheduler {scheduler}")  # fmt: skip
    print(
        f"servers: a baseline request {args.base_ms:g} ms, a speculative one {args.base_ms:g}/"
        f"{args.speedup:g} ms (as the client times them: each sleeps that less the measured "
        f"overhead), times exp(N(0, sd)); {args.prompts} prompt(s) per round, max_tokens "
        f"{MAX_TOKENS}; drop: the speculative times x {1 / (1 - args.drop):.4f} "
        f"({100 * args.drop:g}% off the speedup)"
    )
    print(
        f"defaults: a saving session is sized by its noise ({FIRST_LOOK} to "
        f"{BASELINE_MAX_TRIALS} rounds), a compared one takes at most the rounds its baseline "
        f"planned (at most {COMPARE_MAX_TRIALS}; it stops when the rule decides); tolerances "
        f"{DEFAULT_TOLERANCES}. "
        f"A repetition: {args.saves} saving session(s), then {args.compares} compared "
        f"session(s) on the unchanged and {args.compares} on the dropped servers; noise levels "
        "interleaved"
    )
    base = StandIn(args.base_ms / 1000, False, args.seed)
    spec = StandIn(args.base_ms / 1000 / args.speedup, True, args.seed + 1)
    calibration = Cell(0.0)
    cells = [Cell(sd) for sd in sds]
    deadline = started + 60 * args.minutes
    reps = 0
    loads = [os.getloadavg()[0]]  # 1-minute load average, after each repetition
    try:
        with tempfile.TemporaryDirectory(prefix="served-decisions-") as tmp:
            suite = Suite(Path(tmp), base, spec, args.prompts)
            runner = Runner(suite, args.drop, args.compares, args.saves)
            if args.calibrate:  # a first estimate of the overheads, kept out of the figures
                runner.calibrate(Cell(0.0))
            while reps < args.reps and time.perf_counter() < deadline:
                if args.calibrate and reps % args.calibrate == 0:
                    runner.calibrate(calibration)
                    for cell in cells:
                        runner.check_drop(cell)
                for cell in cells:
                    runner.repetition(cell, reps)
                reps += 1
                loads.append(os.getloadavg()[0])
                elapsed = time.perf_counter() - started
                print(f"  {reps} repetition(s), {elapsed:.0f} s, load {_load()}", file=sys.stderr)
    finally:
        base.close()
        spec.close()
    found = [f"{1000 * server.overhead:.2f} ms" for server in (base, spec)]
    print(
        f"\n{reps} repetition(s) per noise level; {len(calibration.saves)} saving session(s) "
        f"without noise (request sd 0.00: this machine's own noise) gave the overheads, "
        f"baseline {found[0]}, speculative {found[1]} (0 without them)"
    )
    print(
        "\nachieved noise, from the saving sessions' rounds: log-time sd of each server's "
        "rounds, the per-round log-ratio sd (pooled within sessions), the sd of the sessions' "
        "mean log ratios beyond what their rounds explain, the per-round log-ratio sd of "
        "the unchanged compared sessions (stopped early: biased low), and the drop of the "
        "speedup that saving sessions on the dropped servers measured"
    )
    table(
        ["request sd", "saves", "speedup", "baseline log sd", "speculative log sd",
         "log-ratio sd", "robust sd (MAD)", "between-session sd", "compared log-ratio sd",
         "achieved drop"],
        [cell.noise_row() for cell in [calibration, *cells] if cell.saves],
    )  # fmt: skip
    print(
        "\ndecisions: a false alarm is an unchanged compared session failing on a regression "
        "(pytest exit 1; any figure, those on the speedup in brackets); power is the share of "
        "dropped sessions failing so; rounds are the compared sessions' (report field "
        '"trials"); other: sessions that ended otherwise (errors); wall: the level\'s time'
    )
    table(
        ["request sd", "false alarms", f"power ({100 * args.drop:g}% drop)", "rounds saved",
         "rounds unchanged", "rounds dropped", "other", "wall"],
        [cell.decision_row() for cell in cells],
    )  # fmt: skip
    print(
        f"\n1-minute load average over the run: min {min(loads):.2f}, median "
        f"{statistics.median(loads):.2f}, max {max(loads):.2f} (on {os.cpu_count()} CPUs)"
    )
    print(f"ended {time.strftime('%H:%M:%S')}, load average {_load()}; "
          f"wall time {time.perf_counter() - started:.0f} s")  # fmt: skip


def _realtime() -> str:
    """Put this process's threads (all started after this) under ``SCHED_FIFO``."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (AttributeError, OSError) as exc:
        return f"normal (SCHED_FIFO refused: {exc}; other processes' load adds its jitter)"
    return "SCHED_FIFO priority 1"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
