"""The engine boundary: what every backend (a local vLLM worker, a served endpoint, a test
fake) implements, and the data that crosses it.

Data crosses as frozen dataclasses of plain values; :class:`EngineBackend` and
:class:`EngineSource` are the only things the measurement layer knows of engines.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

from ..errors import CounterResetError
from .config import EngineConfig
from .hardware import Device

#: vLLM's speculative-decoding counters (``LLM.get_metrics()`` names; ``/metrics`` adds
#: ``_total``), by the field of :class:`Counters` they fill.
SPEC_COUNTERS: dict[str, str] = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}
#: Accepted tokens per draft position (a vector in ``get_metrics()``, ``position`` labels on
#: ``/metrics``).
SPEC_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
#: vLLM's prefix-cache counters (``get_metrics()`` names; ``/metrics`` adds ``_total``), in
#: prompt tokens looked up and found cached, by the field of :class:`Counters` they fill.
#: Counted on every engine, speculative or not (vLLM 0.32: ``v1/metrics/loggers.py``).
PREFIX_CACHE_COUNTERS: dict[str, str] = {
    "vllm:prefix_cache_queries": "prefix_cache_queries",
    "vllm:prefix_cache_hits": "prefix_cache_hits",
}
#: Finished requests (``/metrics``), to detect other traffic on a server.
REQUESTS_FINISHED = "vllm:request_success"


#: The most completions vLLM gives one request (``n``): ``VLLM_MAX_N_SEQUENCES``, default 16384
#: in vLLM 0.32 (``vllm/sampling_params.py`` refuses more). A sample of more completions per
#: prompt is sent as several requests of at most this many (:func:`split_n`).
MAX_N_SEQUENCES = 16384


def split_n(sampling: Mapping[str, Any], limit: int = MAX_N_SEQUENCES) -> list[dict[str, Any]]:
    """``sampling`` as the sampling of requests that ask for at most ``limit`` completions each
    and ``sampling["n"]`` together: every completion is an independent sample, so the
    distribution is the same; a ``seed`` goes up by one per further request, which would
    otherwise repeat the first one's completions."""
    n, limit = int(sampling.get("n") or 1), max(1, limit)
    sizes = [limit] * (n // limit) + ([n % limit] if n % limit else [])
    seed = sampling.get("seed")
    return [
        {**sampling, "n": size} | ({"seed": seed + i} if isinstance(seed, int) else {})
        for i, size in enumerate(sizes or [n])
    ]


@dataclass(frozen=True, eq=False)
class Sampling(Mapping[str, Any]):
    """A request's sampling parameters, as ``vllm.SamplingParams`` takes them: the ones a
    measurement reads, typed, and ``extra``, the caller's other keywords as given. It is the
    mapping of those keywords too (:meth:`params`), the form the backends' calls take, which
    a plain dict also has (``engine.generate_round(prompts, {"max_tokens": 8})``)."""

    max_tokens: int
    temperature: float = 0.0
    #: None: no seed sent
    seed: int | None = None
    #: every prompt gets ``max_tokens`` tokens
    ignore_eos: bool = True
    #: completions per prompt (None: vLLM's one)
    n: int | None = None
    #: vLLM's ``structured_outputs``: one for every prompt, or a list, one per prompt
    structured_outputs: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        max_tokens: int,
        temperature: float,
        extra: Mapping[str, Any],
        *,
        seed: int | None = None,
        n: int | None = None,
        structured_outputs: Any = None,
    ) -> Sampling:
        """These parameters with ``ignore_eos``; a typed one in ``extra`` takes the place of
        its default, and ``structured_outputs`` (not None) that of ``extra``'s."""
        typed: dict[str, Any] = {"max_tokens": max_tokens, "temperature": float(temperature)}
        typed |= {"seed": seed, "n": n}
        typed |= {k: v for k, v in extra.items() if k in _TYPED}
        if structured_outputs is not None:
            typed["structured_outputs"] = structured_outputs
        return cls(**typed, extra={k: v for k, v in extra.items() if k not in _TYPED})

    def params(self) -> dict[str, Any]:
        """The keywords of ``vllm.SamplingParams`` (a served request's body fields)."""
        out: dict[str, Any] = {
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "ignore_eos": self.ignore_eos,
        }
        for key in ("seed", "n", "structured_outputs"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out | dict(self.extra)

    def __getitem__(self, key: str) -> Any:
        return self.params()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.params())

    def __len__(self) -> int:
        return len(self.params())


#: The typed fields of :class:`Sampling`: a keyword of ``extra`` of these names fills one.
_TYPED = frozenset(f.name for f in fields(Sampling)) - {"extra"}


#: vLLM's per-request speculative-decoding metrics (``RequestSpecDecodeMetrics.to_dict()``,
#: ``metrics.speculative_decoding`` in a served response), by the field of
#: :class:`RequestFigures` they fill.
REQUEST_SPEC_FIELDS: dict[str, str] = {
    "num_spec_steps": "spec_steps",
    "num_accepted_draft_tokens": "accepted_tokens",
    "num_draft_tokens": "draft_tokens",
}
#: The per-verify-step arrays (vLLM's ``detailed`` level only).
REQUEST_SPEC_STEPS = ("per_step_accepted", "per_step_drafted")
#: The engine argument that turns vLLM's per-request metrics on (vLLM 0.29 and later).
REQUEST_METRICS_ARG = "per_request_spec_decode_metrics"


def request_spec_fields(metrics: Any) -> dict[str, Any]:
    """The :class:`RequestFigures` fields (plain ints and tuples) in vLLM's per-request
    speculative-decoding metrics, a dict as ``to_dict()`` or a served response gives it;
    ``{}`` when absent or malformed."""
    if not isinstance(metrics, Mapping):
        return {}
    try:
        found: dict[str, Any] = {
            ours: int(metrics[theirs]) for theirs, ours in REQUEST_SPEC_FIELDS.items()
        }
        accepted, drafted = (metrics.get(name) for name in REQUEST_SPEC_STEPS)
        if (
            isinstance(accepted, list | tuple)
            and isinstance(drafted, list | tuple)
            and len(accepted) == len(drafted)
        ):
            found["per_step_accepted"] = tuple(int(v) for v in accepted)
            found["per_step_drafted"] = tuple(int(v) for v in drafted)
    except (KeyError, TypeError, ValueError):
        return {}
    return found


def _ints(values: Any) -> tuple[int, ...] | None:
    return None if values is None else tuple(int(v) for v in values)


#: Seconds a real engine's open-loop round waits after the round before it (either engine's)
#: ended: sent at once, 9 of 80 rounds on two tiny servers had a request wait up to 0.8 s for
#: its first token, none of 80 after 2 s (``benchmarks/round_quiet.py``, validation page).
QUIET_S = 2.0


@dataclass(frozen=True)
class RequestFigures:
    """One request of a round: its tokens and latencies and, where the engine reports them
    per request, its speculative-decoding counts (None otherwise)."""

    token_ids: tuple[int, ...]
    text: str
    ttft: float | None  # seconds to the first token
    tpot: float | None  # seconds per output token after the first
    spec_steps: int | None = None  # verify steps that carried a draft
    accepted_tokens: int | None = None  # draft tokens accepted (the bonus token not counted)
    draft_tokens: int | None = None  # draft tokens proposed
    per_step_accepted: tuple[int, ...] | None = None  # per verify step, in order (detailed)
    per_step_drafted: tuple[int, ...] | None = None  # per verify step, in order (detailed)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> RequestFigures:
        """From the plain dict a worker sends over its pipe."""

        def count(key: str) -> int | None:
            return None if data.get(key) is None else int(data[key])

        return cls(
            tuple(int(t) for t in data["token_ids"]),
            str(data.get("text") or ""),
            None if data.get("ttft") is None else float(data["ttft"]),
            None if data.get("tpot") is None else float(data["tpot"]),
            count("spec_steps"),
            count("accepted_tokens"),
            count("draft_tokens"),
            _ints(data.get("per_step_accepted")),
            _ints(data.get("per_step_drafted")),
        )

    @property
    def acceptance_length(self) -> float | None:
        """Tokens per verify step, 1 + accepted / steps (vLLM's mean acceptance length, 1.0
        without a draft); None when not reported."""
        if self.spec_steps is None or self.accepted_tokens is None:
            return None
        return 1.0 + self.accepted_tokens / self.spec_steps if self.spec_steps > 0 else 1.0


#: The phases of one engine step, in the order a step runs them (one home: every table, chart
#: and check asks this tuple). ``other`` is what the step's wall time holds beyond the rest.
PHASES = ("prepare", "forward", "sample", "draft", "other")


@dataclass(frozen=True)
class PhaseTimes:
    """Seconds summed over a round's engine steps of one kind, by phase, timed inside the
    engine: ``prepare`` (scheduling output to model inputs), ``forward`` (the target's forward
    pass: a decode step on the baseline, the verification pass over k + 1 positions on the
    speculative side), ``sample`` (sampling and rejection sampling), ``draft`` (the proposer's
    next draft) and ``other`` (the rest of the step's wall time). ``request_steps`` counts
    each step once per request it ran (a baseline decode step yields one token per request);
    ``full_steps`` and ``full_total`` are the steps, and their seconds, that ran the round's
    largest batch of that kind (the tail where fewer requests are left is cheaper)."""

    steps: int
    total: float  # wall (or device) seconds of those steps
    prepare: float = 0.0
    forward: float = 0.0
    sample: float = 0.0
    draft: float = 0.0
    request_steps: int = 0  # 0: not counted (a profile from before they were)
    full_steps: int = 0
    full_total: float = 0.0

    @property
    def other(self) -> float:
        """The step time no named phase accounts for (never below 0)."""
        return max(0.0, self.total - self.prepare - self.forward - self.sample - self.draft)

    def seconds(self, phase: str) -> float:
        """Summed seconds of one of :data:`PHASES`."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; the phases are {', '.join(PHASES)}")
        return float(getattr(self, phase))

    def __add__(self, other: PhaseTimes) -> PhaseTimes:
        return PhaseTimes(
            self.steps + other.steps, self.total + other.total,
            self.prepare + other.prepare, self.forward + other.forward,
            self.sample + other.sample, self.draft + other.draft,
            self.request_steps + other.request_steps, self.full_steps + other.full_steps,
            self.full_total + other.full_total,
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps, "total": self.total, "prepare": self.prepare,
            "forward": self.forward, "sample": self.sample, "draft": self.draft,
            "request_steps": self.request_steps, "full_steps": self.full_steps,
            "full_total": self.full_total,
        }  # fmt: skip

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> PhaseTimes:
        return cls(
            int(data["steps"]), float(data["total"]),
            **{p: float(data.get(p) or 0.0) for p in PHASES[:-1]},
            request_steps=int(data.get("request_steps") or 0),
            full_steps=int(data.get("full_steps") or 0),
            full_total=float(data.get("full_total") or 0.0),
        )  # fmt: skip


@dataclass(frozen=True)
class StepProfile:
    """Where one round's engine steps spent their time: prefill steps (any prompt tokens
    scheduled) kept apart from decode steps, and how they were timed (``"wall"``: CPU wall
    clock, exact on CPU; ``"cuda-events"``: device time from CUDA events on the stream)."""

    prefill: PhaseTimes
    decode: PhaseTimes
    clock: str = "wall"
    runner: str = ""  # vLLM's model runner timed: "V1", "V2" ("" from a stand-in)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefill": self.prefill.to_dict(),
            "decode": self.decode.to_dict(),
            "clock": self.clock,
            "runner": self.runner,
        }

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> StepProfile:
        return cls(
            PhaseTimes.of(data["prefill"]),
            PhaseTimes.of(data["decode"]),
            str(data.get("clock") or "wall"),
            str(data.get("runner") or ""),
        )


@dataclass(frozen=True)
class Round:
    """One timed ``generate`` of a workload on one engine."""

    elapsed: float  # wall seconds, timed where the engine runs
    requests: tuple[RequestFigures, ...]
    other_requests: int = 0  # requests the engine served meanwhile that were not ours
    #: the round's engine steps by phase, timed inside the engine; None where the engine
    #: cannot be looked into (a served endpoint we did not start)
    profile: StepProfile | None = None
    #: why a local engine's round has no profile (its runner lacks a timing point, named with
    #: the vLLM version and runner; or phase timing was switched off); "" otherwise
    profile_note: str = ""

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Round:
        profile = data.get("profile")
        return cls(
            float(data["elapsed"]),
            tuple(RequestFigures.of(q) for q in data["requests"]),
            int(data.get("other_requests") or 0),
            None if profile is None else StepProfile.of(profile),
            str(data.get("profile_note") or ""),
        )

    @property
    def tokens(self) -> int:
        return sum(len(q.token_ids) for q in self.requests)


@dataclass(frozen=True)
class TimedRequest:
    """One request of a load round: when it was due and sent, and its latencies, all timed
    from its scheduled arrival (a request that arrives during an engine step waits for that
    step to end, as it would on a server)."""

    arrival: float  # scheduled arrival, seconds after the round began
    sent: float  # when it was submitted, seconds after the round began (lateness: sent - arrival)
    ttft: float | None  # seconds from the arrival to the first token (None: no token)
    e2e: float  # seconds from the arrival to the last token
    itl: tuple[float, ...]  # seconds between successive output chunks (a chunk may hold tokens)
    output_tokens: int

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> TimedRequest:
        """From the plain dict a worker sends over its pipe."""
        return cls(
            float(data["arrival"]),
            float(data["sent"]),
            None if data.get("ttft") is None else float(data["ttft"]),
            float(data["e2e"]),
            tuple(float(v) for v in data.get("itl") or ()),
            int(data["output_tokens"]),
        )

    @property
    def ttft_sent(self) -> float | None:
        """Seconds from the request's send to its first token, as ``vllm bench serve`` times
        TTFT (:attr:`ttft` runs from the scheduled arrival: the send's lateness included)."""
        return None if self.ttft is None else self.ttft - max(0.0, self.sent - self.arrival)

    @property
    def tpot(self) -> float | None:
        """Seconds per output token after the first: (e2e - ttft) / (tokens - 1), as
        ``vllm bench serve`` defines it; None with fewer than two tokens (``vllm bench
        serve`` leaves those out of its TPOT figures too, and counts them as 0 for goodput:
        :func:`~pytest_specdecode.measure.load.meets`)."""
        if self.ttft is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "arrival": self.arrival, "sent": self.sent, "ttft": self.ttft, "e2e": self.e2e,
            "itl": list(self.itl), "output_tokens": self.output_tokens,
        }  # fmt: skip


def check_arrivals(arrivals: Sequence[float], n: int) -> None:
    """A :meth:`EngineBackend.load_round` schedule: one arrival per prompt, ascending from 0
    or later (a ``ValueError`` otherwise)."""
    if len(arrivals) != n:
        raise ValueError(f"load: {n} prompts but {len(arrivals)} arrival times; give one each")
    if any(not b >= a for a, b in zip([0.0, *arrivals], arrivals, strict=False)):
        raise ValueError(f"load: arrival times must ascend from 0 or later, got {arrivals!r:.80}")


@dataclass
class Timeline:
    """One request of a load round while it runs (a backend's notebook, not data that
    crosses): when it was due and sent, and when each chunk of tokens came, in seconds after
    the round began."""

    arrival: float
    sent: float = 0.0
    first: float | None = None  # the first chunk that carried a token
    last: float | None = None  # the latest such chunk
    ended: float | None = None  # when it finished (a request may end without a token)
    itl: list[float] = field(default_factory=list)
    tokens: int = 0

    def chunk(self, at: float, tokens: int) -> None:
        """``tokens`` new tokens came at ``at`` (a chunk without tokens is not one)."""
        if tokens <= 0:
            return
        if self.last is None:
            self.first = at
        else:
            self.itl.append(at - self.last)
        self.last = at
        self.tokens += tokens

    @property
    def end(self) -> float:
        """The last token (else the end, else the sending)."""
        return next(t for t in (self.last, self.ended, self.sent) if t is not None)

    def timed(self) -> TimedRequest:
        """The request's figures: latencies from the scheduled arrival."""
        first = self.first
        return TimedRequest(
            self.arrival, self.sent, None if first is None else first - self.arrival,
            self.end - self.arrival, tuple(self.itl), self.tokens,
        )  # fmt: skip


@dataclass(frozen=True)
class LoadRound:
    """One open-loop round on one engine: each prompt sent at its scheduled arrival, one
    request stream per arrival; requests in schedule order."""

    elapsed: float  # seconds from the round's start to the last token
    requests: tuple[TimedRequest, ...]
    other_requests: int = 0  # requests the engine served meanwhile that were not ours

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> LoadRound:
        return cls(
            float(data["elapsed"]),
            tuple(TimedRequest.of(q) for q in data["requests"]),
            int(data.get("other_requests") or 0),
        )


#: The scalar fields of :class:`Counters`: the speculative-decoding counters, then the
#: prefix cache's.
COUNTER_NAMES = (
    "num_drafts", "num_draft_tokens", "num_accepted_tokens",
    "prefix_cache_queries", "prefix_cache_hits",
)  # fmt: skip
#: Each field of :class:`Counters` by vLLM's name for its counter.
_VLLM_NAME = {ours: theirs for theirs, ours in (SPEC_COUNTERS | PREFIX_CACHE_COUNTERS).items()}


@dataclass(frozen=True)
class Counters:
    """vLLM's speculative-decoding and prefix-cache counters of one engine: cumulative
    readings, or a before/after delta.

    No count is ever negative (a ``ValueError``): a delta comes from :meth:`since`, which
    refuses readings that went down."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: tuple[int, ...] = field(default_factory=tuple)
    #: when the process that counts them started (a server's ``process_start_time_seconds``),
    #: to tell a restart between two readings; None when unknown, and for a delta
    process_start: float | None = field(default=None, compare=False)
    #: prompt tokens looked up in the prefix cache, and those found there (every engine)
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0

    def __post_init__(self) -> None:
        counts = {name: getattr(self, name) for name in COUNTER_NAMES}
        for i, value in enumerate(self.accepted_per_position):
            counts[f"accepted_per_position[{i}]"] = value
        negative = {name: value for name, value in counts.items() if value < 0}
        if negative:
            found = ", ".join(f"{name}={value}" for name, value in negative.items())
            raise ValueError(f"vLLM's counts cannot be negative: {found}")

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Counters:
        return cls(
            int(data.get("num_drafts") or 0),
            int(data.get("num_draft_tokens") or 0),
            int(data.get("num_accepted_tokens") or 0),
            tuple(int(v) for v in data.get("accepted_per_position") or ()),
            prefix_cache_queries=int(data.get("prefix_cache_queries") or 0),
            prefix_cache_hits=int(data.get("prefix_cache_hits") or 0),
        )

    def since(self, before: Counters, where: str = "the speculative engine") -> Counters:
        """The delta from an earlier reading ``before`` (counters are process-global and
        cumulative: always diff). A counter that went down, fewer draft positions, or another
        process start time is a :class:`~pytest_specdecode.errors.CounterResetError` naming
        ``where``: the engine restarted between the readings, and no delta of two processes'
        counters is made."""
        why = self._reset_since(before)
        if why is not None:
            raise restarted(where, why)
        b_pos = list(before.accepted_per_position)
        b_pos += [0] * (len(self.accepted_per_position) - len(b_pos))
        return Counters(
            self.num_drafts - before.num_drafts,
            self.num_draft_tokens - before.num_draft_tokens,
            self.num_accepted_tokens - before.num_accepted_tokens,
            tuple(a - b for a, b in zip(self.accepted_per_position, b_pos, strict=False)),
            prefix_cache_queries=self.prefix_cache_queries - before.prefix_cache_queries,
            prefix_cache_hits=self.prefix_cache_hits - before.prefix_cache_hits,
        )

    def _reset_since(self, before: Counters) -> str | None:
        """Why ``self`` cannot follow ``before`` in one process, or None."""
        if (
            self.process_start is not None
            and before.process_start is not None
            and self.process_start != before.process_start
        ):
            return (
                f"process_start_time_seconds changed from {before.process_start:.0f} to "
                f"{self.process_start:.0f}"
            )
        for name in COUNTER_NAMES:
            old, new = getattr(before, name), getattr(self, name)
            if new < old:
                return f"{_VLLM_NAME[name]} went down from {old} to {new}"
        if len(self.accepted_per_position) < len(before.accepted_per_position):
            return (
                f"its accepted-per-position counter has {len(self.accepted_per_position)} "
                f"positions, {len(before.accepted_per_position)} before"
            )
        for i, (old, new) in enumerate(
            zip(before.accepted_per_position, self.accepted_per_position, strict=False)
        ):
            if new < old:
                return (
                    f"vllm:spec_decode_num_accepted_tokens_per_pos (position {i}) went down "
                    f"from {old} to {new}"
                )
        return None

    def __add__(self, other: Counters) -> Counters:
        n = max(len(self.accepted_per_position), len(other.accepted_per_position))
        a = list(self.accepted_per_position) + [0] * (n - len(self.accepted_per_position))
        b = list(other.accepted_per_position) + [0] * (n - len(other.accepted_per_position))
        return Counters(
            self.num_drafts + other.num_drafts,
            self.num_draft_tokens + other.num_draft_tokens,
            self.num_accepted_tokens + other.num_accepted_tokens,
            tuple(x + y for x, y in zip(a, b, strict=True)),
            prefix_cache_queries=self.prefix_cache_queries + other.prefix_cache_queries,
            prefix_cache_hits=self.prefix_cache_hits + other.prefix_cache_hits,
        )

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Prompt tokens found in the prefix cache / prompt tokens looked up (vLLM's hit rate);
        None when none was looked up."""
        if not self.prefix_cache_queries:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries

    @property
    def acceptance_rate(self) -> float:
        """accepted / draft tokens (vLLM's definition; not the theory's per-token alpha)."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens per verify step: 1 + accepted / drafts (the bonus token counts as one)."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    @property
    def acceptance_per_position(self) -> list[float]:
        """Share of drafts whose i-th speculative token was accepted (unconditional)."""
        if not self.num_drafts:
            return [0.0 for _ in self.accepted_per_position]
        return [n / self.num_drafts for n in self.accepted_per_position]

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_position": list(self.accepted_per_position),
            "prefix_cache_queries": self.prefix_cache_queries,
            "prefix_cache_hits": self.prefix_cache_hits,
        }


@dataclass(frozen=True)
class Placement:
    """How an engine was placed: its final ``vllm.LLM`` kwargs, a note for reports, and the
    environment it started with."""

    engine_kwargs: dict[str, Any]
    memory: str
    env: dict[str, str]


def restarted(where: str, why: str) -> CounterResetError:
    """The error for an engine (``where``) whose counters restarted during a measurement."""
    return CounterResetError(
        f"{where} restarted during the measurement: {why}. Its counters restarted, so a "
        "before/after difference would mix the old process's traffic with the new one's; "
        "this measurement is dropped (no figure from it). Run the test again once the engine "
        "stays up."
    )


@runtime_checkable
class EngineBackend(Protocol):
    """One engine, local or served: generate timed rounds, sample, read its counters.

    ``sampling`` maps ``vllm.SamplingParams`` keywords to values: a :class:`Sampling` from a
    ``Bench``, or any mapping (a custom flow's dict)."""

    config: EngineConfig
    placement: Placement
    #: plain facts for the report: versions, pid, KV-cache tokens, served URL and model, ...
    info: dict[str, Any]
    #: seconds one call may take (set by the pool for each test)
    timeout: float

    @property
    def alive(self) -> bool: ...

    @property
    def pid(self) -> int | None:
        """The engine's process group leader, or None when it is not ours (served)."""
        ...

    def generate_round(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any], concurrency: int | None = None
    ) -> Round: ...

    def sample(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any]
    ) -> list[list[list[int]]]: ...

    def load_round(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any], arrivals: Sequence[float]
    ) -> LoadRound:
        """Send ``prompts[i]`` ``arrivals[i]`` seconds after the round begins (ascending), each
        as a request of its own, and time every one (open loop: arrivals do not wait for
        earlier requests to finish)."""
        ...

    def counters(self) -> Counters: ...

    def close(self) -> None: ...


class _Measures(Protocol):
    def generate_round(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any], concurrency: int | None = None
    ) -> Round: ...

    def counters(self) -> Counters: ...


class PlainCalls:
    """``generate`` and ``spec_counters`` as plain dicts (the shapes the fixtures document),
    built on a backend's :meth:`~EngineBackend.generate_round` and
    :meth:`~EngineBackend.counters`."""

    def generate(
        self: _Measures,
        prompts: Sequence[Any],
        sampling: Mapping[str, Any],
        concurrency: int | None = None,
    ) -> dict[str, Any]:
        """One timed round: ``{"elapsed", "requests": [{"token_ids", "text", "ttft",
        "tpot"}]}``."""
        done = self.generate_round(prompts, sampling, concurrency)
        return {
            "elapsed": done.elapsed,
            "requests": [
                {"token_ids": list(q.token_ids), "text": q.text, "ttft": q.ttft, "tpot": q.tpot}
                for q in done.requests
            ],
        }

    def spec_counters(self: _Measures) -> dict[str, Any]:
        """The cumulative counters: ``{"num_drafts", "num_draft_tokens",
        "num_accepted_tokens", "accepted_per_position": list, "prefix_cache_queries",
        "prefix_cache_hits"}``."""
        return self.counters().to_dict()


@runtime_checkable
class EngineSource(Protocol):
    """Where engines come from: the pool of local workers, two servers, or a fake.

    ``acquire`` gives the engine of a configuration (``keep``: the ones needed with it, not to
    be shut down for it); ``plan`` tells which engine keys the tests ahead need, the running
    test first, so that a bounded source keeps those needed soonest; ``starts``,
    ``restarts`` (starts of an engine it had started before), ``start_seconds`` (wall time
    spent waiting for starts) and ``stop_seconds`` (shutting engines down) count what it cost;
    ``sequential_reasons`` says why engines started one after the other (once per reason);
    ``memory_gib`` what an engine holds. ``quiet_seconds``: how long an open-loop round waits
    after the round before it ended (:data:`QUIET_S` for real engines, 0 for a simulation)."""

    max_engines: int
    quiet_seconds: float
    starts: int
    restarts: int
    start_seconds: float
    stop_seconds: float
    sequential_reasons: list[str]

    @property
    def device(self) -> Device: ...

    def acquire(
        self,
        config: EngineConfig,
        *,
        keep: Sequence[EngineConfig] = (),
        timeout: float | None = None,
    ) -> EngineBackend: ...

    def is_running(self, config: EngineConfig) -> bool: ...

    def plan(self, upcoming: Sequence[Collection[str]]) -> None: ...

    def memory_gib(self, engine: EngineBackend) -> float | None:
        """What ``engine`` (one of this source's) holds in memory: its process group's RSS on
        a CPU, its GPU memory on a GPU; None where it is not this process's to measure (a
        server, a simulation)."""
        ...

    def close(self) -> None: ...
