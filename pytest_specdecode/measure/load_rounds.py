"""Open-loop rounds on two engines: a warm-up, then each arrival rate's schedule sent to the
baseline and to the speculative engine in counterbalanced order (baseline first at the first,
third, ... rate; speculative first at the others) when both are resident; with a pool of one,
every rate on the baseline, then every rate on the speculative engine."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..engines.config import EngineConfig
from ..engines.protocol import Counters, EngineBackend, EngineSource, LoadRound
from .load import rate_text

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RateRounds:
    """What one rate measured, before any figure is derived."""

    rate: float
    baseline: LoadRound
    speculative: LoadRound
    counters: Counters  # the speculative engine's, over its round at this rate
    first: str  # "baseline" or "speculative"


@dataclass(frozen=True)
class LoadRounds:
    """Every rate's rounds, and the speculative engine's facts."""

    rates: tuple[RateRounds, ...]
    engine_info: dict[str, Any]

    @property
    def other_requests(self) -> int:
        return sum(r.baseline.other_requests + r.speculative.other_requests for r in self.rates)


def run_load(
    source: EngineSource,
    baseline: EngineConfig,
    speculative: EngineConfig,
    prompts: Sequence[Any],
    sampling: Mapping[str, Any],
    schedules: Mapping[float, Sequence[float]],
    *,
    timeout: float | None = None,
    progress: Progress = lambda _: None,
) -> LoadRounds:
    """Warm each engine up with one closed round of ``prompts``, then send each rate's
    schedule (``rate -> arrival times``, the request i carrying ``prompts[i % len]``) to both."""
    __tracebackhide__ = True
    together = source.max_engines >= 2
    keep_b, keep_s = ([speculative], [baseline]) if together else ([], [])
    rates = sorted(schedules)

    def batch(rate: float) -> list[Any]:
        return [prompts[i % len(prompts)] for i in range(len(schedules[rate]))]

    def send(engine: EngineBackend, rate: float) -> LoadRound:
        __tracebackhide__ = True
        return engine.load_round(batch(rate), sampling, list(schedules[rate]))

    rounds: dict[tuple[str, float], LoadRound] = {}
    counters: dict[float, Counters] = {}

    def warm(engine: EngineBackend) -> None:
        __tracebackhide__ = True
        engine.generate_round(list(prompts), sampling)

    def measure(which: str, engine: EngineBackend, rate: float) -> None:
        __tracebackhide__ = True
        before = engine.counters() if which == "speculative" else None
        rounds[which, rate] = send(engine, rate)
        if before is not None:
            counters[rate] = engine.counters().since(before)

    if together:
        base = source.acquire(baseline, keep=keep_b, timeout=timeout)
        spec = source.acquire(speculative, keep=keep_s, timeout=timeout)
        warm(base)
        warm(spec)
        for i, rate in enumerate(rates):
            order = [("baseline", base), ("speculative", spec)]
            for which, engine in order if i % 2 == 0 else order[::-1]:
                measure(which, engine, rate)
            _say(progress, i, rates, rounds)
        info = dict(spec.info)
    else:
        base = source.acquire(baseline, timeout=timeout)
        warm(base)
        for rate in rates:
            measure("baseline", base, rate)
        spec = source.acquire(speculative, timeout=timeout)
        warm(spec)
        for i, rate in enumerate(rates):
            measure("speculative", spec, rate)
            _say(progress, i, rates, rounds)
        info = dict(spec.info)
    return LoadRounds(
        tuple(
            RateRounds(
                rate, rounds["baseline", rate], rounds["speculative", rate], counters[rate],
                "speculative" if together and i % 2 else "baseline",
            )
            for i, rate in enumerate(rates)
        ),
        info,
    )  # fmt: skip


def _say(
    progress: Progress, i: int, rates: list[float], rounds: Mapping[tuple[str, float], LoadRound]
) -> None:
    rate = rates[i]
    base, spec = rounds["baseline", rate], rounds["speculative", rate]
    progress(
        f"load {i + 1}/{len(rates)}: {rate_text(rate)}, {len(base.requests)} requests: "
        f"baseline {base.elapsed:.2f} s, speculative {spec.elapsed:.2f} s"
    )
