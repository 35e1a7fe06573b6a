"""Start order and role: an A/A pair of engines timed by the plugin's paired rounds; prints
figures (no pass/fail).

    python benchmarks/start_order.py [--sessions 8] [--rounds 20] [--prompts 4]
                                     [--max-tokens 64] [--max-seconds 660]

Each session starts two engines of the same configuration (the built-in tiny target,
``pytest_specdecode.tiny.ENGINE_KWARGS``, no speculation) through the plugin's own pool
(``EnginePool(2).acquire(first, keep=[second])``: both started together where the machine
allows, ``first`` spawned first), one in the baseline role and one in the speculative role,
and times ``--rounds`` counterbalanced paired rounds of ``--prompts`` structured prompts x
``--max-tokens`` tokens with the plugin's own code (``measure.paired.run_paired``, one
warm-up round each, greedy, as ``Bench.run``). The pool keeps one engine per configuration,
so the two differ in one harmless argument: ``seed`` 0 (baseline role) and 1 (speculative
role), which greedy decoding never reads. The role that starts first alternates from session
to session (baseline first in odd sessions).

Anything that makes one engine faster than the other is then a bias of where or when it was
started. Per session: the geometric mean over rounds of baseline-role / speculative-role time
(the speedup the plugin would report for this pair; 1 when unbiased), of first-started /
second-started time, and of a round's first engine / its second, with each engine's start time
and CPU binding (``Cpus_allowed_list`` of its processes' threads). Over sessions, the log
ratio of each session is fitted as ``role + order x (+1 baseline first, -1 speculative
first)`` (least squares), which separates the two biases: started first vs second
(``order``) and baseline role vs speculative role (``role``, which includes the seed), each
with a 95% t-interval; and the within-round position bias (mean of the sessions' estimates).
``--max-seconds`` stops before a pair of sessions that would not fit (keeping the two orders
balanced).

Run it on a quiet machine: every round is wall time.
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdecode.measure.stats import t975  # noqa: E402 (pure Python)

ROLES = ("baseline", "speculative")


@dataclass(frozen=True)
class Session:
    """One A/A session: which role's engine started first, and baseline / speculative time
    of each paired round, in the order run (baseline ran first in a round of even index)."""

    first_role: str
    ratios: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.first_role not in ROLES:
            raise ValueError(f"first_role must be one of {ROLES}, got {self.first_role!r}")
        if len(self.ratios) < 2 or any(r <= 0 or not math.isfinite(r) for r in self.ratios):
            raise ValueError(f"at least two positive finite ratios needed, got {self.ratios}")

    @property
    def sign(self) -> int:
        """+1 when the baseline-role engine started first, -1 when the speculative one did."""
        return 1 if self.first_role == "baseline" else -1

    @property
    def role_log(self) -> float:
        """Mean log(baseline-role time / speculative-role time) over the rounds."""
        return statistics.fmean(math.log(r) for r in self.ratios)

    @property
    def order_log(self) -> float:
        """Mean log(first-started time / second-started time) over the rounds."""
        return self.sign * self.role_log

    @property
    def position_log(self) -> float:
        """Mean log(time when a round's first / time when its second), from the rounds where
        the baseline ran first (even index) and those where it ran second."""
        logs = [math.log(r) for r in self.ratios]
        first, second = logs[0::2], logs[1::2]
        return (statistics.fmean(first) - statistics.fmean(second)) / 2


@dataclass(frozen=True)
class Bias:
    """A multiplicative bias (a time ratio; 1 is none) with its 95% interval."""

    ratio: float
    low: float
    high: float

    def describe(self) -> str:
        def pct(x: float) -> str:
            return f"{(x - 1) * 100:+.2f}%"

        return f"{self.ratio:.4f} ({pct(self.ratio)}; 95% CI {pct(self.low)} to {pct(self.high)})"

    @property
    def excludes_none(self) -> bool:
        return not (self.low <= 1.0 <= self.high)


@dataclass(frozen=True)
class BiasSummary:
    order: Bias  # first-started / second-started time
    role: Bias  # baseline-role / speculative-role time
    position: Bias  # a round's first engine / its second
    residual_sd: float  # between sessions, of a session's mean log ratio, after the fit
    sessions: int


def _bias(log: float, half: float) -> Bias:
    return Bias(math.exp(log), math.exp(log - half), math.exp(log + half))


def bias_summary(sessions: Sequence[Session]) -> BiasSummary:
    """Least-squares fit of each session's mean log(baseline / speculative time) as ``role +
    order x sign`` (sign +1 baseline started first, -1 speculative first), with 95%
    t-intervals (n - 2 degrees of freedom); the within-round position bias is the mean of the
    sessions' estimates with its t-interval (n - 1). Both start orders must occur, and at
    least three sessions."""
    n = len(sessions)
    signs = [s.sign for s in sessions]
    if n < 3 or len(set(signs)) < 2:
        raise ValueError(
            f"need at least 3 sessions with both start orders; got {n} with first roles "
            f"{sorted({s.first_role for s in sessions})}"
        )
    ys = [s.role_log for s in sessions]
    x_bar, y_bar = statistics.fmean(signs), statistics.fmean(ys)
    sxx = sum((x - x_bar) ** 2 for x in signs)
    order = sum((x - x_bar) * (y - y_bar) for x, y in zip(signs, ys, strict=True)) / sxx
    role = y_bar - order * x_bar
    sse = sum((y - role - order * x) ** 2 for x, y in zip(signs, ys, strict=True))
    sd = math.sqrt(sse / (n - 2))
    t = t975(n - 2)
    positions = [s.position_log for s in sessions]
    pos_half = t975(n - 1) * statistics.stdev(positions) / math.sqrt(n)
    return BiasSummary(
        order=_bias(order, t * sd / math.sqrt(sxx)),
        role=_bias(role, t * sd * math.sqrt(1 / n + x_bar**2 / sxx)),
        position=_bias(statistics.fmean(positions), pos_half),
        residual_sd=sd,
        sessions=n,
    )


def _cpus(pid: int) -> str:
    """The CPUs the threads of ``pid`` may run on (distinct ``Cpus_allowed_list`` values)."""
    found: set[str] = set()
    for status in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            with open(status, encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith("Cpus_allowed_list:"):
                        found.add(line.split(":", 1)[1].strip())
        except OSError:
            continue
    return "|".join(sorted(found)) or "?"


def binding(engine: Any) -> str:
    """Each process of an engine's group with the CPUs its threads may use."""
    from pytest_specdecode.engines.memory import group_pids, process_titles

    parts = []
    for pid, title in sorted(process_titles(group_pids(engine.pid)).items()):
        name = title.split()[0] if title.startswith("VLLM::") else "worker"
        parts.append(f"{name} {_cpus(pid)}")
    return ", ".join(parts)


def run_session(
    index: int, target: str, prompts: list[str], rounds: int, max_tokens: int
) -> tuple[Session, str]:
    from pytest_specdecode.engines.config import EngineConfig
    from pytest_specdecode.engines.pool import EnginePool
    from pytest_specdecode.measure.paired import run_paired
    from pytest_specdecode.tiny import ENGINE_KWARGS

    configs = {
        role: EngineConfig.create(target, None, {**ENGINE_KWARGS, "seed": seed}, role=role)
        for seed, role in enumerate(ROLES)
    }
    first_role = ROLES[index % 2]
    second_role = ROLES[1 - index % 2]
    sampling = {"temperature": 0.0, "max_tokens": max_tokens, "ignore_eos": True, "seed": 0}
    pool = EnginePool(2)
    try:
        pool.acquire(configs[first_role], keep=[configs[second_role]])
        engines = {role: pool.acquire(configs[role]) for role in ROLES}
        together = "; ".join(pool.sequential_reasons) or "started together"
        raw = run_paired(
            pool, configs["baseline"], configs["speculative"], prompts, sampling, trials=rounds
        )
        starts = ", ".join(
            f"{r} {engines[r].start_seconds:.1f} s" for r in (first_role, second_role)
        )
        cpus = "; ".join(f"{r}: {binding(engines[r])}" for r in ROLES)
    finally:
        pool.close()
    session = Session(first_role, tuple(raw.ratios))
    base = statistics.median(r.elapsed for r in raw.baseline)
    spec = statistics.median(r.elapsed for r in raw.speculative)
    line = (
        f"session {index + 1}: {first_role} first ({together}; ready: {starts}); median round "
        f"baseline {base:.3f} s, speculative {spec:.3f} s; baseline/speculative "
        f"{math.exp(session.role_log):.4f}, first/second {math.exp(session.order_log):.4f}, "
        f"round's first/second {math.exp(session.position_log):.4f}; CPUs {cpus}"
    )
    return session, line


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-seconds", type=float, default=float("inf"))
    args = parser.parse_args(argv)

    from pytest_specdecode.engines.hardware import cpu_model
    from pytest_specdecode.tiny import tiny_models
    from pytest_specdecode.tiny.corpus import prompts

    print(f"machine: {cpu_model()}, {os.cpu_count()} cores", flush=True)
    target = str(tiny_models().target)
    chosen = prompts("structured", args.prompts, seed=1)
    print(
        f"A/A: tiny target, no speculation, {args.rounds} paired rounds of {args.prompts} "
        f"prompts x {args.max_tokens} tokens per session, up to {args.sessions} sessions",
        flush=True,
    )
    began = time.perf_counter()
    sessions: list[Session] = []
    took: list[float] = []
    for i in range(args.sessions):
        elapsed = time.perf_counter() - began
        if i % 2 == 0 and took and elapsed + 2 * statistics.fmean(took) > args.max_seconds:
            print(f"stopping after {i} sessions: --max-seconds {args.max_seconds:g}", flush=True)
            break
        start = time.perf_counter()
        session, line = run_session(i, target, chosen, args.rounds, args.max_tokens)
        took.append(time.perf_counter() - start)
        sessions.append(session)
        print(f"{line} [{took[-1]:.0f} s]", flush=True)
    summary = bias_summary(sessions)
    print(
        f"over {summary.sessions} sessions (between-session residual sd of the mean log ratio "
        f"{summary.residual_sd:.4f}), time ratios (1 = no bias):\n"
        f"  started first / started second: {summary.order.describe()}\n"
        f"  baseline role / speculative role: {summary.role.describe()}  (the speedup an A/A "
        "pair reports)\n"
        f"  a round's first engine / its second: {summary.position.describe()}\n"
        f"wall time {time.perf_counter() - began:.0f} s",
        flush=True,
    )


if __name__ == "__main__":
    main()
