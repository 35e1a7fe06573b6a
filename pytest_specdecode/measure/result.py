"""The figures one ``run()`` produces: a frozen :class:`Result` and its one dict form.

A result holds what was measured and what follows from it alone (theory, verdict); how a test
judged it (its gates, pass or fail) lives beside it, in the session's :class:`Outcome`, so
nothing changes a result after it is built. ``Result.to_dict()`` / ``Result.from_dict()``
round-trip; report, saved-run and baseline entries are that dict plus the outcome's fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .detectable import Detectable
from .model import Form, Record, encode, if_empty, if_none, json, optional
from .model import finite as finite  # the one rule, for the modules that ask here
from .phases import PhaseSummary
from .stats import percentile
from .verdict import Verdict, written

#: Report-entry fields that are not the result's: how the test judged it, and where it ran.
OUTCOME_FIELDS = ("passed", "gate_failures", "worker")


_NUMBER_OR_NULL = {"type": ["number", "null"]}
_AT_LEAST_0 = {"minimum": 0}
_AT_LEAST_1 = {"minimum": 1}
_SHARE = {"minimum": 0, "maximum": 1}


def _no_cache(_value: Any, figures: EngineFigures) -> bool:
    """The prefix cache's figures are written where measured (older reports lack them)."""
    return figures.prefix_cache_hit_rate is None


@dataclass(frozen=True)
class EngineFigures(Record):
    """What one engine did over the measured rounds."""

    JSON = Form("engine")

    tokens_per_second: float = field(metadata=json(schema=_AT_LEAST_0))
    #: seconds per output token after the first, mean over requests
    tpot: float | None = field(metadata=json(schema=_NUMBER_OR_NULL, replace=True))
    ttft: float | None = field(
        metadata=json(schema=_NUMBER_OR_NULL, replace=True)
    )  # seconds to the first token
    seconds: list[float]  # wall time of each measured round
    generated_tokens: int = field(metadata=json(schema=_AT_LEAST_0))  # tokens generated per round
    #: per prompt, last measured round
    token_ids: list[list[int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    #: process-group RSS (CPU) or GPU memory (NVML), raw
    memory_gib: float | None = field(
        default=None, metadata=json(schema=_NUMBER_OR_NULL, replace=True)
    )
    kv_cache_tokens: int | None = None  # KV cache capacity vLLM allocated
    #: prompt tokens looked up in the prefix cache over the measured rounds, those found there
    #: (vLLM's counters, diffed per round) and their ratio (None: none looked up)
    prefix_cache_queries: int = field(
        default=0,
        metadata=json(
            omit=_no_cache,
            schema=_AT_LEAST_0,
            doc="prompt tokens looked up in the engine's prefix cache over the measured rounds "
            "(vllm:prefix_cache_queries, diffed per round)",
        ),
    )
    prefix_cache_hits: int = field(
        default=0,
        metadata=json(
            omit=_no_cache,
            schema=_AT_LEAST_0,
            doc="of those, the tokens found cached (vllm:prefix_cache_hits, diffed per round)",
        ),
    )
    prefix_cache_hit_rate: float | None = field(
        default=None,
        metadata=json(
            omit=_no_cache,
            schema=_SHARE,
            doc="prefix_cache_hits / prefix_cache_queries; null when no token was looked up",
        ),
    )


@dataclass(frozen=True)
class Divergence(Record):
    """Where the speculative output first differs from the baseline for one prompt."""

    JSON = Form("divergence", strict=True, inline=True)

    prompt_index: int = field(metadata=json(schema=_AT_LEAST_0))
    token_index: int = field(metadata=json(schema=_AT_LEAST_0))
    baseline_token: int | None
    speculative_token: int | None


def _no_gap(_value: Any, result: Result) -> bool:
    """The prefix cache's gap is written where measured (older reports lack it)."""
    return result.prefix_cache_gap_ci is None


@dataclass(frozen=True)
class Result(Record):
    """One paired measurement of a baseline and a speculative engine on the same prompts."""

    JSON = Form("result")

    nodeid: str = field(metadata=json(schema={"minLength": 1}))
    category: str
    target: str
    method: str
    num_speculative_tokens: int = field(metadata=json(schema=_AT_LEAST_0))
    draft: str | None
    speculative_config: dict[str, Any]
    engine_kwargs: dict[str, Any]
    num_prompts: int = field(metadata=json(schema=_AT_LEAST_1))
    max_tokens: int = field(metadata=json(schema=_AT_LEAST_1))
    temperature: float = field(metadata=json(schema=_AT_LEAST_0))
    concurrency: int | None = field(metadata=json(schema=_AT_LEAST_1))
    trials: int = field(metadata=json(schema=_AT_LEAST_1))
    #: "interleaved" (both engines resident, rounds A B A B) or "sequential"
    mode: str
    memory: str  # how engine memory was set, e.g. the GPU split
    speedup: float = field(metadata=json(schema={"exclusiveMinimum": 0}))
    speedup_ci: tuple[float, float]
    ratios: list[float] = field(
        metadata=json(schema={"items": {"type": "number", "exclusiveMinimum": 0}})
    )
    acceptance_rate: float = field(metadata=json(schema=_SHARE))
    mean_acceptance_length: float = field(metadata=json(schema=_AT_LEAST_1))
    acceptance_per_position: list[float]
    num_drafts: int = field(metadata=json(schema=_AT_LEAST_0))
    num_draft_tokens: int = field(metadata=json(schema=_AT_LEAST_0))
    num_accepted_tokens: int = field(metadata=json(schema=_AT_LEAST_0))
    match_rate: float = field(metadata=json(schema=_SHARE))
    divergences: list[Divergence]
    baseline: EngineFigures
    speculative: EngineFigures
    label: str = ""
    #: per-token acceptance (per-step draft lengths, else counters)
    alpha: float | None = field(default=None, metadata=json(schema=_NUMBER_OR_NULL, replace=True))
    #: draft model step time / target step time, from inside the speculative engine: its
    #: draft proposal per drafted token over the baseline's decode step (0 without a model)
    cost_ratio: float | None = field(
        default=None, metadata=json(schema=_NUMBER_OR_NULL, replace=True)
    )
    #: Leviathan's bound from alpha, k and cost_ratio
    predicted_speedup: float | None = field(
        default=None, metadata=json(schema=_NUMBER_OR_NULL, replace=True)
    )
    #: measured speedup / what the measured tokens per step allow at this cost ratio
    #: (mean acceptance length / (cost_ratio * k + 1)); no i.i.d. assumption
    efficiency: float | None = field(
        default=None, metadata=json(schema=_NUMBER_OR_NULL, replace=True)
    )
    samples: dict[str, list[float]] = field(
        default_factory=dict, metadata=json()
    )  # per-round figures
    #: what the speculative engine holds for its proposer: the draft's weights plus the draft's
    #: KV cache (0 without a model; process memory not counted; see ``engines/footprint.py``);
    #: the parts are in ``notes["memory"]``
    extra_memory_gib: float | None = field(
        default=None,
        metadata=json(
            schema=_NUMBER_OR_NULL,
            replace=True,
            doc="what the speculative engine holds for its proposer: the draft's weights plus the "
            "draft's KV cache (0 for a proposer without a model; process memory not counted; the "
            "parts in notes.memory). Reports from earlier versions hold the speculative engine's "
            "memory minus the baseline's (process RSS on a CPU)",
        ),
    )
    #: None: not judged (a sweep's point, an older report)
    verdict: Verdict | None = field(
        default=None,
        metadata=json(
            write=written,
            read=Verdict.read,
            schema={"enum": ["", *(str(v) for v in Verdict)]},
            replace=True,
        ),
    )
    verdict_reasons: list[str] = field(default_factory=list)
    adaptive: bool = False  # rounds were added until the interval was decisive
    inconclusive: str = ""  # why an adaptive measurement could not decide, if it could not
    notes: dict[str, Any] = field(
        default_factory=dict, metadata=json()
    )  # free-form figures a test adds
    #: per prompt (prompt order), the mean acceptance length 1 + accepted / verify steps over
    #: the measured speculative rounds; None for a prompt without it, None altogether when the
    #: engine does not report acceptance per request
    request_acceptance: tuple[float | None, ...] | None = field(
        default=None,
        metadata=json(
            schema={"items": {"type": ["number", "null"], "minimum": 1}},
            doc="per prompt (prompt order), the mean acceptance length 1 + accepted / verify steps "
            "over the measured speculative rounds; null for a prompt without it, null altogether "
            "when the engine does not report acceptance per request",
        ),
    )
    #: the prompts with the lowest acceptance length (<= 3)
    least_gain: tuple[int, ...] = field(
        default=(),
        metadata=json(
            schema={"items": {"type": "integer", "minimum": 0}},
            doc="indexes (from 0) of the prompts with the lowest acceptance length, lowest first",
        ),
    )
    #: both engines' step time by phase, the break-even acceptance length and why speculation
    #: pays or not; None when any measured round has no step profile (a served engine)
    phases: PhaseSummary | None = None
    #: why ``phases`` is None on local engines, in the engines' words (e.g. "phase profile
    #: unavailable: vLLM 0.34 model runner V2 (...) has no sample"); "" where it is not None
    #: or the engine is served. The cost ratio, the break-even and the efficiency go with it.
    phases_unavailable: str = field(
        default="",
        metadata=json(
            omit=if_empty,
            doc="why a local engine's result has no phases: the engines' own words (the vLLM "
            "version, the model runner and the timing point it lacks, or phase timing switched "
            "off); the cost ratio, the break-even length and the theory efficiency go with it; "
            "empty or absent otherwise",
        ),
    )
    #: a saved baseline's: the smallest drop of each compared figure its rule catches with
    #: 95% probability (:mod:`~.detectable`), and the most rounds a run compared with it takes
    detectable: dict[str, Detectable] = field(
        default_factory=dict,
        metadata=json(
            omit=if_empty,
            doc="a result saved as a baseline: per compared figure, what a run of at most "
            "compared_rounds rounds compared with it can catch",
        ),
    )
    compared_rounds: int | None = optional(
        {"type": "integer", "minimum": 2},
        "a result saved as a baseline: the most rounds a run compared with it takes (two "
        "thirds of its rounds, at least 20, at most --specdecode-compare-max-trials)",
    )
    #: the speculative side's prefix-cache hit rate minus the baseline's on the same requests:
    #: the mean of the per-round differences and its 95% t-interval (None: fewer than two
    #: rounds with a hit rate on both sides; :func:`~.figures.cache_gap`)
    prefix_cache_gap: float | None = field(
        default=None,
        metadata=json(
            omit=_no_gap,
            doc="the speculative engine's prefix-cache hit rate minus the baseline's on the same "
            "requests: the mean of the per-round differences; null with fewer than two rounds "
            "that have a hit rate on both sides",
        ),
    )
    prefix_cache_gap_ci: tuple[float, float] | None = field(
        default=None,
        metadata=json(
            omit=if_none,
            doc="95% t-interval of prefix_cache_gap over the per-round differences; null with it",
        ),
    )

    def to_dict(self, *, with_outputs: bool = True) -> dict[str, Any]:
        """Plain JSON values (non-finite numbers as null); without outputs, no token ids or
        texts."""
        data = encode(self)
        if not with_outputs:
            for side in ("baseline", "speculative"):
                data[side].pop("token_ids")
                data[side].pop("texts")
        return data

    @property
    def acceptance_spread(self) -> tuple[float, float, float] | None:
        """(p10, p50, p90) of the per-prompt acceptance lengths (linear interpolation between
        order statistics), over the prompts that have one; None when none has."""
        values = sorted(v for v in self.request_acceptance or () if v is not None)
        if not values:
            return None
        return percentile(values, 10), percentile(values, 50), percentile(values, 90)

    @property
    def key(self) -> tuple[str, str]:
        """(node id, label): how results are told apart and matched across runs."""
        return self.nodeid, self.label


@dataclass(frozen=True)
class Outcome:
    """How a test judged one of its results: whether the test passed (None: skipped or not
    run) and the gate failures that name this result."""

    passed: bool | None = None
    gate_failures: tuple[str, ...] = ()


def summarized(nodeid: str, label: str, **figures: Any) -> Result:
    """A result of which a summary kept only ``figures`` (a sweep's point, a ranking's
    candidate, read back from a report without the full result beside it): every other
    figure unknown (``nan``, None, empty), no engine figures."""
    unknown = EngineFigures(math.nan, None, None, [], 0)
    values: dict[str, Any] = {
        "nodeid": nodeid, "label": label, "category": "", "target": "", "method": "",
        "num_speculative_tokens": 0, "draft": None, "speculative_config": {},
        "engine_kwargs": {}, "num_prompts": 0, "max_tokens": 0, "temperature": math.nan,
        "concurrency": None, "trials": 0, "mode": "", "memory": "", "speedup": math.nan,
        "speedup_ci": (math.nan, math.nan), "ratios": [], "acceptance_rate": math.nan,
        "mean_acceptance_length": math.nan, "acceptance_per_position": [], "num_drafts": 0,
        "num_draft_tokens": 0, "num_accepted_tokens": 0, "match_rate": math.nan,
        "divergences": [], "baseline": unknown, "speculative": unknown,
    }  # fmt: skip
    return Result(**{**values, **figures})


def entry(result: Result, outcome: Outcome | None, *, with_outputs: bool = True) -> dict[str, Any]:
    """A report entry: the result's dict and how its test judged it."""
    outcome = outcome or Outcome()
    return {
        **result.to_dict(with_outputs=with_outputs),
        "passed": outcome.passed,
        "gate_failures": list(outcome.gate_failures),
    }


def number(value: Any) -> float:
    """A figure from its dict form: ``None`` (JSON's null) is ``nan``."""
    return math.nan if value is None else float(value)
