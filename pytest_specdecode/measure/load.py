"""Speculation under traffic: open-loop arrival schedules, latency percentiles, goodput under an
SLO, the TPOT gain per arrival rate with its interval, and the rate at which it stops paying.

Pure functions and frozen dataclasses; :meth:`Bench.load <pytest_specdecode.Bench.load>` runs
the engines and chains them.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engines.methods import draft_model
from ..engines.protocol import Counters, LoadRound, TimedRequest
from ..errors import ConfigError
from .cache import cache_gap
from .model import Derived, Form, Key, Record, if_null, json, or_else
from .stats import percentile, t975

#: The percentiles every latency summary gives.
PERCENTILES = (50, 90, 99)
#: SLO keys (milliseconds), as ``vllm bench serve --goodput ttft:... tpot:... e2el:...``, by the
#: :class:`TimedRequest` figure they bound.
SLO_KEYS = {"ttft_ms": "ttft", "tpot_ms": "tpot", "e2e_ms": "e2e"}
#: Rounds per rate unless told otherwise: the gain's interval comes from how much the rounds
#: of a rate differ (one round cannot show a shift of the whole machine between the two sides).
DEFAULT_ROUNDS = 3
#: The most requests one rate may send (a duration at a high rate could ask for millions).
MAX_REQUESTS = 100_000
#: The highest finite rate (requests per second); above it every request arrives at once in
#: practice (``float("inf")`` says so), and the schedule's arithmetic would overflow.
MAX_RATE = 1e6
#: The longest span of one round's arrivals (seconds: ``requests / rate`` or ``duration``).
MAX_ROUND_SECONDS = 3600.0
#: The burstiness range (the gamma shape of the gaps: 0.01 all but all at once in bursts,
#: 100 nearly evenly spaced); outside it the draw degenerates or fails.
MIN_BURSTINESS, MAX_BURSTINESS = 0.01, 100.0
#: The most rounds per rate (each sends every request of the rate to both engines).
MAX_LOAD_ROUNDS = 100


# -- the arrival schedule ---------------------------------------------------------------------
def arrival_times(
    rate: float,
    *,
    requests: int | None = None,
    duration: float | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    round_index: int = 0,
) -> list[float]:
    """Seconds after the round begins at which each request arrives, as ``vllm bench serve``
    offers them (its ``get_request``): one gap per request drawn from a gamma distribution of
    mean ``1 / rate`` and shape ``burstiness`` (exponential, a Poisson process, at 1; burstier
    below 1, more regular above), each request one gap after the one before (the first one gap
    after the start), then every time scaled so that the last request arrives at
    ``requests / rate``: the offered rate is the rate asked for, whatever the draw. ``rate``
    ``inf`` sends all at once. ``duration`` (seconds) asks for ``round(rate * duration)``
    requests. ``seed`` and ``round_index`` choose the draw: each round of a load its own
    schedule, the same arguments the same schedule."""
    if math.isinf(rate):
        assert requests is not None, "an infinite rate needs a request count"
        return [0.0] * requests
    if requests is None:
        assert duration is not None, "give requests or a duration"
        if rate * duration > MAX_REQUESTS:
            raise ConfigError(
                f"load(rates=[{rate:g}], duration={duration:g}): that is more than "
                f"{MAX_REQUESTS} requests; lower the rate or the duration"
            )
        requests = max(1, round(rate * duration))
    rng = random.Random(f"{seed}:{round_index}:{rate!r}:{burstiness!r}")
    theta = 1.0 / (rate * burstiness)
    times, now = [], 0.0
    for _ in range(requests):
        now += rng.gammavariate(burstiness, theta)
        times.append(now)
    scale = requests / rate / times[-1] if times[-1] > 0 else 1.0
    return [t * scale for t in times]


def round_schedules(
    rates: Sequence[float],
    *,
    requests: int | None = None,
    duration: float | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    rounds: int = DEFAULT_ROUNDS,
) -> dict[float, list[list[float]]]:
    """Each rate's arrival schedule for each round (:func:`arrival_times`, round ``j`` drawn
    with ``round_index=j``): what both engines are sent in that round."""
    return {
        rate: [
            arrival_times(
                rate,
                requests=requests,
                duration=duration,
                burstiness=burstiness,
                seed=seed,
                round_index=j,
            )  # fmt: skip
            for j in range(rounds)
        ]
        for rate in rates
    }


def check_load_args(
    rates: Any,
    requests: Any,
    duration: Any,
    burstiness: Any,
    slo: Any,
    rounds: Any = DEFAULT_ROUNDS,
    seed: Any = 0,
) -> tuple[list[float], dict[str, float]]:
    """Validate :meth:`Bench.load`'s schedule arguments (types and ranges) before any engine
    starts; the rates (ascending) and the SLO."""

    def number(value: Any) -> bool:
        return not isinstance(value, bool) and isinstance(value, int | float)

    def integer(value: Any) -> bool:
        return not isinstance(value, bool) and isinstance(value, int)

    if isinstance(rates, str | bytes) or not isinstance(rates, Sequence) or not rates:
        raise ConfigError(
            f"load(rates=...): expected a list of request rates (requests per second, "
            f'float("inf") for all at once), got {rates!r:.80}'
        )
    for rate in rates:
        if not number(rate) or not (0 < rate <= MAX_RATE or rate == math.inf):
            raise ConfigError(
                f"load(rates=...): every rate must be a number of requests per second above 0 "
                f'and at most {MAX_RATE:g} (float("inf"): all at once), got {rate!r:.40} in '
                f"{list(rates)!r:.80}"
            )
    if len(set(rates)) != len(rates):
        raise ConfigError(f"load(rates=...): a rate is listed twice in {list(rates)!r:.80}")
    if (requests is None) == (duration is None):
        raise ConfigError(
            "load(): give requests= (how many requests each rate sends) or duration= (seconds "
            "of arrivals per rate), exactly one of them"
        )
    finite_rates = [float(r) for r in rates if not math.isinf(r)]
    if requests is not None:
        if not integer(requests) or not 2 <= requests <= MAX_REQUESTS:
            raise ConfigError(
                f"load(requests=...): expected an integer from 2 to {MAX_REQUESTS} (requests "
                f"per rate), got {requests!r:.40}"
            )
        for rate in finite_rates:
            if requests / rate > MAX_ROUND_SECONDS:
                raise ConfigError(
                    f"load(rates=[{rate:g}], requests={requests}): {requests} requests at "
                    f"{rate:g} req/s span {requests / rate:g} s: more than {MAX_ROUND_SECONDS:g} "
                    "s per round; raise the rate or lower requests"
                )
    if duration is not None:
        if not number(duration) or not 0 < duration <= MAX_ROUND_SECONDS:
            raise ConfigError(
                f"load(duration=...): expected seconds above 0 and at most "
                f"{MAX_ROUND_SECONDS:g} (per rate and round), got {duration!r:.40}"
            )
        if any(math.isinf(r) for r in rates):
            raise ConfigError(
                'load(duration=...): a rate of float("inf") sends every request at once and '
                "has no duration; give requests= instead"
            )
        for rate in finite_rates:
            if rate * duration > MAX_REQUESTS:
                raise ConfigError(
                    f"load(rates=[{rate:g}], duration={duration:g}): that is more than "
                    f"{MAX_REQUESTS} requests; lower the rate or the duration"
                )
    if not number(burstiness) or not MIN_BURSTINESS <= burstiness <= MAX_BURSTINESS:
        raise ConfigError(
            f"load(burstiness=...): expected a number from {MIN_BURSTINESS:g} to "
            f"{MAX_BURSTINESS:g} (1: Poisson arrivals; burstier below, more regular above), "
            f"got {burstiness!r:.40}"
        )
    if not integer(rounds) or not 2 <= rounds <= MAX_LOAD_ROUNDS:
        raise ConfigError(
            f"load(rounds=...): expected an integer from 2 to {MAX_LOAD_ROUNDS} (the gain's "
            f"interval comes from how much the rounds differ), got {rounds!r:.40}"
        )
    if not integer(seed):
        raise ConfigError(f"load(seed=...): expected an integer, got {seed!r:.40}")
    return sorted(float(r) for r in rates), check_slo(slo)


def check_slo(slo: Any) -> dict[str, float]:
    """The SLO as ``{key: milliseconds}``; errors name the bad key or value."""
    if slo is None:
        return {}
    if not isinstance(slo, Mapping) or not slo:
        raise ConfigError(
            f'load(slo=...): expected a dict such as {{"ttft_ms": 500, "tpot_ms": 50}}, got '
            f"{slo!r:.80}"
        )
    checked = {}
    for key, value in slo.items():
        if key not in SLO_KEYS:
            raise ConfigError(
                f"load(slo=...): unknown key {key!r}; known: {', '.join(SLO_KEYS)} (milliseconds)"
            )
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 < value < math.inf
        ):
            raise ConfigError(
                f"load(slo=...): {key} must be finite milliseconds above 0 (leave the key out "
                f"for no bound), got {value!r:.40}"
            )
        checked[key] = float(value)
    return checked


# -- one side of one rate -------------------------------------------------------------------
def percentiles(values: Sequence[float]) -> dict[int, float] | None:
    """``{50: p50, 90: p90, 99: p99}`` of ``values`` (None when there are none)."""
    if not values:
        return None
    ordered = sorted(values)
    return {q: percentile(ordered, q) for q in PERCENTILES}


def meets(request: TimedRequest, slo: Mapping[str, float]) -> bool:
    """Whether ``request`` meets every bound of ``slo`` (milliseconds), as ``vllm bench
    serve`` counts goodput: a request that generated one token has a TPOT of 0 there (it
    meets any TPOT bound); one that generated none meets no bound."""
    if request.ttft is None:
        return False
    for key, bound in slo.items():
        value = getattr(request, SLO_KEYS[key])
        if key == "tpot_ms" and value is None:
            value = 0.0
        if value is None or value * 1000.0 > bound:
            return False
    return True


_PERCENTILES = {"$ref": "#/$defs/percentiles"}
_AT_LEAST_0 = {"minimum": 0}
_SHARE = {"minimum": 0, "maximum": 1}
_RATE = {"$ref": "#/$defs/rate"}
_RATE_OR_NULL = {"anyOf": [_RATE, {"type": "null"}]}


@dataclass(frozen=True)
class LoadSummary(Record):
    """One engine at one rate: latency percentiles (seconds), throughput, goodput."""

    JSON = Form("load_summary")

    requests: int = field(metadata=json(schema=_AT_LEAST_0))  # requests completed per round
    #: from each request's scheduled arrival (what the gates read)
    ttft: dict[int, float] | None = field(metadata=json(schema=_PERCENTILES, replace=True))
    tpot: dict[int, float] | None = field(metadata=json(schema=_PERCENTILES, replace=True))
    itl: dict[int, float] | None = field(metadata=json(schema=_PERCENTILES, replace=True))
    e2e: dict[int, float] | None = field(metadata=json(schema=_PERCENTILES, replace=True))
    output_tokens_per_second: float = field(metadata=json(schema=_AT_LEAST_0))
    #: requests per second that met the SLO (None: no SLO)
    goodput: float | None = field(
        metadata=json(
            schema=_AT_LEAST_0, doc="requests per second that met the SLO; null without one"
        )
    )
    #: from the round's start to its last token, mean over rounds
    seconds: float = field(metadata=json(read=or_else(0.0), optional=True, schema=_AT_LEAST_0))
    #: the arrival loop's p99 lateness against the schedule, seconds
    lateness_p99: float = field(metadata=json(read=or_else(0.0), optional=True, schema=_AT_LEAST_0))
    #: TTFT from each request's send, as ``vllm bench serve`` times it (None: not recorded)
    ttft_sent: dict[int, float] | None = field(
        default=None,
        metadata=json(
            schema=_PERCENTILES, replace=True,
            doc="seconds from each request's send to its first token, as vllm bench serve "
            "times TTFT (ttft runs from the scheduled arrival, the send's lateness included, "
            "and is what SLOs and gates read); absent in reports from before it",
        ),
    )  # fmt: skip

    @classmethod
    def of(cls, rounds: Sequence[LoadRound], slo: Mapping[str, float]) -> LoadSummary:
        """One side's rounds at one rate: percentiles over every request of every round,
        tokens and goodput per second of the rounds' own time."""
        reqs = [q for done in rounds for q in done.requests]
        seconds = max(sum(done.elapsed for done in rounds), 1e-9)
        tokens = sum(q.output_tokens for q in reqs)
        return cls(
            requests=min((len(done.requests) for done in rounds), default=0),
            ttft=percentiles([q.ttft for q in reqs if q.ttft is not None]),
            tpot=percentiles([t for q in reqs if (t := q.tpot) is not None]),
            itl=percentiles([gap for q in reqs for gap in q.itl]),
            e2e=percentiles([q.e2e for q in reqs]),
            output_tokens_per_second=tokens / seconds,
            goodput=sum(meets(q, slo) for q in reqs) / seconds if slo else None,
            seconds=seconds / max(len(rounds), 1),
            lateness_p99=percentile(sorted(max(0.0, q.sent - q.arrival) for q in reqs), 99)
            if reqs
            else 0.0,
            ttft_sent=percentiles([t for q in reqs if (t := q.ttft_sent) is not None]),
        )


# -- one rate: both sides -------------------------------------------------------------------
def round_gain(baseline: LoadRound, speculative: LoadRound) -> float:
    """One round's gain: baseline p50 TPOT / speculative p50 TPOT over its requests (``nan``
    where a side has no TPOT)."""
    b = [t for q in baseline.requests if (t := q.tpot) is not None]
    s = [t for q in speculative.requests if (t := q.tpot) is not None]
    if not b or not s or statistics.median(s) <= 0:
        return math.nan
    return statistics.median(b) / statistics.median(s)


@dataclass(frozen=True)
class LoadPoint(Record):
    """Both engines at one arrival rate (the same requests at the same arrival times)."""

    JSON = Form(
        "load_point",
        derived=(
            Derived("goodput_ratio", float | None, "tpot_speedup_ci"),
            Derived("pays", bool, "goodput_ratio"),
        ),
        required=("pays",),
    )

    #: requests per second (inf: all at once)
    rate: float = field(metadata=json(write=lambda r: _json_rate(r), read=lambda v: _rate(v),
                                      schema=_RATE, replace=True))  # fmt: skip
    baseline: LoadSummary
    speculative: LoadSummary
    #: baseline p50 TPOT / speculative p50 TPOT (geometric mean over rounds)
    tpot_speedup: float = field(
        metadata=json(
            schema={"type": ["number", "null"], "exclusiveMinimum": 0},
            replace=True,
            doc="baseline p50 TPOT / speculative p50 TPOT",
        )
    )
    #: 95%, from the rounds' spread (see build_point)
    tpot_speedup_ci: tuple[float, float] = field(
        metadata=json(doc="95%: t interval over the rounds' log gains")
    )
    #: accepted / draft tokens over this rate's requests
    acceptance_rate: float = field(metadata=json(read=or_else(0.0), optional=True, schema=_SHARE))
    #: 1 + accepted / drafts
    mean_acceptance_length: float = field(
        metadata=json(read=or_else(1.0), optional=True, schema=_AT_LEAST_0)
    )
    #: which engine ran this rate's first round (counterbalanced)
    first: str = field(
        default="baseline",
        metadata=json(schema={"enum": ["baseline", "speculative"]}, replace=True),
    )
    #: each round's gain, in the order run
    round_gains: tuple[float, ...] = field(
        default=(),
        metadata=json(
            schema={"items": {"$ref": "#/$defs/number_or_null"}},
            doc="each round's gain (baseline p50 TPOT / speculative p50 TPOT), in the order run",
        ),
    )
    #: requests per second the schedules offered: requests / last arrival, mean over rounds
    #: (the rate asked for, as ``vllm bench serve`` offers it; None: all at once)
    offered_rate: float | None = field(
        default=None,
        metadata=json(
            schema={"exclusiveMinimum": 0},
            doc="requests per second the schedules offered: requests / last arrival, mean "
            "over rounds (the rate asked for, as vllm bench serve offers it); null when all "
            "arrive at once; absent in reports from before it",
        ),
    )
    #: each side's prefix-cache hit rate over this rate's rounds (None: nothing looked up),
    #: and the speculative minus the baseline's with its 95% interval over the rounds'
    #: paired differences (:func:`~.cache.cache_gap`); each written where measured
    baseline_prefix_cache_hit_rate: float | None = field(
        default=None,
        metadata=json(
            omit=if_null, schema=_SHARE,
            doc="the baseline engine's prefix-cache hit rate over this rate's rounds (cached "
            "/ looked-up prompt tokens, from its counters); null when none was looked up; "
            "absent in reports from before it",
        ),
    )  # fmt: skip
    speculative_prefix_cache_hit_rate: float | None = field(
        default=None,
        metadata=json(omit=if_null, schema=_SHARE, doc="the same for the speculative engine"),
    )
    prefix_cache_gap: float | None = field(
        default=None,
        metadata=json(
            omit=if_null, schema={"$ref": "#/$defs/number_or_null"}, replace=True,
            doc="speculative minus baseline hit rate: the mean of the rounds' paired "
            "differences; null with fewer than two rounds",
        ),
    )  # fmt: skip
    prefix_cache_gap_ci: tuple[float, float] | None = field(
        default=None,
        metadata=json(omit=if_null, doc="95% t-interval of prefix_cache_gap; null with it"),
    )

    @property
    def pays(self) -> bool:
        """Whether speculation lowers p50 TPOT here: the gain's interval lies above 1.0."""
        return self.tpot_speedup_ci[0] > 1.0

    @property
    def goodput_ratio(self) -> float | None:
        """Speculative goodput / baseline goodput (None without an SLO; inf when only the
        speculative engine met it)."""
        b, s = self.baseline.goodput, self.speculative.goodput
        if b is None or s is None:
            return None
        if b == 0:
            return math.inf if s > 0 else 1.0
        return s / b


def build_point(
    rate: float,
    baseline: Sequence[LoadRound],
    speculative: Sequence[LoadRound],
    counters: Counters,
    slo: Mapping[str, float],
    *,
    first: str = "baseline",
    cache: tuple[Sequence[Counters], Sequence[Counters]] = ((), ()),
) -> LoadPoint:
    """One rate's figures from its rounds (round j of each side sent the same schedule) and
    the speculative engine's counter delta. The gain is the geometric mean of the rounds'
    gains, its 95% interval exp(mean ln g ± t(rounds − 1) · s / √rounds) over the rounds' ln g:
    what moves a round's TPOT is mostly the machine's state during that round, which all its
    requests share, so only rounds can show it (``(nan, nan)``, not paying, without two).
    ``cache``: each side's per-round counter deltas (baseline, speculative), for the prefix
    cache's hit rates and their gap."""
    gains = tuple(round_gain(b, s) for b, s in zip(baseline, speculative, strict=True))
    logs = [math.log(g) for g in gains if g > 0]
    gain, ci = math.nan, (math.nan, math.nan)
    if logs and len(logs) == len(gains):
        centre = statistics.fmean(logs)
        gain = math.exp(centre)
        if len(logs) >= 2:
            half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
            ci = (math.exp(centre - half), math.exp(centre + half))
    return LoadPoint(
        rate, LoadSummary.of(baseline, slo), LoadSummary.of(speculative, slo), gain, ci,
        counters.acceptance_rate, counters.mean_acceptance_length, first, gains,
        offered_rate(baseline), sum(cache[0], Counters()).prefix_cache_hit_rate,
        sum(cache[1], Counters()).prefix_cache_hit_rate, *cache_gap(*cache),
    )  # fmt: skip


def offered_rate(rounds: Sequence[LoadRound]) -> float | None:
    """Requests per second the rounds' schedules offered: each round's requests over its last
    arrival, averaged (None when every request arrived at once)."""
    rates = [
        len(done.requests) / last
        for done in rounds
        if done.requests and (last := max(q.arrival for q in done.requests)) > 0
    ]
    return statistics.fmean(rates) if rates else None


# -- the whole load test --------------------------------------------------------------------
_TEXT = json(read=lambda v: str(v or ""), optional=True)


@dataclass(frozen=True)
class LoadResult(Record):
    """What :meth:`Bench.load` measured: one :class:`LoadPoint` per rate, ascending."""

    JSON = Form(
        "load",
        "Load tests (specdecode.load / Bench.load): one per test, one point per arrival rate; "
        'latencies in seconds; a rate of "inf" sent every request at once.',
        derived=(
            Derived("kind", str, None, Key(schema={"const": "load"}, replace=True)),
            Derived("key", str, "label"),
            Derived(
                "crossover_rate", float | None, "points",
                Key(
                    write=lambda r: _json_rate(r), schema=_RATE_OR_NULL, replace=True,
                    doc="the lowest rate at which speculation no longer lowers p50 TPOT; null "
                    "when it pays at every rate",
                ),
            ),
            Derived(
                "pays_up_to", float | None, "crossover_rate",
                Key(write=lambda r: _json_rate(r), schema=_RATE_OR_NULL, replace=True),
            ),
        ),
    )  # fmt: skip

    nodeid: str = field(metadata=json(schema={"minLength": 1}))
    label: str = field(metadata=_TEXT)
    target: str = field(metadata=_TEXT)
    method: str = field(metadata=_TEXT)
    num_speculative_tokens: int = field(
        metadata=json(read=or_else(0), optional=True, schema={"minimum": 0})
    )
    max_tokens: int = field(metadata=json(schema={"minimum": 1}))
    burstiness: float = field(
        metadata=json(read=or_else(1.0), optional=True, schema={"exclusiveMinimum": 0})
    )
    seed: int = field(metadata=json(read=or_else(0), optional=True))
    slo: dict[str, float] = field(
        metadata=json(
            read=lambda v: {k: float(x) for k, x in (v or {}).items()}, optional=True,
            schema={
                "type": "object",
                "propertyNames": {"enum": ["ttft_ms", "tpot_ms", "e2e_ms"]},
                "additionalProperties": {"type": "number", "exclusiveMinimum": 0},
            },
            replace=True, doc="milliseconds, by the figure they bound",
        )
    )  # fmt: skip
    points: tuple[LoadPoint, ...] = field(metadata=json(schema={"minItems": 1}))
    speculative_config: dict[str, Any] = field(
        default_factory=dict, metadata=json(after="num_speculative_tokens")
    )

    @property
    def kind(self) -> str:
        """What the report's entry is (``"load"``)."""
        return "load"

    @property
    def key(self) -> str:
        return f"{self.nodeid}[{self.label}]" if self.label else self.nodeid

    @property
    def draft(self) -> str | None:
        """The draft model or head (None for a proposer without one, such as n-gram)."""
        return draft_model(self.speculative_config)

    @property
    def rates(self) -> list[float]:
        return [p.rate for p in self.points]

    def at(self, rate: float) -> LoadPoint:
        """The point measured at ``rate`` (a :class:`ConfigError` naming the measured ones
        otherwise)."""
        for point in self.points:
            if point.rate == rate:
                return point
        measured = ", ".join(f"{r:g}" for r in self.rates)
        raise ConfigError(f"{self.key}: no load point at rate {rate:g}; measured: {measured}")

    @property
    def crossover_rate(self) -> float | None:
        """The lowest measured rate at which speculation no longer lowers p50 TPOT (the gain's
        95% interval reaches down to 1.0 or below); None when it still pays at the highest."""
        for point in self.points:
            if not point.pays:
                return point.rate
        return None

    @property
    def pays_up_to(self) -> float | None:
        """The highest measured rate below the crossover at which speculation pays (None
        when it pays at none)."""
        paying = None
        for point in self.points:
            if not point.pays:
                break
            paying = point.rate
        return paying

    def summary(self) -> str:
        """One line per rate and the crossover, for a terminal."""
        lines = [f"{self.key}: {self.method} k={self.num_speculative_tokens} under load"]
        for p in self.points:
            b, s = p.baseline.tpot, p.speculative.tpot
            low, high = p.tpot_speedup_ci
            lines.append(
                f"  {rate_text(p.rate)}: p50 TPOT {ms_text(b, 50)} -> {ms_text(s, 50)} "
                f"(gain {p.tpot_speedup:.2f}x, 95% CI {low:.2f}x-{high:.2f}x), p99 TPOT "
                f"{ms_text(b, 99)} -> {ms_text(s, 99)}"
            )
        lines.append("  " + self.traffic_line())
        return "\n".join(lines)

    def traffic_line(self) -> str:
        """Where speculation stops paying, in words."""
        top, cross = self.pays_up_to, self.crossover_rate
        if cross is None and top is not None and math.isinf(top):
            return "speculation pays at every rate measured, all at once included"
        if cross is None:
            return (
                f"speculation pays up to {rate_text(top)} (the highest rate measured; "
                "add higher rates to find where it stops)"
            )
        if top is None:
            return (
                "speculation does not lower p50 TPOT at any rate measured (from "
                f"{rate_text(cross)})"
            )
        return f"speculation pays up to {rate_text(top)}, not at {rate_text(cross)}"


# -- forms -------------------------------------------------------------------------------------
def _json_rate(rate: float | None) -> float | str | None:
    """JSON has no infinity: an all-at-once rate is written ``"inf"``."""
    if rate is None:
        return None
    return "inf" if math.isinf(rate) else rate


def _rate(value: Any) -> float:
    return math.inf if value == "inf" else float(value)


def rate_text(rate: float | None) -> str:
    """A rate in words: ``2 req/s``, ``all at once``."""
    if rate is None:
        return "no rate"
    return "all at once" if math.isinf(rate) else f"{rate:g} req/s"


def ms_text(p: dict[int, float] | None, q: int) -> str:
    """The ``q``-th percentile of ``p`` (seconds) in milliseconds: ``12.0 ms``, ``-``."""
    return "-" if p is None else f"{p[q] * 1000:.1f} ms"
