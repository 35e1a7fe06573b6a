"""Hand-built phase figures in the shape of the contract (``results[i]["phases"]``,
``PhaseSummary.to_dict()``), for the renderers' tests: a report needs no engine and no
measure layer to show them; :func:`typed` reads such a report as the renderers take it."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_specdecode.baselines.report import Report, ReportEntry
from pytest_specdecode.measure.result import EngineFigures, summarized


def step(
    steps: float = 21, prepare: float = 0.3, forward: float = 4.1, sample: float = 0.5,
    draft: float = 2.9, other: float = 0.1,
) -> dict[str, Any]:  # fmt: skip
    """One engine's steps of one kind: mean ms per step by phase, ``step_ms`` their sum."""
    parts = {"prepare_ms": prepare, "forward_ms": forward, "sample_ms": sample,
             "draft_ms": draft, "other_ms": other}  # fmt: skip
    return {"steps": steps, "step_ms": round(sum(parts.values()), 6), **parts}


def empty_step() -> dict[str, Any]:
    """A kind with no steps: every ``*_ms`` null."""
    return {"steps": 0, "step_ms": None, "prepare_ms": None, "forward_ms": None,
            "sample_ms": None, "draft_ms": None, "other_ms": None}  # fmt: skip


#: The baseline decode step of the contract's example: 3.8 ms, no draft.
BASE = step(64, prepare=0.2, forward=3.4, sample=0.1, draft=0.0, other=0.1)
#: The speculative decode step of the contract's example: 7.9 ms (its steps a round follow
#: the acceptance length in :func:`phases`).
SPEC = step(19)


def phases(
    *,
    base: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
    break_even: float | None = 2.1,
    break_even_ci: list[float | None] | None = None,
    acceptance: float | None = 3.4,
    acceptance_ci: list[float | None] | None = None,
    clock: str = "wall",
    explanation: str = "draft proposal is 37% of each speculative step",
    runner: str = "V1",
) -> dict[str, Any]:
    """A result's ``phases`` dict; by default the contract's example (7.9 ms against 3.8 ms,
    break-even 2.1 [1.9-2.3], measured 3.4 [3.2-3.6]). Without ``spec`` the speculative
    engine takes as many decode steps as the acceptance length allows (the baseline's over
    it), so the tokens each step yields equal the acceptance length."""
    base = copy.deepcopy(BASE if base is None else base)
    if spec is None:
        spec = copy.deepcopy(SPEC)
        if acceptance:
            spec["steps"] = base["steps"] / acceptance
    spec = copy.deepcopy(spec)
    return {
        "clock": clock,
        "baseline": {"decode": base, "prefill": step(1, 1.0, 20.0, 0.2, 0.0, 0.3)},
        "speculative": {"decode": spec, "prefill": step(1, 1.1, 21.0, 0.2, 3.0, 0.4)},
        "break_even_length": break_even,
        "break_even_ci": [1.9, 2.3] if break_even_ci is None else break_even_ci,
        "acceptance_length": acceptance,
        "acceptance_length_ci": [3.2, 3.6] if acceptance_ci is None else acceptance_ci,
        "draft_share": 0.37,
        "verify_cost": 1.21,
        "explanation": explanation,
        "runner": runner,
    }


def result(
    test: str = "test_a", label: str = "", category: str = "structured", **more: Any
) -> dict[str, Any]:
    """A report entry with the fields the renderers read, and the contract's phases."""
    entry = {
        "nodeid": f"suite/test_{category}.py::{test}", "label": label, "category": category,
        "target": "/models/tiny/target", "method": "draft_model", "draft": "/models/tiny/draft",
        "num_speculative_tokens": 4, "speedup": 1.8, "speedup_ci": [1.7, 1.9], "ratios": [1.8],
        "acceptance_rate": 0.6, "mean_acceptance_length": 3.4,
        "acceptance_per_position": [0.9, 0.7, 0.5, 0.3], "match_rate": 1.0, "num_prompts": 4,
        "concurrency": None, "max_tokens": 64, "verdict": "worth it", "cost_ratio": 0.12,
        "baseline": {"tokens_per_second": 100.0}, "speculative": {"tokens_per_second": 180.0},
        "phases": phases(),
    }  # fmt: skip
    entry.update(more)
    return entry


def sweep(with_phases: bool = True) -> dict[str, Any]:
    """A sweep of k 2 and 4 at concurrency 1, 8 and 32: the break-even rises with the
    concurrency and overtakes the acceptance length at 32 for k=4."""
    points = []
    for k, acceptance in ((2, 2.6), (4, 3.4)):
        for c, be in ((1, 1.4 + 0.1 * k), (8, 1.9 + 0.1 * k), (32, 3.0 + 0.2 * k)):
            speedup = acceptance / be
            point: dict[str, Any] = {
                "num_speculative_tokens": k, "concurrency": c, "speedup": speedup,
                "speedup_ci": [speedup * 0.95, speedup * 1.05], "acceptance_rate": 0.7,
            }  # fmt: skip
            if with_phases:
                point["phases"] = phases(
                    break_even=be, break_even_ci=[be * 0.93, be * 1.07], acceptance=acceptance,
                    acceptance_ci=[acceptance - 0.2, acceptance + 0.2],
                )  # fmt: skip
            points.append(point)
    return {"nodeid": "suite/test_sweep.py::test_sweep", "points": points,
            "best_k": {"1": 4, "8": 4, "32": 4}, "crossover": None}  # fmt: skip


def report(results: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    """A whole report dict around ``results`` (each completed: :func:`complete`, as the
    schema needs every field a result has no default for)."""
    whole = [complete(r) for r in results]
    return {"format_version": 1, "results": whole, "environment": {}, **more}


# --- the typed report model (Report.from_dict), which the renderers take -------------------

#: What an entry leaves out: an unknown figure (null; a figure the schema needs: no gain, no
#: acceptance), an empty list, no engine figures.
_NEUTRAL = summarized(
    "", "", trials=1, num_prompts=4, max_tokens=64, temperature=0.0, mode="interleaved",
    memory="test", speedup=1.0, acceptance_rate=0.0, mean_acceptance_length=1.0,
    match_rate=1.0, baseline=EngineFigures(0.0, None, None, [], 0),
    speculative=EngineFigures(0.0, None, None, [], 0),
).to_dict()  # fmt: skip


def complete(data: Mapping[str, Any]) -> dict[str, Any]:
    """A report entry holding what ``data`` (one with only the fields a test reads) holds,
    every other field of a result unknown or empty; each engine's figures merged likewise."""
    entry = {**copy.deepcopy(_NEUTRAL), "passed": None, "gate_failures": []}
    for key, value in data.items():
        if key in ("baseline", "speculative"):
            entry[key] = {**entry[key], **copy.deepcopy(value)}
        else:
            entry[key] = copy.deepcopy(value)
    return entry


def typed(data: Mapping[str, Any]) -> Report:
    """The report ``data`` describes, read as the renderers take it (``Report.from_dict``),
    each entry completed (:func:`complete`)."""
    full = {"format_version": 1, "environment": {}, **data}
    full["results"] = [complete(r) for r in data.get("results") or []]
    return Report.from_dict(full, "test")


def entries(results: Sequence[Mapping[str, Any]]) -> list[ReportEntry]:
    """Report entries of ``results`` (each completed: :func:`complete`)."""
    return list(typed({"results": list(results)}).results)


def entry(data: Mapping[str, Any]) -> ReportEntry:
    """One report entry of ``data`` (completed: :func:`complete`)."""
    (found,) = entries([data])
    return found
