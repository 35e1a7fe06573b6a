"""Load results for the reporting tests, built the way :meth:`Bench.load` builds them
(:func:`build_point` on timed rounds), with figures chosen so that the tests can state them."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_specdecode.engines.protocol import Counters, LoadRound, TimedRequest
from pytest_specdecode.measure.load import LoadResult, build_point

#: Output tokens per request: TPOT = (e2e - ttft) / (TOKENS - 1).
TOKENS = 33
REQUESTS = 8


def timed_round(tpot: float, ttft: float = 0.1, spread: float = 0.02) -> LoadRound:
    """:data:`REQUESTS` requests whose TPOTs rise by ``spread`` (relative) per request, with
    ``tpot`` seconds as their median, each with the first token after ``ttft`` seconds."""
    requests = []
    for i in range(REQUESTS):
        per_token = tpot * (1 + spread * (i - (REQUESTS - 1) / 2))
        e2e = ttft + per_token * (TOKENS - 1)
        requests.append(TimedRequest(float(i), float(i), ttft, e2e, (per_token,), TOKENS))
    return LoadRound(REQUESTS + 1.0, tuple(requests))


def load_result(
    points: Sequence[tuple[float, float, float]],
    *,
    nodeid: str = "suite/test_load.py::test_traffic",
    label: str = "",
    slo: Mapping[str, float] | None = None,
    target: str = "/models/tiny/target",
    method: str = "draft_model",
    draft: str | None = "/models/tiny/draft",
) -> LoadResult:
    """A load result with one point per ``(rate, baseline TPOT s, speculative TPOT s)``:
    three rounds per side, the speculative engine's p50 TPOT 4% above, at and below the one given,
    so the gain is about their ratio with a narrow interval around it; p50 TTFT is 100 ms on
    the baseline, 120 ms on the speculative engine."""
    counters = Counters(num_drafts=10, num_draft_tokens=40, num_accepted_tokens=36)
    built = tuple(
        build_point(
            rate, [timed_round(base)] * 3,
            [timed_round(spec * f, ttft=0.12, spread=0.04) for f in (1.04, 1.0, 1 / 1.04)],
            counters, dict(slo or {}),
        )
        for rate, base, spec in points
    )  # fmt: skip
    config: dict[str, Any] = {"method": method, "num_speculative_tokens": 4}
    if draft is not None:
        config["model"] = draft
    return LoadResult(
        nodeid, label, target, method, 4, TOKENS, 1.0, 0, dict(slo or {}), built, config
    )


def load_dict(points: Sequence[tuple[float, float, float]], **kwargs: Any) -> dict[str, Any]:
    """:func:`load_result` as a report holds it (through JSON)."""
    data: dict[str, Any] = json.loads(json.dumps(load_result(points, **kwargs).to_dict()))
    return data


def load_read(points: Sequence[tuple[float, float, float]], **kwargs: Any) -> LoadResult:
    """:func:`load_dict` read back as a report's reader does (``LoadResult.from_dict``)."""
    return LoadResult.from_dict(load_dict(points, **kwargs))


#: Pays at 0.5 and 2 req/s, not all at once (the gain falls to 0.95x).
CROSSING = ((0.5, 0.024, 0.012), (2.0, 0.030, 0.020), (math.inf, 0.040, 0.042))
#: Pays at every rate measured.
PAYING = ((1.0, 0.024, 0.012), (10.0, 0.030, 0.020), (100.0, 0.040, 0.030))
#: Slower at every rate measured.
SLOWER = ((1.0, 0.020, 0.025), (4.0, 0.024, 0.030))
