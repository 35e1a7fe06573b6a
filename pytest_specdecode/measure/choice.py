"""Choosing a proposer: candidates checked before any engine starts, then ranked.

``Bench.choose_draft`` measures each candidate ``speculative_config`` against the one shared
baseline engine and returns a :class:`Ranking`: the candidates by speedup (highest first),
those whose 95% interval overlaps the fastest one's marked as tied, and the best one worth it
(or none, and why).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..engines.config import EngineConfig
from ..errors import ConfigError, GateError
from .model import Derived, Form, Key, encode, finite, json
from .result import Result, number, summarized
from .verdict import Verdict, written

CANDIDATES_EXAMPLE = (
    'e.g. {"ngram": {"method": "ngram", "num_speculative_tokens": 4}, '
    '"small": {"method": "draft_model", "model": "/models/draft", "num_speculative_tokens": 4}}'
)


def candidate_configs(
    candidates: Any, target: EngineConfig, *, served: bool
) -> dict[str, EngineConfig]:
    """Each candidate's speculative engine on ``target``'s model and engine arguments, every
    one validated like a Bench's own configuration (shape, the installed vLLM's fields, model
    folders, draft/target compatibility) before any engine starts; errors name the candidate."""
    if served:
        raise ConfigError(
            "choose_draft: the engines are two running servers, whose speculative "
            "configuration is the server's; compare candidates on local engines (no "
            "baseline_url/speculative_url), or measure each server with run()"
        )
    if not isinstance(candidates, Mapping) or not candidates:
        raise ConfigError(
            "choose_draft(candidates=...): expected a non-empty dict from a name to a "
            f"speculative_config, got {candidates!r:.80}; {CANDIDATES_EXAMPLE}"
        )
    configs: dict[str, EngineConfig] = {}
    for name, spec in candidates.items():
        where = f"choose_draft(candidates[{name!r}])"
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}: a candidate's name must be a non-empty string")
        if not isinstance(spec, Mapping) or not spec:
            raise ConfigError(
                f"{where}: expected a speculative_config dict, got {spec!r:.80}; "
                f"{CANDIDATES_EXAMPLE}"
            )
        config = EngineConfig.create(target.target, dict(spec), target.engine_kwargs)
        config.check_speculative_config(where)
        configs[name] = config
    return configs


_NUMBER_OR_NULL = Key(schema={"$ref": "#/$defs/number_or_null"}, replace=True)


def _figures(*names: str) -> tuple[Derived, ...]:
    """The result's figures a ranking keeps of each candidate, each after the one before."""
    keys = {
        "speedup": _NUMBER_OR_NULL,
        "speedup_ci": Key(schema={"$ref": "#/$defs/interval"}, replace=True),
        "acceptance_rate": _NUMBER_OR_NULL,
        "mean_acceptance_length": _NUMBER_OR_NULL,
    }
    order = ("name", *names)
    return tuple(
        Derived(f"result.{n}", None, order[i], keys.get(n) or Key(**_key(Result, n)))
        for i, n in enumerate(names)
    )


def _key(cls: type, name: str) -> dict[str, Any]:
    """The JSON options of field ``name`` of ``cls`` (its write, read and schema)."""
    found = next(f for f in dataclasses.fields(cls) if f.name == name).metadata.get("json")
    return {} if found is None else {k: getattr(found, k) for k in ("write", "schema", "replace")}


@dataclass(frozen=True)
class Candidate:
    """One candidate's place in a :class:`Ranking`: its name, its result, and whether its
    speedup's 95% interval overlaps the fastest candidate's (``tied``)."""

    JSON = Form(
        "candidate",
        derived=_figures(
            "label", "method", "draft", "num_speculative_tokens", "speedup", "speedup_ci",
            "acceptance_rate", "mean_acceptance_length", "alpha", "cost_ratio",
            "extra_memory_gib", "verdict", "verdict_reasons",
        ),
        required=("speedup", "speedup_ci", "tied"),
        inline=True,
    )  # fmt: skip

    name: str
    result: Result = field(metadata=json(hidden=True))
    tied: bool = False

    @property
    def speedup(self) -> float:
        return self.result.speedup

    @property
    def speedup_ci(self) -> tuple[float, float]:
        return self.result.speedup_ci

    @property
    def verdict(self) -> Verdict | None:
        return self.result.verdict

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (:func:`~.model.encode`): the name, the result's figures a
        ranking keeps, and ``tied``."""
        return encode(self)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        nodeid: str = "",
        results: Mapping[tuple[str, str], Result] | None = None,
    ) -> Candidate:
        """The candidate a :meth:`to_dict` describes: its result is the one in ``results``
        (by key: ``nodeid`` and the candidate's label) whose figures are the candidate's;
        else one that holds only those figures (:func:`~.result.summarized`)."""
        name, label, tied = str(data["name"]), str(data.get("label") or ""), bool(data["tied"])
        full = (results or {}).get((nodeid, label))
        if full is not None and finite(cls(name, full, tied).to_dict()) == finite(dict(data)):
            return cls(name, full, tied)
        low, high = data["speedup_ci"]
        draft = data.get("draft")
        result = summarized(
            nodeid, label, method=str(data.get("method") or ""),
            draft=None if draft is None else str(draft),
            num_speculative_tokens=int(data.get("num_speculative_tokens") or 0),
            speedup=number(data["speedup"]), speedup_ci=(number(low), number(high)),
            acceptance_rate=number(data.get("acceptance_rate")),
            mean_acceptance_length=number(data.get("mean_acceptance_length")),
            alpha=_optional(data.get("alpha")), cost_ratio=_optional(data.get("cost_ratio")),
            extra_memory_gib=_optional(data.get("extra_memory_gib")),
            verdict=Verdict.read(data.get("verdict")),
            verdict_reasons=[str(r) for r in data.get("verdict_reasons") or []],
        )  # fmt: skip
        return cls(name, result, tied)


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)


def _overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals share a point (an unknown bound overlaps nothing)."""
    return a[0] <= b[1] and b[0] <= a[1]


def _order(item: tuple[str, Result]) -> tuple[bool, float]:
    speedup = item[1].speedup
    return (not math.isfinite(speedup), -speedup if math.isfinite(speedup) else 0.0)


@dataclass(frozen=True)
class Ranking:
    """Results of ``choose_draft``: one :class:`Candidate` per candidate, highest speedup
    first. ``tied`` names the candidates whose 95% interval overlaps the fastest one's;
    ``best`` is the fastest candidate whose verdict is "worth it", or None (``reason`` says
    why)."""

    JSON = Form(
        "ranking",
        derived=(
            Derived("best", str | None, "candidates"),
            Derived("tied", list[str], "best"),
            Derived("reason", str, "tied"),
        ),
    )

    nodeid: str = field(metadata=json(schema={"minLength": 1}))
    candidates: tuple[Candidate, ...]

    @classmethod
    def of(cls, nodeid: str, results: Mapping[str, Result]) -> Ranking:
        """Rank ``results`` (candidate name -> result) by speedup."""
        ordered = sorted(results.items(), key=_order)
        if not ordered:
            return cls(nodeid, ())
        top = ordered[0][1].speedup_ci
        ranked = [Candidate(ordered[0][0], ordered[0][1])] + [
            Candidate(name, r, tied=_overlaps(top, r.speedup_ci)) for name, r in ordered[1:]
        ]
        return cls(nodeid, tuple(ranked))

    def __getitem__(self, name: str) -> Candidate:
        for candidate in self.candidates:
            if candidate.name == name:
                return candidate
        known = ", ".join(c.name for c in self.candidates)
        raise KeyError(f"no candidate {name!r} in this ranking; candidates: {known}")

    @property
    def names(self) -> list[str]:
        """Candidate names, highest speedup first."""
        return [c.name for c in self.candidates]

    @property
    def tied(self) -> list[str]:
        """Candidates whose speedup's 95% interval overlaps the fastest one's."""
        return [c.name for c in self.candidates if c.tied]

    @property
    def best(self) -> str | None:
        """The fastest candidate whose verdict is "worth it"; None when none is."""
        return next((c.name for c in self.candidates if c.verdict == Verdict.WORTH), None)

    @property
    def reason(self) -> str:
        """Why ``best`` is what it is, in words."""
        if not self.candidates:
            return "no candidates were measured"
        top, best = self.candidates[0], self.best
        if best is None:
            return f"none is worth it: the fastest, {_figure(top)}, is {written(top.verdict)}"
        if best == top.name:
            ties = f"; tied within the 95% interval: {', '.join(self.tied)}" if self.tied else ""
            return f"{_figure(top)} is the fastest and worth it{ties}"
        return (
            f"{_figure(self[best])} is the fastest worth it; {_figure(top)} is faster but "
            f"{written(top.verdict)}"
        )

    def assert_best(self, name: str, *, within: float = 0.05) -> None:
        """CI gate: fail unless the chosen candidate ``name`` is still the fastest, or its
        speedup is at most ``within`` (relative: 0.05 is 5%) below the fastest one's, and it is
        not "not worth it" (its interval below 1.0, or over a memory gate).

        Raises :class:`~pytest_specdecode.errors.GateError` naming both speedups and the
        tolerance; an unknown name or a bad tolerance is a ``ConfigError``."""
        __tracebackhide__ = True
        if isinstance(within, bool) or not isinstance(within, int | float) or not 0 <= within < 1:
            raise ConfigError(
                f"assert_best(within=...): expected a relative tolerance from 0 to below 1 "
                f"(0.05 is 5%), got {within!r}"
            )
        if name not in self.names:
            raise ConfigError(
                f"assert_best({name!r}): no candidate of that name in {self.nodeid}; "
                f"candidates: {', '.join(self.names) or 'none'}"
            )
        chosen, top = self[name], self.candidates[0]
        key = getattr(chosen.result, "key", None)
        floor = top.speedup * (1 - within)
        if not chosen.speedup >= floor:
            raise GateError(
                f"{self.nodeid}: the chosen draft {_figure(chosen)} is no longer the best: "
                f"{_figure(top)} is faster, and {name}'s {chosen.speedup:.2f}x is more than "
                f"{within * 100:g}% below its {top.speedup:.2f}x (at least {floor:.2f}x needed). "
                f"Ranking: {', '.join(_figure(c) for c in self.candidates)}",
                key,
            )
        if chosen.verdict == Verdict.NOT_WORTH:
            reasons = "; ".join(getattr(chosen.result, "verdict_reasons", ()) or ())
            raise GateError(
                f"{self.nodeid}: the chosen draft {_figure(chosen)} is "
                f"{'the fastest' if chosen is top else f'within {within * 100:g}% of the fastest'} "
                f"but not worth it{f': {reasons}' if reasons else ''}",
                key,
            )

    def summary(self) -> str:
        """One line: the candidates in order, ties marked, and the choice; the ranking's only
        wording (the reports print it too)."""
        ranked = ", ".join(_figure(c) + (" (tied)" if c.tied else "") for c in self.candidates)
        choice = f"best: {self.best}" if self.best is not None else self.reason
        return f"{self.nodeid}: draft ranking: {ranked}; {choice}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (:func:`~.model.encode`)."""
        return encode(self)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], results: Mapping[tuple[str, str], Result] | None = None
    ) -> Ranking:
        """The ranking a :meth:`to_dict` describes, in its order (derived keys are
        recomputed); ``results``: the report's, for each candidate's whole result
        (:meth:`Candidate.from_dict`)."""
        nodeid = str(data["nodeid"])
        return cls(
            nodeid, tuple(Candidate.from_dict(c, nodeid, results) for c in data["candidates"])
        )


def _figure(candidate: Candidate) -> str:
    """``small 1.80x (1.70-1.90x)``; a figure not known (NaN: a report's null) is ``-``."""
    low, high = candidate.speedup_ci
    return f"{candidate.name} {_two(candidate.speedup)}x ({_two(low)}-{_two(high)}x)"


def _two(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"
