"""Open-loop rounds on two engines: a warm-up, then each arrival rate's schedules (one per
round, the same for both engines within a round) sent to the baseline and to the speculative
engine ``rounds`` times, in counterbalanced order (A B, B A,
... within a rate, each rate starting with the other engine than the rate before) when both
are resident; with a pool of one, every round on the baseline, then
every round on the speculative engine. Each round starts at least the source's
``quiet_seconds`` after the round before it ended (on either engine): sent at once, a round's
first requests met what follows the last round and stalled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..engines.config import EngineConfig
from ..engines.protocol import Counters, EngineBackend, EngineSource, LoadRound
from .inputs import cycled
from .load import rate_text
from .paired import counting
from .warmup import warm_up

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RateRounds:
    """What one rate measured, before any figure is derived."""

    rate: float
    baseline: tuple[LoadRound, ...]  # round j of each side sent the same schedule
    speculative: tuple[LoadRound, ...]
    counters: Counters  # the speculative engine's, over its rounds at this rate
    first: str  # which engine ran this rate's first round: "baseline" or "speculative"
    #: each side's counter deltas (its prefix cache's), per round in the order run
    baseline_round_counters: tuple[Counters, ...] = ()
    speculative_round_counters: tuple[Counters, ...] = ()


@dataclass(frozen=True)
class LoadRounds:
    """Every rate's rounds, and the speculative engine's facts."""

    rates: tuple[RateRounds, ...]
    engine_info: dict[str, Any]

    @property
    def other_requests(self) -> int:
        return sum(q.other_requests for r in self.rates for q in (*r.baseline, *r.speculative))


def run_load(
    source: EngineSource,
    baseline: EngineConfig,
    speculative: EngineConfig,
    prompts: Sequence[Any],
    sampling: Mapping[str, Any],
    schedules: Mapping[float, Sequence[Sequence[float]]],
    *,
    rounds: int = 3,
    timeout: float | None = None,
    progress: Progress = lambda _: None,
) -> LoadRounds:
    """Warm each engine up with one closed round of ``prompts`` (:mod:`.warmup`), then send
    each rate's schedules (``rate -> one list of arrival times per round``, the request i
    carrying ``prompts[i % len]``) to both: round j of each engine sends schedule j."""
    __tracebackhide__ = True
    together = source.max_engines >= 2
    rates = sorted(schedules)
    done: dict[tuple[str, float], list[LoadRound]] = {}
    per_round: dict[tuple[str, float], list[Counters]] = {}
    firsts: dict[float, str] = {}
    ended = time.perf_counter()  # when the last round (warm-ups included) ended

    def warm(engine: EngineBackend) -> None:
        __tracebackhide__ = True
        nonlocal ended
        warm_up(engine, list(prompts), sampling)
        ended = time.perf_counter()

    def measure(which: str, engine: EngineBackend, rate: float, j: int) -> None:
        __tracebackhide__ = True
        nonlocal ended
        firsts.setdefault(rate, which)
        arrivals = list(schedules[rate][j])
        batch = cycled(prompts, len(arrivals))
        before = engine.counters()
        time.sleep(max(0.0, source.quiet_seconds - (time.perf_counter() - ended)))
        done.setdefault((which, rate), []).append(engine.load_round(batch, sampling, arrivals))
        delta = engine.counters().since(before, counting(engine, which))
        per_round.setdefault((which, rate), []).append(delta)
        ended = time.perf_counter()

    if together:
        base = source.acquire(baseline, keep=[speculative], timeout=timeout)
        spec = source.acquire(speculative, keep=[baseline], timeout=timeout)
        warm(base)
        warm(spec)
        for i, rate in enumerate(rates):
            for j in range(rounds):
                order = [("baseline", base), ("speculative", spec)]
                for which, engine in order if (i + j) % 2 == 0 else order[::-1]:
                    measure(which, engine, rate, j)
            _say(progress, i, rates, done)
        info = dict(spec.info)
    else:
        base = source.acquire(baseline, timeout=timeout)
        warm(base)
        for rate in rates:
            for j in range(rounds):
                measure("baseline", base, rate, j)
        spec = source.acquire(speculative, timeout=timeout)
        warm(spec)
        for i, rate in enumerate(rates):
            for j in range(rounds):
                measure("speculative", spec, rate, j)
            _say(progress, i, rates, done)
        info = dict(spec.info)
    return LoadRounds(
        tuple(
            RateRounds(
                rate, tuple(done["baseline", rate]), tuple(done["speculative", rate]),
                sum(per_round["speculative", rate], Counters()), firsts[rate],
                tuple(per_round["baseline", rate]), tuple(per_round["speculative", rate]),
            )
            for rate in rates
        ),
        info,
    )  # fmt: skip


def _say(
    progress: Progress,
    i: int,
    rates: list[float],
    done: Mapping[tuple[str, float], list[LoadRound]],
) -> None:
    rate = rates[i]
    base, spec = done["baseline", rate], done["speculative", rate]

    def seconds(rounds: list[LoadRound]) -> str:
        return "/".join(f"{r.elapsed:.2f}" for r in rounds)

    progress(
        f"load {i + 1}/{len(rates)}: {rate_text(rate)}, {len(base[0].requests)} requests x "
        f"{len(base)} rounds: baseline {seconds(base)} s, speculative {seconds(spec)} s"
    )
