"""Stand-ins for engines: synthetic paired rounds, for plugin tests that need no vLLM."""

from __future__ import annotations

import math
import random
from typing import Any

from pytest_specdecode.result import SpecCounters


class FakeEngines:
    """Synthetic paired rounds with a set speedup and acceptance."""

    def __init__(self) -> None:
        self.speedup = 2.0
        self.acceptance = 0.8
        self.rng = random.Random(0)
        self.noise = 0.02  # sd of a round's log time
        self.speedup_fn: Any = None  # (k, concurrency) -> speedup, for sweeps
        self.rounds = 0  # rounds generated, over all runs
        self.draft_timings = 0

    def draft_tpot(self, *args: Any, **kwargs: Any) -> float:
        """Time per token of the draft alone: a tenth of the target's (0.001 s)."""
        self.draft_timings += 1
        return 0.0001

    def __call__(
        self, pool: Any, baseline: Any, speculative: Any, prompts: Any,
        sampling: dict[str, Any], *, trials: int, **kwargs: Any,
    ) -> dict[str, Any]:  # fmt: skip
        def rnd(elapsed: float) -> dict[str, Any]:
            reqs = [{"token_ids": [1, 2, 3, 4], "text": "abcd", "ttft": 0.01, "tpot": 0.001}]
            return {"elapsed": elapsed, "requests": reqs * len(prompts)}

        base, spec, per_round = [], [], []
        stop = kwargs.get("stop")
        speedup = self.speedup
        if self.speedup_fn is not None:
            speedup = self.speedup_fn(speculative.num_speculative_tokens, kwargs["concurrency"])
        for _ in range(trials):
            self.rounds += 1
            base.append(rnd(1.0 * math.exp(self.rng.gauss(0, self.noise))))
            spec.append(rnd(1.0 / speedup * math.exp(self.rng.gauss(0, self.noise))))
            accepted = round(400 * min(1.0, self.acceptance + self.rng.gauss(0, 0.01)))
            per_round.append(SpecCounters(100, 400, accepted, [accepted // 4] * 4))
            ratios = [b["elapsed"] / s["elapsed"] for b, s in zip(base, spec, strict=True)]
            if stop is not None and len(ratios) >= 3 and stop(ratios):
                break
        total = SpecCounters(
            sum(c.num_drafts for c in per_round), sum(c.num_draft_tokens for c in per_round),
            sum(c.num_accepted_tokens for c in per_round),
            [sum(c.accepted_per_position[i] for c in per_round) for i in range(4)],
        )  # fmt: skip
        return {"baseline": base, "speculative": spec, "counters": total,
                "round_counters": per_round, "mode": "interleaved", "memory": "fake"}  # fmt: skip
