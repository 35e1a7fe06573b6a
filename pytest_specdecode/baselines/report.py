"""A JSON report as typed objects, read and checked once: :class:`Report`.

``Report.from_dict(data, where)`` checks ``data`` (what :func:`~.files.load` checks: finite
numbers, the format version, the JSON schema, which :func:`report_schema` generates from the
records, so it also requires every field a
:class:`~pytest_specdecode.measure.result.Result` has no default for) and builds the objects;
any problem is a :class:`~pytest_specdecode.errors.ConfigError` naming ``where`` and the path
of the bad value. ``Report.to_dict()`` gives the dict back: for a report this version
wrote (or a saved run, a baseline, a pytest-xdist worker's results), the same dict; for an
older one, that dict with the keys it lacked filled in.

The environment, the session part and the checklist stay data (dicts); the checklist is made
from the results (:func:`~pytest_specdecode.reporting.checklist.checklists`) and is kept as
read.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ConfigError
from ..measure.choice import Ranking
from ..measure.detectable import Detectable
from ..measure.equivalence import DistributionCheck
from ..measure.kschedule import ScheduleCheck
from ..measure.load import LoadResult
from ..measure.model import DRAFT, schema, type_schema
from ..measure.result import Outcome, Result
from ..measure.sequential import Session
from ..measure.sweep import Sweep
from .compare import Verdict, result_key
from .files import FORMAT_VERSION, PRODUCTS, _non_finite_at, _path_text, results_schema

#: Keys of a report entry that are neither the result's nor its outcome's, kept typed: a
#: saved run's or baseline's environment of the result and its saving sessions.
_STORED = ("environment", "sessions")
#: Keys of a report that :class:`Report` holds in fields of their own.
_KNOWN = ("format_version", "results", "environment", "session", *PRODUCTS, "comparisons",
          "checklist")  # fmt: skip
_SIDES = ("baseline", "speculative")
_OUTPUTS = ("token_ids", "texts")


@dataclass(frozen=True)
class ReportEntry:
    """One entry of a report's ``results``: the result, how its test judged it, and what the
    entry carries besides (:func:`~pytest_specdecode.measure.result.entry`)."""

    result: Result
    outcome: Outcome = field(default_factory=Outcome)
    #: whether the entry holds each engine's outputs (``token_ids``, ``texts``)
    with_outputs: bool = True
    #: the entry came from a pytest-xdist worker: it carries ``worker``, that worker's id
    remote: bool = False
    worker: str | None = None
    #: a saved run's or baseline's: the environment the result was measured in (None: the
    #: file's) and its saving sessions (None: not saved)
    environment: dict[str, Any] | None = None
    sessions: tuple[Session, ...] | None = None
    #: keys this version does not know (from a newer one), kept as they were
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return self.result.key

    def to_dict(self) -> dict[str, Any]:
        data = copy.deepcopy(self.extra)
        data.update(
            self.result.to_dict(with_outputs=self.with_outputs),
            passed=self.outcome.passed,
            gate_failures=list(self.outcome.gate_failures),
        )
        if self.remote:
            data["worker"] = self.worker
        if self.environment is not None:
            data["environment"] = copy.deepcopy(self.environment)
        if self.sessions is not None:
            data["sessions"] = [s.to_dict() for s in self.sessions]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReportEntry:
        """The entry ``data`` describes (checked by :meth:`Report.from_dict`)."""
        known = {f.name for f in fields(Result)} | {"passed", "gate_failures", "worker"}
        sessions = data.get("sessions")
        environment = data.get("environment")
        return cls(
            result=Result.from_dict(data),
            outcome=Outcome(data.get("passed"), tuple(data.get("gate_failures") or ())),
            with_outputs=all(k in data[side] for side in _SIDES for k in _OUTPUTS),
            remote="worker" in data,
            worker=data.get("worker"),
            environment=None if environment is None else copy.deepcopy(dict(environment)),
            sessions=None if sessions is None else tuple(Session.from_dict(s) for s in sessions),
            extra={k: copy.deepcopy(v) for k, v in data.items() if k not in known | {*_STORED}},
        )


@dataclass(frozen=True)
class Report:
    """A report (``--specdecode-report``), saved run or baseline: its results with their
    outcomes, what the tests made besides (sweeps, rankings, distribution checks, loads,
    schedule checks; absent from the file when empty), the comparison verdicts (None: not
    compared), and the environment, session and checklist as data."""

    results: tuple[ReportEntry, ...]
    environment: dict[str, Any]
    session: dict[str, Any] | None = None
    sweeps: tuple[Sweep, ...] = ()
    rankings: tuple[Ranking, ...] = ()
    distribution_checks: tuple[DistributionCheck, ...] = ()
    loads: tuple[LoadResult, ...] = ()
    schedule_checks: tuple[ScheduleCheck, ...] = ()
    comparisons: tuple[Verdict, ...] | None = None
    checklist: list[dict[str, Any]] | None = None
    #: top-level keys this version does not know (from a newer one), kept as they were
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def result_objects(self) -> list[Result]:
        """Every entry's result, in report order."""
        return [e.result for e in self.results]

    def result(self, nodeid: str, label: str = "") -> Result | None:
        """The result of that key (node id, label), None when the report has none."""
        return next((e.result for e in self.results if e.key == (nodeid, label)), None)

    def detectable(self, entry: ReportEntry) -> dict[str, Detectable]:
        """What each compared figure of ``entry`` could catch: the comparison's, where this
        run was compared with a baseline, else the result's own (a saved baseline's)."""
        found = dict(entry.result.detectable)
        key = result_key(entry)
        for verdict in self.comparisons or ():
            if verdict.key == key and verdict.detectable is not None:
                found[verdict.figure] = verdict.detectable
        return found

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON data (what :meth:`from_dict` read, for a report this version
        wrote)."""
        data: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "results": [e.to_dict() for e in self.results],
            "environment": copy.deepcopy(self.environment),
        }
        if self.session is not None:
            data["session"] = copy.deepcopy(self.session)
        for kind in PRODUCTS:
            products: tuple[Any, ...] = getattr(self, kind)
            if products:
                data[kind] = [p.to_dict() for p in products]
        if self.comparisons is not None:
            data["comparisons"] = [v.to_dict() for v in self.comparisons]
        if self.checklist is not None:
            data["checklist"] = copy.deepcopy(self.checklist)
        for key, value in self.extra.items():
            data.setdefault(key, copy.deepcopy(value))
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Report:
        """The report ``data`` describes, checked: a :class:`ConfigError` naming ``where``
        (e.g. the file) and the path of the first bad value."""
        check(data, where)
        results = tuple(_each(data, "results", where, ReportEntry.from_dict))
        by_key: dict[tuple[str, str], Result] = {}
        for e in results:
            by_key.setdefault(e.key, e.result)
        comparisons = data.get("comparisons")
        checklist = data.get("checklist")
        session = data.get("session")
        return cls(
            results=results,
            environment=copy.deepcopy(dict(data["environment"])),
            session=None if session is None else copy.deepcopy(dict(session)),
            sweeps=_each(data, "sweeps", where, lambda d: Sweep.from_dict(d, by_key)),
            rankings=_each(data, "rankings", where, lambda d: Ranking.from_dict(d, by_key)),
            distribution_checks=_each(
                data, "distribution_checks", where, DistributionCheck.from_dict
            ),
            loads=_each(data, "loads", where, LoadResult.from_dict),
            schedule_checks=_each(data, "schedule_checks", where, ScheduleCheck.from_dict),
            comparisons=None
            if comparisons is None
            else _each(data, "comparisons", where, Verdict.from_dict),
            checklist=None if checklist is None else copy.deepcopy(list(checklist)),
            extra={k: copy.deepcopy(v) for k, v in data.items() if k not in _KNOWN},
        )


def _each(data: Mapping[str, Any], kind: str, where: str, build: Any) -> tuple[Any, ...]:
    """``build`` of each item of ``data[kind]`` (none when absent); what the checks let
    through but the item's type refuses is a :class:`ConfigError` naming the item."""
    built = []
    for i, item in enumerate(data.get(kind) or []):
        try:
            built.append(build(item))
        except (KeyError, TypeError, ValueError, IndexError, ConfigError) as exc:
            problem = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ConfigError(f"{where}: invalid at {kind}/{i}: {problem}") from None
    return tuple(built)


def check(data: Any, where: str) -> None:
    """Refuse what is not a report this version can read, naming ``where`` and the path of
    the bad value: not an object, a NaN or infinite number, another format version, or what
    the JSON schema (:func:`report_schema`, from the records) refuses."""
    import jsonschema

    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{where}: invalid at top level: expected a JSON object (a report), got "
            f"{type(data).__name__}"
        )
    non_finite = _non_finite_at(data)
    if non_finite is not None:
        at, literal = non_finite
        raise ConfigError(
            f"{where}: invalid at {_path_text(at)}: {literal} is not a finite number (JSON "
            "has no NaN or Infinity; an unknown figure is null)"
        )
    if data.get("format_version") not in (None, FORMAT_VERSION):
        raise ConfigError(
            f"{where}: format_version {data.get('format_version')!r} is not supported by this "
            f"pytest-specdecode (reads version {FORMAT_VERSION})"
        )
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(results_schema()).iter_errors(data)
    )
    if error is not None:
        raise ConfigError(f"{where}: invalid at {_path_text(error.absolute_path)}: {error.message}")


#: Definitions the records refer to that are no record's own.
_SHARED: dict[str, Any] = {
    "environment": {
        "description": "What a run was measured on: vLLM, torch, device, model identities (a "
        "hash of a local model's config and weights).",
        "type": "object",
        "properties": {
            "vllm": {"type": ["string", "null"]},
            "torch": {"type": ["string", "null"]},
            "device": {"type": "object"},
            "models": {"type": "object"},
        },
    },
    "interval": {
        "description": "95% interval: [low, high]",
        "type": "array", "items": {"$ref": "#/$defs/number_or_null"}, "minItems": 2,
        "maxItems": 2,
    },
    "number_or_null": {"type": ["number", "null"]},
    "rate": {
        "description": 'requests per second; "inf": all at once',
        "anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"const": "inf"}],
    },
    "percentiles": {
        "description": "seconds at the 50th, 90th and 99th percentile; null when no request had "
        "the figure",
        "type": ["object", "null"],
        "properties": {q: {"type": "number", "minimum": 0} for q in ("50", "90", "99")},
        "required": ["50", "90", "99"],
        "additionalProperties": False,
    },
}  # fmt: skip

#: What a report entry holds besides its result's keys (:class:`ReportEntry`).
_ENTRY: dict[str, Any] = {
    "passed": {"type": ["boolean", "null"]},
    "gate_failures": {"type": "array", "items": {"type": "string"}},
    "worker": {"type": ["string", "null"]},
    "environment": {
        "description": "the environment this result was measured in (each result of a saved "
        "run or baseline carries one; an entry kept from an earlier run keeps its own); absent: "
        "the file's top-level environment",
        "$ref": "#/$defs/environment",
    },
    "sessions": {
        "description": "saving sessions of this result (newest last): mean and variance of the "
        "log ratios and the rounds; their spread gives the between-session variance",
    },
}

#: Each list a report holds besides its results: the record of an item, and what it is.
_LISTS: dict[str, tuple[type, str]] = {
    "comparisons": (Verdict, "A compared run's verdicts (--specdecode-compare; compare --json): "
                    "one entry per result key and figure, and one per new or missing result."),
    "loads": (LoadResult, ""),
    "sweeps": (Sweep, ""),
    "schedule_checks": (ScheduleCheck, ""),
    "rankings": (Ranking, "Draft rankings (specdecode.choose_draft / Bench.choose_draft)."),
    "distribution_checks": (DistributionCheck, ""),
}  # fmt: skip


def report_schema() -> dict[str, Any]:
    """The JSON Schema of report, saved-run and baseline files, generated from the records
    (:mod:`~pytest_specdecode.measure.model`); ``scripts/render_schema.py`` writes it to
    ``schemas/results.schema.json``, which a test keeps equal to it."""
    defs: dict[str, Any] = copy.deepcopy(_SHARED)
    result = schema(Result, defs)
    defs["result"]["properties"].update(copy.deepcopy(_ENTRY))
    defs["result"]["properties"]["sessions"].update(type_schema(tuple[Session, ...], defs))
    properties: dict[str, Any] = {
        "format_version": {"const": FORMAT_VERSION},
        "results": {"type": "array", "items": result},
        "environment": {
            "description": "The environment of the run that wrote the file (in a saved run or "
            "baseline, the newest saving run's; each result there carries its own).",
            "$ref": "#/$defs/environment",
        },
        "session": {
            "type": "object",
            "properties": {
                "started": {
                    "description": "When the session started: ISO 8601 with its UTC offset "
                    "(reports from before it have none).",
                    "type": "string",
                }
            },
        },
    }
    for kind, (record, doc) in _LISTS.items():
        items = schema(record, defs)
        properties[kind] = {**({"description": doc} if doc else {}), "type": "array",
                            "items": items}  # fmt: skip
    properties["checklist"] = {"type": "array", "items": {"type": "object"}}
    return {
        "$schema": DRAFT,
        "$id": "pytest-specdecode/results.schema.json",
        "title": "pytest-specdecode results (report, saved run and baseline files), format "
        f"version {FORMAT_VERSION}",
        "description": "Every number is finite: JSON has no NaN or Infinity, and the reader "
        "refuses them; a figure that could not be measured is null. Generated from the report "
        "model (scripts/render_schema.py); do not edit.",
        "type": "object",
        "required": ["format_version", "results", "environment"],
        "properties": properties,
        "$defs": dict(sorted(defs.items())),
    }


def schema_text() -> str:
    """:func:`report_schema` as ``schemas/results.schema.json`` holds it."""
    return json.dumps(report_schema(), indent=2, ensure_ascii=False) + "\n"
