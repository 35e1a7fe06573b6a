"""The figures one ``run()`` produces: a frozen :class:`Result` and its one dict form.

A result holds what was measured and what follows from it alone (theory, verdict); how a test
judged it (its gates, pass or fail) lives beside it, in the session's :class:`Outcome`, so
nothing changes a result after it is built. ``Result.to_dict()`` / ``Result.from_dict()``
round-trip; report, saved-run and baseline entries are that dict plus the outcome's fields.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .detectable import Detectable
from .phases import PhaseSummary
from .stats import percentile
from .verdict import Verdict, written

#: Report-entry fields that are not the result's: how the test judged it, and where it ran.
OUTCOME_FIELDS = ("passed", "gate_failures", "worker")


@dataclass(frozen=True)
class EngineFigures:
    """What one engine did over the measured rounds."""

    tokens_per_second: float
    tpot: float | None  # seconds per output token after the first, mean over requests
    ttft: float | None  # seconds to the first token, mean over requests
    seconds: list[float]  # wall time of each measured round
    generated_tokens: int  # tokens generated per round
    token_ids: list[list[int]] = field(default_factory=list)  # per prompt, last measured round
    texts: list[str] = field(default_factory=list)
    memory_gib: float | None = None  # process-group RSS (CPU) or GPU memory (NVML), raw
    kv_cache_tokens: int | None = None  # KV cache capacity vLLM allocated
    #: prompt tokens looked up in the prefix cache over the measured rounds, those found there
    #: (vLLM's counters, diffed per round) and their ratio (None: none looked up)
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    prefix_cache_hit_rate: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineFigures:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class Divergence:
    """Where the speculative output first differs from the baseline for one prompt."""

    prompt_index: int
    token_index: int
    baseline_token: int | None
    speculative_token: int | None


@dataclass(frozen=True)
class Result:
    """One paired measurement of a baseline and a speculative engine on the same prompts."""

    nodeid: str
    category: str
    target: str
    method: str
    num_speculative_tokens: int
    draft: str | None
    speculative_config: dict[str, Any]
    engine_kwargs: dict[str, Any]
    num_prompts: int
    max_tokens: int
    temperature: float
    concurrency: int | None
    trials: int
    mode: str  # "interleaved" (both engines resident, rounds A B A B) or "sequential"
    memory: str  # how engine memory was set, e.g. the GPU split
    speedup: float
    speedup_ci: tuple[float, float]
    ratios: list[float]
    acceptance_rate: float
    mean_acceptance_length: float
    acceptance_per_position: list[float]
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    match_rate: float
    divergences: list[Divergence]
    baseline: EngineFigures
    speculative: EngineFigures
    label: str = ""
    alpha: float | None = None  # per-token acceptance (per-step draft lengths, else counters)
    #: draft model step time / target step time, from inside the speculative engine: its
    #: draft proposal per drafted token over the baseline's decode step (0 without a model)
    cost_ratio: float | None = None
    predicted_speedup: float | None = None  # Leviathan's bound from alpha, k and cost_ratio
    #: measured speedup / what the measured tokens per step allow at this cost ratio
    #: (mean acceptance length / (cost_ratio * k + 1)); no i.i.d. assumption
    efficiency: float | None = None
    samples: dict[str, list[float]] = field(default_factory=dict)  # per-round figures
    #: what the speculative engine holds for its proposer: the draft's weights plus the draft's
    #: KV cache (0 without a model; process memory not counted; see ``engines/footprint.py``);
    #: the parts are in ``notes["memory"]``
    extra_memory_gib: float | None = None
    verdict: Verdict | None = None  # None: not judged (a sweep's point, an older report)
    verdict_reasons: list[str] = field(default_factory=list)
    adaptive: bool = False  # rounds were added until the interval was decisive
    inconclusive: str = ""  # why an adaptive measurement could not decide, if it could not
    notes: dict[str, Any] = field(default_factory=dict)  # free-form figures a test adds
    #: per prompt (prompt order), the mean acceptance length 1 + accepted / verify steps over
    #: the measured speculative rounds; None for a prompt without it, None altogether when the
    #: engine does not report acceptance per request
    request_acceptance: tuple[float | None, ...] | None = None
    least_gain: tuple[int, ...] = ()  # the prompts with the lowest acceptance length (<= 3)
    #: both engines' step time by phase, the break-even acceptance length and why speculation
    #: pays or not; None when any measured round has no step profile (a served engine)
    phases: PhaseSummary | None = None
    #: why ``phases`` is None on local engines, in the engines' words (e.g. "phase profile
    #: unavailable: vLLM 0.34 model runner V2 (...) has no sample"); "" where it is not None
    #: or the engine is served. The cost ratio, the break-even and the efficiency go with it.
    phases_unavailable: str = ""
    #: a saved baseline's: the smallest drop of each compared figure its rule catches with
    #: 95% probability (:mod:`~.detectable`), and the most rounds a run compared with it takes
    detectable: dict[str, Detectable] = field(default_factory=dict)
    compared_rounds: int | None = None
    #: the speculative side's prefix-cache hit rate minus the baseline's on the same requests:
    #: the mean of the per-round differences and its 95% t-interval (None: fewer than two
    #: rounds with a hit rate on both sides; :func:`~.figures.cache_gap`)
    prefix_cache_gap: float | None = None
    prefix_cache_gap_ci: tuple[float, float] | None = None

    def to_dict(self, *, with_outputs: bool = True) -> dict[str, Any]:
        """Plain JSON values (non-finite numbers as null); without outputs, no token ids or
        texts."""
        data = asdict(self)
        data["speedup_ci"] = list(self.speedup_ci)
        data["verdict"] = written(self.verdict)
        data["phases"] = None if self.phases is None else self.phases.to_dict()
        # a saved baseline's figures only (reports of other runs stay as they were)
        data["detectable"] = {k: v.to_dict() for k, v in self.detectable.items()}
        if not self.detectable:
            del data["detectable"]
        if self.compared_rounds is None:
            del data["compared_rounds"]
        # the prefix cache's figures where measured (reports from before them stay as they were)
        if self.prefix_cache_gap_ci is not None:
            data["prefix_cache_gap_ci"] = list(self.prefix_cache_gap_ci)
        else:
            del data["prefix_cache_gap"], data["prefix_cache_gap_ci"]
        for side in ("baseline", "speculative"):
            if data[side]["prefix_cache_hit_rate"] is None:
                for key in ("prefix_cache_queries", "prefix_cache_hits", "prefix_cache_hit_rate"):
                    del data[side][key]
        if not self.phases_unavailable:
            del data["phases_unavailable"]
        if not with_outputs:
            for side in ("baseline", "speculative"):
                data[side].pop("token_ids")
                data[side].pop("texts")
        plain: dict[str, Any] = finite(data)
        return plain

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Result:
        """The result a ``to_dict()`` (or a report entry) describes; outcome fields and keys
        this version does not know are ignored."""
        values = _known(cls, data)
        low, high = data["speedup_ci"]
        values["speedup_ci"] = (number(low), number(high))
        values["verdict"] = Verdict.read(data.get("verdict"))
        values["baseline"] = EngineFigures.from_dict(data["baseline"])
        values["speculative"] = EngineFigures.from_dict(data["speculative"])
        values["divergences"] = [Divergence(**d) for d in data.get("divergences") or []]
        per_prompt = data.get("request_acceptance")
        if per_prompt is not None:
            values["request_acceptance"] = tuple(
                None if v is None else float(v) for v in per_prompt
            )
        values["least_gain"] = tuple(int(i) for i in data.get("least_gain") or ())
        gap_ci = data.get("prefix_cache_gap_ci")
        values["prefix_cache_gap_ci"] = (
            None if gap_ci is None else (number(gap_ci[0]), number(gap_ci[1]))
        )
        phases = data.get("phases")
        values["phases"] = None if phases is None else PhaseSummary.from_dict(phases)
        drops = data.get("detectable") or {}
        values["detectable"] = {str(k): Detectable.from_dict(v) for k, v in drops.items()}
        return cls(**values)

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


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def number(value: Any) -> float:
    """A figure from its dict form: ``None`` (JSON's null) is ``nan``."""
    return math.nan if value is None else float(value)


def finite(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value
