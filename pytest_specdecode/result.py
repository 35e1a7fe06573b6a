"""The figures one ``specdecode.run()`` produces, as plain data."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class EngineFigures:
    """What one engine did over the measured rounds."""

    tokens_per_second: float
    tpot: float | None  # seconds per output token after the first, mean over requests
    ttft: float | None  # seconds to the first token, mean over requests
    seconds: list[float]  # wall time of each measured round
    generated_tokens: int  # tokens generated per round
    token_ids: list[list[int]]  # per prompt, from the last measured round
    texts: list[str]
    memory_gib: float | None = None  # process-group RSS (CPU) or GPU memory (NVML)
    kv_cache_tokens: int | None = None  # KV cache capacity vLLM allocated


@dataclass
class Divergence:
    """Where the speculative output first differs from the baseline for one prompt."""

    prompt_index: int
    token_index: int
    baseline_token: int | None
    speculative_token: int | None


@dataclass
class SpecCounters:
    """A before/after delta of vLLM's speculative-decoding counters."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)

    @classmethod
    def delta(cls, before: dict[str, Any], after: dict[str, Any]) -> SpecCounters:
        b_pos = list(before.get("accepted_per_position", []))
        a_pos = list(after.get("accepted_per_position", []))
        b_pos += [0] * (len(a_pos) - len(b_pos))
        return cls(
            num_drafts=after["num_drafts"] - before["num_drafts"],
            num_draft_tokens=after["num_draft_tokens"] - before["num_draft_tokens"],
            num_accepted_tokens=after["num_accepted_tokens"] - before["num_accepted_tokens"],
            accepted_per_position=[a - b for a, b in zip(a_pos, b_pos, strict=False)],
        )

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


@dataclass
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
    alpha: float | None = None  # per-token acceptance (MLE from per-position counts)
    cost_ratio: float | None = None  # draft step time / target step time (measured)
    predicted_speedup: float | None = None  # Leviathan's bound from alpha, k and cost_ratio
    efficiency: float | None = None  # measured speedup / predicted speedup
    samples: dict[str, list[float]] = field(default_factory=dict)  # per-round figures
    extra_memory_gib: float | None = None  # speculative engine's memory beyond the baseline's
    verdict: str = ""  # "worth it", "not worth it" or "inconclusive"
    verdict_reasons: list[str] = field(default_factory=list)
    adaptive: bool = False  # rounds were added until the interval was decisive
    inconclusive: str = ""  # why an adaptive measurement could not decide, if it could not
    notes: dict[str, Any] = field(default_factory=dict)  # free-form figures a test adds
    passed: bool | None = None
    gate_failures: list[str] = field(default_factory=list)

    def to_dict(self, *, with_outputs: bool = True) -> dict[str, Any]:
        data = asdict(self)
        data["speedup_ci"] = list(self.speedup_ci)
        if not with_outputs:
            for side in ("baseline", "speculative"):
                data[side].pop("token_ids")
                data[side].pop("texts")
        finite: dict[str, Any] = _finite(data)
        return finite


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
