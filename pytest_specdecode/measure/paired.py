"""Paired rounds: warm-up, then baseline and speculative rounds in counterbalanced order
(A B, B A, A B, ...) when both engines are resident, so that a linear drift of the machine
adds as much to the baseline as to the speculative side over every two rounds."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engines.config import EngineConfig
from ..engines.protocol import Counters, EngineBackend, EngineSource, Round
from ..errors import EngineError
from ..names import display_name
from .sequential import MIN_ROUNDS
from .warmup import warm_up

#: Fewest paired rounds before a stopping rule may stop.
MIN_ADAPTIVE_TRIALS = MIN_ROUNDS

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PairedRounds:
    """What :func:`run_paired` measured, before any figure is derived."""

    baseline: tuple[Round, ...]
    speculative: tuple[Round, ...]
    counters: Counters  # speculative engine, over the measured rounds
    round_counters: tuple[Counters, ...]  # the same, per measured round
    mode: str  # "interleaved" or "sequential"
    memory: str  # how engine memory was placed
    engine_info: dict[str, Any] = field(default_factory=dict)  # speculative engine's facts
    memory_gib: dict[str, float | None] = field(default_factory=dict)  # per side
    kv_cache_tokens: dict[str, int | None] = field(default_factory=dict)  # per side
    looks: int | None = None  # the most rounds, when a stopping rule could end the run early
    warmup_seconds: float = 0.0  # wall time of the warm-up rounds
    round_seconds: float = 0.0  # wall time of the measured rounds
    #: the baseline engine's counters (its prefix cache's) over the measured rounds, and per
    #: measured round; empty from a source that built rounds without them
    baseline_counters: Counters = field(default_factory=Counters)
    baseline_round_counters: tuple[Counters, ...] = ()

    @property
    def ratios(self) -> list[float]:
        """Speculative over baseline output tokens per second, per paired round."""
        return ratios(self.baseline, self.speculative)

    @property
    def other_requests(self) -> int:
        return sum(r.other_requests for r in self.baseline + self.speculative)


def ratios(baseline: Sequence[Round], speculative: Sequence[Round]) -> list[float]:
    """Each paired round's speculative output tokens per second over the baseline's: the
    baseline's time over the speculative one's when both generated as many tokens (as with
    ``ignore_eos``), and a side that generated fewer tokens gains nothing from it. A round in
    which a side generated no token is an :class:`~pytest_specdecode.errors.EngineError`."""
    found = []
    for i, (b, s) in enumerate(zip(baseline, speculative, strict=True)):
        for side, round_ in (("baseline", b), ("speculative", s)):
            if round_.tokens <= 0 or round_.elapsed <= 0:
                raise EngineError(
                    f"round {i + 1}: the {side} engine generated {round_.tokens} tokens in "
                    f"{round_.elapsed:.3g} s: no tokens per second to compare (an engine or "
                    "server that returns no token ids, or a max_tokens of 0)"
                )
        found.append((s.tokens / s.elapsed) / (b.tokens / b.elapsed))
    return found


def counting(engine: EngineBackend, role: str = "speculative") -> str:
    """The engine of ``role`` (``"speculative"`` or ``"baseline"``), as a counter-reset
    message names it: its server's URL when served, else its target."""
    url = engine.info.get("served_url")
    return (
        f"the {role} server {url}"
        if url
        else f"the {role} engine of {display_name(engine.config.target)}"
    )


class _Counted:
    """One engine's counters over a measurement: the first reading, the last, and the delta
    of each measured round (diffed with the restart guard of :meth:`Counters.since`)."""

    def __init__(self, engine: EngineBackend, role: str) -> None:
        self.engine = engine
        self.where = counting(engine, role)
        self.first = self.last = engine.counters()
        self.per_round: list[Counters] = []

    def read(self) -> None:
        current = self.engine.counters()
        self.per_round.append(current.since(self.last, self.where))
        self.last = current

    @property
    def total(self) -> Counters:
        return self.last.since(self.first, self.where)


class _Recorder:
    """Rounds and per-round counter deltas of one paired measurement, on each side."""

    def __init__(self) -> None:
        self.base: list[Round] = []
        self.spec_rounds: list[Round] = []
        self.base_counts: _Counted | None = None
        self.spec_counts: _Counted | None = None
        self.warmup_seconds = 0.0
        self.round_seconds = 0.0
        self._since = time.perf_counter()  # the last round's end

    def count(self, base: EngineBackend | None, spec: EngineBackend | None) -> None:
        """Read the counters the rounds from now on are diffed from (per engine given)."""
        if base is not None:
            self.base_counts = _Counted(base, "baseline")
        if spec is not None:
            self.spec_counts = _Counted(spec, "speculative")
        self._since = time.perf_counter()

    def baseline(self, round_: Round) -> None:
        self.base.append(round_)
        if self.base_counts is not None:
            self.base_counts.read()
        self._tick()

    def speculative(self, round_: Round) -> None:
        self.spec_rounds.append(round_)
        if self.spec_counts is not None:
            self.spec_counts.read()
        self._tick()

    def _tick(self) -> None:
        now = time.perf_counter()
        self.round_seconds += now - self._since
        self._since = now


def run_paired(
    source: EngineSource,
    baseline: EngineConfig,
    speculative: EngineConfig,
    prompts: Sequence[Any],
    sampling: Mapping[str, Any],
    *,
    trials: int,
    warmup: int = 1,
    concurrency: int | None = None,
    timeout: float | None = None,
    progress: Progress = lambda _: None,
    stop: Callable[[list[float]], bool] | None = None,
) -> PairedRounds:
    """Run warm-up and ``trials`` paired rounds on the engines ``source`` gives (each warm-up
    round full on an engine's first use, short after: :mod:`.warmup`).

    With two engines resident the rounds are paired in counterbalanced order (baseline first
    in odd rounds, speculative first in even ones); with a pool of one they run one engine
    after the other ("sequential"). With ``stop`` (adaptive trials), ``trials`` is
    the most rounds: after each round from the third on, ``stop(ratios)`` may end it early.
    """
    __tracebackhide__ = True

    def gen(engine: EngineBackend) -> Round:
        __tracebackhide__ = True
        return engine.generate_round(prompts, sampling, concurrency)

    def warm(engine: EngineBackend) -> None:
        __tracebackhide__ = True
        warm_up(engine, prompts, sampling, concurrency)

    if source.max_engines < 2:
        return _sequential(
            source, baseline, speculative, gen, warm, trials, warmup, timeout, progress
        )
    base = source.acquire(baseline, keep=[speculative], timeout=timeout)
    spec = source.acquire(speculative, keep=[baseline], timeout=timeout)
    began = time.perf_counter()
    for _ in range(warmup):
        warm(base)
        warm(spec)
    memory = {"baseline": source.memory_gib(base), "speculative": source.memory_gib(spec)}
    rec = _Recorder()
    rec.warmup_seconds = time.perf_counter() - began
    rec.count(base, spec)
    for i in range(trials):
        if i % 2 == 0:
            rec.baseline(gen(base))
            rec.speculative(gen(spec))
        else:
            rec.speculative(gen(spec))
            rec.baseline(gen(base))
        progress(
            f"round {i + 1}/{trials}: baseline {rec.base[-1].elapsed:.2f} s, "
            f"speculative {rec.spec_rounds[-1].elapsed:.2f} s"
        )
        so_far = ratios(rec.base, rec.spec_rounds)
        if stop is not None and len(so_far) >= MIN_ADAPTIVE_TRIALS and stop(so_far):
            progress(f"decided after {len(so_far)} rounds")
            break
    looks = trials if stop is not None else None
    return _paired(rec, base, spec, "interleaved", memory, looks)


def _sequential(
    source: EngineSource,
    baseline: EngineConfig,
    speculative: EngineConfig,
    gen: Callable[[EngineBackend], Round],
    warm: Callable[[EngineBackend], None],
    trials: int,
    warmup: int,
    timeout: float | None,
    progress: Progress,
) -> PairedRounds:
    """A pool of one: every baseline round, then every speculative round."""
    __tracebackhide__ = True
    base = source.acquire(baseline, timeout=timeout)
    began = time.perf_counter()
    for _ in range(warmup):
        warm(base)
    warmup_seconds = time.perf_counter() - began
    memory = {"baseline": source.memory_gib(base)}
    rec = _Recorder()
    rec.count(base, None)
    for _ in range(trials):
        rec.baseline(gen(base))
    spec = source.acquire(speculative, timeout=timeout)
    began = time.perf_counter()
    for _ in range(warmup):
        warm(spec)
    memory["speculative"] = source.memory_gib(spec)
    rec.warmup_seconds = warmup_seconds + time.perf_counter() - began
    rec.count(None, spec)
    for _ in range(trials):
        rec.speculative(gen(spec))
    progress(f"{trials} rounds each, baseline then speculative")
    return _paired(rec, base, spec, "sequential", memory)


def _paired(
    rec: _Recorder,
    base: EngineBackend,
    spec: EngineBackend,
    mode: str,
    memory: dict[str, float | None],
    looks: int | None = None,
) -> PairedRounds:
    spec_counts, base_counts = rec.spec_counts, rec.base_counts
    assert spec_counts is not None and base_counts is not None
    return PairedRounds(
        baseline=tuple(rec.base),
        speculative=tuple(rec.spec_rounds),
        counters=spec_counts.total,
        round_counters=tuple(spec_counts.per_round),
        mode=mode,
        memory=spec.placement.memory,
        engine_info={**spec.info, "ld_preload": spec.placement.env.get("LD_PRELOAD")},
        memory_gib=memory,
        kv_cache_tokens={
            "baseline": base.info.get("kv_cache_tokens"),
            "speculative": spec.info.get("kv_cache_tokens"),
        },
        looks=looks,
        warmup_seconds=rec.warmup_seconds,
        round_seconds=rec.round_seconds,
        baseline_counters=base_counts.total,
        baseline_round_counters=tuple(base_counts.per_round),
    )


def adaptive_stop(
    thresholds: Sequence[float], precision: float, max_rounds: int
) -> Callable[[list[float]], bool]:
    """The adaptive rule: stop once the speedup's repeated 95% interval (over looks up to
    ``max_rounds``, :func:`~.sequential.repeated_interval`) is decisive against every
    threshold in play (lies wholly above or below it) and, with no threshold, once its
    half-width is within ``precision`` (relative)."""
    from .sequential import repeated_interval

    def stop(ratios: list[float]) -> bool:
        speedup, (low, high) = repeated_interval(ratios, max_rounds)
        if thresholds:
            return all(not (low < t <= high) for t in thresholds)
        return (high - low) / 2 <= precision * speedup

    return stop
