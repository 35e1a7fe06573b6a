"""Comparing results with a saved baseline.

The speedup is judged by the sequential rule of :mod:`~pytest_specdecode.measure.sequential`
(:func:`~pytest_specdecode.measure.sequential.decide`): "no change" against "a drop of twice
the tolerance", replayed over the new run's rounds in the order measured, with the drop's
estimate also beyond the tolerance. The default tolerances are
``speedup:5%,acceptance_rate:5%``, both relative (an amount without ``%``, such as
``acceptance_rate:0.05``, is absolute).

Every other figure keeps the two-gate rule: a drop beyond the tolerance that is also
significant given both runs' per-round data (one-sided Welch t-test, on log values for ratios
and rates of tokens, p < ``ALPHA``). Improvements are reported the same way, mirrored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import PurePath
from typing import Any, Generic, Protocol, TypeVar

from ..errors import ConfigError
from ..figure_table import figure as figure_row
from ..figure_table import finite
from ..measure.detectable import Detectable, figure_drop, relative_tolerance, speedup_drop
from ..measure.model import Derived, Form, Key, encode, json
from ..measure.result import Result
from ..measure.sequential import Reference, Session, decide
from ..measure.stats import proportion_less, welch_less
from ..settings import BY_NAME, MIN_BASELINE_ROUNDS
from ..tolerances import DEFAULT_TOLERANCES, FIGURES, Tolerance, parse_tolerances

__all__ = [
    "ALPHA",
    "DEFAULT_TOLERANCES",
    "FIGURES",
    "Entry",
    "Matching",
    "ResultKey",
    "StoredResults",
    "Tolerance",
    "Verdict",
    "ConfigurationChange",
    "check_baseline_rounds",
    "check_speedup_amount",
    "check_unique_keys",
    "compare_one",
    "compare_runs",
    "comparison_entries",
    "configuration_changes",
    "environment_change_lines",
    "environment_differences",
    "environments_differing",
    "nothing_compared",
    "own_environment",
    "parse_tolerances",
    "reference_of",
    "result_key",
    "too_few_rounds",
    "verdicts_for",
]

#: Significance level of the one-sided test of the figures other than the speedup.
ALPHA = 0.01


class Entry(Protocol):
    """What a comparison reads of a report entry (a :class:`~.report.ReportEntry`, which
    imports this module for :class:`Verdict`): its result, and for a stored one its own
    environment (None: its file's) and saving sessions (None: not saved)."""

    @property
    def result(self) -> Result: ...

    @property
    def environment(self) -> dict[str, Any] | None: ...

    @property
    def sessions(self) -> tuple[Session, ...] | None: ...

    @property
    def key(self) -> tuple[str, str]: ...


#: What is matched across runs: a report's entries (:class:`~.report.ReportEntry`), or a
#: file's entries as data where files are merged (:mod:`~.files`).
E = TypeVar("E", Entry, Mapping[str, Any])


@dataclass(frozen=True)
class ResultKey:
    """How results are matched across runs: the test's node id and the label of its extra runs.

    Node ids are relative to pytest's rootdir, which moves with the paths on the command line
    (``--specdecode-compare ../b.json`` adds ``..`` to them), so two keys of the same test and
    label also match when one's file path ends with the other's, folder by folder.
    """

    nodeid: str
    label: str = ""

    @classmethod
    def of(cls, result: Entry | Result | Mapping[str, Any]) -> ResultKey:
        """The key of a report entry, a result, or an entry as data."""
        if isinstance(result, Mapping):
            return cls(str(result["nodeid"]), str(result.get("label") or ""))
        return cls(*result.key)

    def __str__(self) -> str:
        return f"{self.nodeid}[{self.label}]" if self.label else self.nodeid

    @property
    def _path(self) -> tuple[str, ...]:
        path = self.nodeid.partition("::")[0].replace("\\", "/")
        return tuple(p for p in path.split("/") if p and p != ".")

    @property
    def _test(self) -> tuple[str, str]:
        return self.nodeid.partition("::")[2], self.label

    def same_test(self, other: ResultKey) -> bool:
        """Equal, or equal but for a leading folder prefix of one file path."""
        if self == other:
            return True
        if self._test != other._test:
            return False
        a, b = self._path, other._path
        short, long = (a, b) if len(a) <= len(b) else (b, a)
        return bool(short) and long[len(long) - len(short) :] == short


def result_key(result: Entry | Result | Mapping[str, Any]) -> str:
    """A result's key as text: ``nodeid`` or ``nodeid[label]``."""
    return str(ResultKey.of(result))


@dataclass(frozen=True)
class Matching(Generic[E]):
    """Each new result paired with its stored counterpart (None: new), and the stored results
    that no new result matched (missing); :func:`nothing_compared` says why one that paired
    nothing compares nothing."""

    pairs: list[tuple[E, E | None]]
    missing: list[E] = field(default_factory=list)


class StoredResults(Generic[E]):
    """A baseline's results (its :class:`~.report.ReportEntry` objects), looked up by
    :class:`ResultKey` (exactly, else by :meth:`ResultKey.same_test` when exactly one stored
    result fits)."""

    def __init__(self, results: Iterable[E]) -> None:
        self.results: list[E] = list(results)
        self._exact: dict[ResultKey, E] = {ResultKey.of(r): r for r in self.results}

    def find(self, key: ResultKey) -> E | None:
        exact = self._exact.get(key)
        if exact is not None:
            return exact
        fits = [r for k, r in self._exact.items() if k.same_test(key)]
        return fits[0] if len(fits) == 1 else None

    def match(self, new: Sequence[E]) -> Matching[E]:
        pairs = [(r, self.find(ResultKey.of(r))) for r in new]
        used = {id(s) for _, s in pairs if s is not None}
        return Matching(pairs, [r for r in self.results if id(r) not in used])


def value_of(result: Result, figure: str) -> float | None:
    """A result's ``figure``, read where its row in the figure table says (None: not
    measured)."""
    return figure_row(figure).number(result)


def samples_of(result: Result, figure: str) -> list[float]:
    """Per-round values of ``figure`` (empty when the result holds none)."""
    if figure == "speedup":
        return [float(r) for r in result.ratios or []]
    return [float(v) for v in (result.samples or {}).get(figure) or []]


#: A comparison's decision as a report states it (:attr:`Verdict.decision`).
DECISIONS = ("regressed", "unchanged", "improved", "inconclusive", "new", "missing")


@dataclass
class Verdict:
    """The comparison of one figure of one test. A report's ``comparisons`` entry
    (:meth:`to_dict`) is its key, figure, stored and new value, relative change, tolerance
    (``"5%"``, or an absolute amount), decision, p-value and, for the speedup, the round at
    which the sequential rule decided (None otherwise)."""

    JSON = Form(
        "comparison",
        derived=(
            Derived("change", float | None, "new"),
            Derived("decision", str, "tolerance", Key(schema={"enum": list(DECISIONS)},
                                                      replace=True)),
        ),
        required=("stored", "new", "change", "tolerance", "decision", "rounds"),
    )  # fmt: skip

    key: str
    figure: str = field(
        metadata=json(write=lambda f: f or None, schema={"type": ["string", "null"]}, replace=True)
    )
    #: "regressed", "improved", "unchanged", "new", "missing"
    status: str = field(metadata=json(hidden=True))
    old: float | None = field(default=None, metadata=json(name="stored", after="figure"))
    new: float | None = field(default=None, metadata=json(after="stored"))
    p_value: float | None = field(default=None, metadata=json(after="decision"))
    tolerance: str = field(
        default="",
        metadata=json(
            after="change", write=lambda t: t.partition(":")[2] or None,
            schema={"type": ["string", "null"]}, replace=True, optional=False,
        ),
    )  # fmt: skip
    #: the test the verdict belongs to (routes it to that test's report)
    nodeid: str = field(default="", metadata=json(hidden=True))
    #: speedup: the round at which the sequential rule decided
    rounds: int | None = None
    #: the smallest drop this comparison could catch with 95% probability (None: not known)
    detectable: Detectable | None = field(
        default=None, metadata=json(doc="what this comparison could catch; null where not computed")
    )

    @property
    def change(self) -> float | None:
        if self.old is None or self.old == 0 or self.new is None:
            return None
        return self.new / self.old - 1

    @property
    def decision(self) -> str:
        """The status as a report states it: ``"inconclusive"`` where the rule kept
        "unchanged" only because the data could not tell (a value missing on one side, fewer
        than two rounds, or a change beyond the tolerance with no test possible)."""
        if self.status != "unchanged":
            return self.status
        if self.old is None or self.new is None:
            return "inconclusive"
        if self.figure == "speedup":
            return "inconclusive" if self.rounds is None else "unchanged"
        tolerance = parse_tolerances(self.tolerance)[0]
        within = tolerance.floor(self.old) <= self.new <= tolerance.ceiling(self.old)
        return "unchanged" if within or self.p_value is not None else "inconclusive"

    def to_dict(self) -> dict[str, Any]:
        """The report's ``comparisons`` entry (:func:`~..measure.model.encode`)."""
        return encode(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        """The verdict a report's ``comparisons`` entry (:meth:`to_dict`) describes, or one
        given by its fields (``vars()``: what a pytest-xdist worker sends, with ``status``
        and ``nodeid``). A report's entry keeps neither the node id (``""``) nor the status
        behind an "inconclusive" decision: that is "unchanged", the status that decision
        comes from."""
        if "status" in data:  # the fields
            names = {f.name for f in fields(cls)}
            values = {k: v for k, v in data.items() if k in names}
            values["detectable"] = _detectable(data.get("detectable"))
            return cls(**values)
        figure = data.get("figure") or ""
        tolerance = data.get("tolerance")
        decision = str(data["decision"])
        return cls(
            key=str(data["key"]),
            figure=str(figure),
            status="unchanged" if decision == "inconclusive" else decision,
            old=_optional(data.get("stored")),
            new=_optional(data.get("new")),
            p_value=_optional(data.get("p_value")),
            tolerance="" if tolerance is None else f"{figure}:{tolerance}",
            rounds=None if data.get("rounds") is None else int(data["rounds"]),
            detectable=_detectable(data.get("detectable")),
        )

    def describe(self) -> str:
        if self.status in ("new", "missing"):
            return f"{self.key}: {self.status}"
        change = "" if self.change is None else f" ({self.change * 100:+.1f}%)"
        p = "" if self.p_value is None else f", p={self.p_value:.3g}"
        if self.rounds is not None:
            p += f", decided after {self.rounds} rounds"
        if self.detectable is not None:
            p += f"; could catch drops from {self.detectable.text()}"
        return (
            f"{self.key}: {self.figure} {self.status}: stored {self.old:.3f}, now "
            f"{self.new:.3f}{change}; tolerance {self.tolerance}{p}"
        )


def comparison_entries(verdicts: Iterable[Verdict]) -> list[dict[str, Any]]:
    """The report's ``comparisons`` list: one :meth:`Verdict.to_dict` per verdict."""
    return [v.to_dict() for v in verdicts]


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)


def _p_lower(new: Result, old: Result, figure: str) -> float | None:
    """p-value of "new is below old" for ``figure``; None when the data cannot tell."""
    if figure == "match_rate":
        n_new, n_old = int(new.num_prompts or 0), int(old.num_prompts or 0)
        return proportion_less(
            round(float(new.match_rate) * n_new), n_new,
            round(float(old.match_rate) * n_old), n_old,
        )  # fmt: skip
    a, b = samples_of(new, figure), samples_of(old, figure)
    if len(a) < 2 or len(b) < 2:
        return None
    if FIGURES[figure]:
        if min(a + b) <= 0:
            return None
        a, b = [math.log(x) for x in a], [math.log(x) for x in b]
    return welch_less(a, b)


def _p_higher(new: Result, old: Result, figure: str) -> float | None:
    return _p_lower(old, new, figure)


def compare_one(old: Entry, new: Entry, tolerance: Tolerance, alpha: float = ALPHA) -> Verdict:
    """Apply the two-gate rule to one figure of one test: ``old`` the stored entry (its
    saving sessions serve the speedup's rule), ``new`` this run's."""
    figure = tolerance.figure
    verdict = Verdict(
        result_key(new), figure, "unchanged", tolerance=str(tolerance), nodeid=new.result.nodeid
    )
    verdict.old, verdict.new = value_of(old.result, figure), value_of(new.result, figure)
    if verdict.old is None or verdict.new is None:
        return verdict
    if figure == "speedup":
        return _speedup_verdict(old, new, tolerance, verdict)
    if verdict.new < tolerance.floor(verdict.old):
        verdict.p_value = _p_lower(new.result, old.result, figure)
        if verdict.p_value is not None and verdict.p_value < alpha:
            verdict.status = "regressed"
    elif verdict.new > tolerance.ceiling(verdict.old):
        verdict.p_value = _p_higher(new.result, old.result, figure)
        if verdict.p_value is not None and verdict.p_value < alpha:
            verdict.status = "improved"
    return verdict


def reference_of(stored: Entry) -> Reference:
    """What the sequential rule needs of a stored result: its rounds, saving sessions and
    the compared rounds it planned."""
    sessions: list[Session] = list(stored.sessions or ())
    ratios = [float(r) for r in stored.result.ratios]
    return Reference.of(ratios, sessions, stored.result.compared_rounds)


def speedup_tolerance(tolerance: Tolerance, stored: Entry) -> float:
    """The speedup tolerance as a relative drop (an absolute amount is taken relative to the
    stored speedup)."""
    return relative_tolerance(tolerance, float(stored.result.speedup))


def check_speedup_amount(
    tolerances: Sequence[Tolerance], stored: Iterable[Entry], source: str
) -> None:
    """Refuse an absolute speedup tolerance (``speedup:0.5``) at least as large as a stored
    speedup: the drop it allows would take that speedup to zero or below, which the
    regression rule (on log speedups) cannot test. Errors name ``source``."""
    amounts = [t for t in tolerances if t.figure == "speedup" and not t.relative]
    if not amounts:
        return
    tolerance = max(amounts, key=lambda t: t.amount)
    too_small = [
        f"{result_key(r)} ({speedup:g}x)"
        for r in stored
        if (speedup := finite(r.result.speedup)) is not None and speedup <= tolerance.amount
    ]
    if too_small:
        more = f" and {len(too_small) - 3} more" if len(too_small) > 3 else ""
        raise ConfigError(
            f"{source}: {tolerance}: an absolute speedup tolerance must be below every stored "
            f"speedup, and these are not above {tolerance.amount:g}: "
            f"{', '.join(too_small[:3])}{more}. Give a relative tolerance instead (e.g. "
            "speedup:10%) or a smaller amount"
        )


def check_unique_keys(results: Iterable[Entry], where: str) -> None:
    """Refuse a file (``where``) holding two results under one key: a comparison matches each
    result with one stored entry, and could not tell which (a run made one before two
    Benches of one name in a RunRecord were refused)."""
    counts: dict[str, int] = {}
    for r in results:
        key = result_key(r)
        counts[key] = counts.get(key, 0) + 1
    twice = [(key, n) for key, n in counts.items() if n > 1]
    if twice:
        key, n = twice[0]
        more = f" (and {len(twice) - 1} more keys)" if len(twice) > 1 else ""
        raise ConfigError(
            f"{where}: holds {n} results under the key {key!r}{more}, so a comparison cannot "
            "tell which one a result matches (two benches of one name saved them); keep one "
            "entry per key, or move the file away and save it again"
        )


def too_few_rounds(results: Iterable[Entry]) -> list[str]:
    """Keys of stored results with fewer rounds than the regression rule needs."""
    return [
        f"{result_key(r)} ({len(r.result.ratios or [])} rounds)"
        for r in results
        if len(r.result.ratios or []) < MIN_BASELINE_ROUNDS
    ]


def check_baseline_rounds(
    results: Iterable[Entry], tolerances: Sequence[Tolerance], where: str, path: str
) -> None:
    """Refuse a baseline whose results hold fewer than :data:`MIN_BASELINE_ROUNDS` stored
    rounds when the speedup is judged (its rule pools the baseline's rounds): a
    :class:`ConfigError` naming the file (``where``: how it was given; ``path``: the file),
    each such result with its rounds, the minimum, and the command that saves it again. The
    plugin, ``RunRecord`` and the offline ``compare`` all check here."""
    if not any(t.figure == "speedup" for t in tolerances):
        return
    few = too_few_rounds(results)
    if not few:
        return
    more = f" and {len(few) - 5} more" if len(few) > 5 else ""
    raise ConfigError(
        f"{where}: the regression rule needs at least {MIN_BASELINE_ROUNDS} stored rounds per "
        f"result (it pools the baseline's rounds); these have fewer: {', '.join(few[:5])}{more}. "
        f"Save the baseline again, with more rounds, on the reference commit: pytest "
        f"{BY_NAME['save'].option} {path} (a saving run takes at least {MIN_BASELINE_ROUNDS} "
        f"rounds per run(); {BY_NAME['baseline_trials'].option} auto, the default, sizes them "
        "by their noise)"
    )


def _speedup_verdict(old: Entry, new: Entry, tolerance: Tolerance, verdict: Verdict) -> Verdict:
    ratios = new.result.ratios or []
    if len(ratios) < 2 or len(old.result.ratios or []) < 2:
        return verdict
    decision = decide(reference_of(old), ratios, speedup_tolerance(tolerance, old))
    if decision.status in ("regressed", "improved"):
        verdict.status = decision.status
    verdict.p_value = decision.p_value
    verdict.rounds = decision.rounds
    return verdict


def _detectable(data: Any) -> Detectable | None:
    return None if data is None else Detectable.from_dict(data)


def detectable_drop(
    stored: Result,
    tolerance: Tolerance,
    compared: int,
    sessions: Sequence[Session] = (),
) -> Detectable | None:
    """The smallest drop of ``tolerance.figure`` that a run of at most ``compared`` rounds
    compared with ``stored`` is caught in with 95% probability (:mod:`~.detectable`); None
    where the stored result has no per-round values of it."""
    figure = tolerance.figure
    if figure == "speedup":
        ratios = [float(r) for r in stored.ratios or []]
        if len(ratios) < 2 or min(ratios) <= 0:
            return None
        reference = Reference.of(ratios, sessions)
        relative = relative_tolerance(tolerance, float(stored.speedup))
        return speedup_drop(ratios, compared, relative, reference.session_var, reference.sessions)
    values = samples_of(stored, figure)
    if len(values) < 2:
        return None
    return figure_drop(
        values, compared, tolerance.amount, relative=tolerance.relative,
        log=FIGURES[figure], alpha=ALPHA,
    )  # fmt: skip


def detectable_drops(
    result: Result, tolerances: Sequence[Tolerance], compared: int
) -> dict[str, Detectable]:
    """Each compared figure's :func:`detectable_drop` for ``result`` saved as a baseline."""
    drops = {t.figure: detectable_drop(result, t, compared) for t in tolerances}
    return {figure: drop for figure, drop in drops.items() if drop is not None}


def with_detectable(
    verdicts: Sequence[Verdict],
    matching: Matching[Entry],
    tolerances: Sequence[Tolerance],
    limit: Callable[[Reference], Reference],
) -> None:
    """Set each verdict's detectable drop: the speedup's from the stored rounds and the
    rounds the compared run could take (``limit`` of its reference), every other figure's
    from the rounds it took."""
    by_figure = {t.figure: t for t in tolerances}
    stored_of = {result_key(r): (r, s) for r, s in matching.pairs if s is not None}
    for verdict in verdicts:
        pair = stored_of.get(verdict.key)
        tolerance = by_figure.get(verdict.figure)
        if pair is None or tolerance is None:
            continue
        new, stored = pair
        if verdict.figure == "speedup":
            compared = limit(reference_of(stored)).compared or len(new.result.ratios or [])
        else:
            compared = len(samples_of(new.result, verdict.figure))
        if compared >= 2:
            verdict.detectable = detectable_drop(
                stored.result, tolerance, compared, list(stored.sessions or ())
            )


def compare_runs(
    old: Iterable[Entry],
    new: Iterable[Entry],
    tolerances: list[Tolerance],
    alpha: float = ALPHA,
) -> list[Verdict]:
    """Verdicts for every figure of every test in ``new``, plus new and missing tests."""
    return verdicts_for(StoredResults(old).match(list(new)), tolerances, alpha)


def verdicts_for(
    matching: Matching[Entry], tolerances: list[Tolerance], alpha: float = ALPHA
) -> list[Verdict]:
    """The verdicts of a :class:`Matching`: every figure of each matched result, one "new"
    per unmatched result, one "missing" per stored result nothing matched."""
    verdicts = []
    for result, stored in matching.pairs:
        if stored is None:
            verdicts.append(Verdict(result_key(result), "", "new", nodeid=result.result.nodeid))
            continue
        verdicts.extend(compare_one(stored, result, t, alpha) for t in tolerances)
    verdicts.extend(Verdict(result_key(r), "", "missing") for r in matching.missing)
    return verdicts


def environment_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between two runs' environments in ways that move the figures."""
    diffs = []
    for name in ("vllm", "torch"):
        if old.get(name) and new.get(name) and old[name] != new[name]:
            diffs.append(f"{name} {old[name]} -> {new[name]}")
    old_dev, new_dev = old.get("device") or {}, new.get("device") or {}
    if (
        old_dev
        and new_dev
        and (old_dev.get("kind"), old_dev.get("name"))
        != (
            new_dev.get("kind"),
            new_dev.get("name"),
        )
    ):
        diffs.append(f"device {old_dev.get('name')} -> {new_dev.get('name')}")
    old_models, new_models = old.get("models") or {}, new.get("models") or {}
    for name, ident in new_models.items():
        before = old_models.get(name)
        if before and before.get("sha256") != ident.get("sha256"):
            diffs.append(f"model {name} changed (sha256 {before.get('sha256')} -> "
                         f"{ident.get('sha256')})")  # fmt: skip
    return diffs


def own_environment(
    result: Entry | Mapping[str, Any], file_environment: Mapping[str, Any] | None
) -> Mapping[str, Any]:
    """The environment ``result`` (a report entry, or one as data) was measured in: its own
    (:attr:`~.report.ReportEntry.environment`: each result of a saved run or baseline carries
    one), else its file's top-level one (a report, or a file written before results carried
    their own)."""
    own = result.get("environment") if isinstance(result, Mapping) else result.environment
    return own if isinstance(own, Mapping) else (file_environment or {})


def environments_differing(
    matching: Matching[Entry],
    stored_environment: Mapping[str, Any] | None,
    new_environment: Mapping[str, Any] | None,
) -> dict[str, list[str]]:
    """Each difference (:func:`environment_differences`) between a matched stored result's
    environment and its new counterpart's (:func:`own_environment`; ``stored_environment`` and
    ``new_environment`` are the two files' top-level ones), with the keys of the new results
    it concerns, in order."""
    changes: dict[str, list[str]] = {}
    for new, stored in matching.pairs:
        if stored is None:
            continue
        before = own_environment(stored, stored_environment)
        for change in environment_differences(before, own_environment(new, new_environment)):
            changes.setdefault(change, []).append(result_key(new))
    return changes


def environment_change_lines(differing: Mapping[str, Sequence[str]], shown: int = 3) -> list[str]:
    """:func:`environments_differing` as text: each difference with the first keys it
    concerns."""
    return [
        f"{change} ({', '.join(keys[:shown])}"
        f"{f' and {len(keys) - shown} more' if len(keys) > shown else ''})"
        for change, keys in differing.items()
    ]


def nothing_compared(matching: Matching[Any], baseline: str, run: str, renamed: str) -> str | None:
    """Why a comparison compares nothing (None: at least one result matched): ``baseline``
    (e.g. "the baseline file b.json") or ``run`` (e.g. "this run") holds no results, or not
    one result of the run matches a stored one (``renamed`` says why that happens). Every
    door refuses such a comparison instead of passing with nothing compared."""
    if any(stored is not None for _, stored in matching.pairs):
        return None
    if not matching.pairs and not matching.missing:
        return f"neither {baseline} nor {run} holds a result, so nothing was compared"
    if not matching.missing:
        return (
            f"{baseline} holds no results, so nothing was compared; save a baseline into it "
            "first (a run that saves one measures the results it holds)"
        )
    if not matching.pairs:
        return f"{run} holds no results, so nothing was compared with {baseline}"
    new_keys = [result_key(r) for r, _ in matching.pairs]
    old_keys = [result_key(r) for r in matching.missing]
    by_test = {k.rsplit("::", 1)[-1]: k for k in old_keys}
    stored, now = next(  # a pair with the same test name, when there is one: the usual case
        ((by_test[k.rsplit("::", 1)[-1]], k) for k in new_keys if k.rsplit("::", 1)[-1] in by_test),
        (old_keys[0], new_keys[0]),
    )
    return (
        f"no result of {run} matches one in {baseline}, so nothing was compared "
        f"({len(new_keys)} new, {len(old_keys)} stored; e.g. stored {stored!r}, new {now!r}). "
        f"{renamed}"
    )


#: The result fields that say what a figure measures: the name messages give each, and
#: whether a change makes the figures incomparable (another model, another proposer) rather
#: than only different.
CONFIGURATION: tuple[tuple[str, str, bool], ...] = (
    ("target", "target", True),
    ("method", "method", True),
    ("draft", "draft", False),
    ("num_speculative_tokens", "k", False),
    ("max_tokens", "max_tokens", False),
    ("temperature", "temperature", False),
    ("num_prompts", "prompts", False),
    ("concurrency", "concurrency", False),
)


@dataclass(frozen=True)
class ConfigurationChange:
    """How a result's configuration differs from its stored counterpart's: each field that
    changed (``"k 4 -> 2"``), and those among them that make the figures incomparable
    (another target or method)."""

    key: str
    changes: tuple[str, ...]
    incomparable: tuple[str, ...] = ()

    def text(self) -> str:
        return f"{self.key}: {', '.join(self.changes)}"


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _same_model(
    old: str | None, new: str | None, old_env: Mapping[str, Any], new_env: Mapping[str, Any]
) -> tuple[bool, bool]:
    """Whether two model names are the same model (a local folder moved to another path is,
    when the environments identify it by the same weights), and whether they are at least
    the same local folder name (weights that differ are the environment's to name)."""
    if old == new:
        return True, True
    if old is None or new is None:
        return False, False
    before = (old_env.get("models") or {}).get(old) or {}
    after = (new_env.get("models") or {}).get(new) or {}
    if before.get("sha256") and before.get("sha256") == after.get("sha256"):
        return True, True
    local = bool(before.get("local") and after.get("local"))
    return False, local and PurePath(old).name == PurePath(new).name


def configuration_changes(
    matching: Matching[Entry],
    stored_environment: Mapping[str, Any] | None,
    new_environment: Mapping[str, Any] | None,
) -> list[ConfigurationChange]:
    """How each matched result's configuration (:data:`CONFIGURATION`) differs from its
    stored entry's, in order; results of the same configuration are left out.
    ``stored_environment`` and ``new_environment`` are the two files' top-level environments
    (each entry's own wins, :func:`own_environment`): they tell a model folder that moved from
    another model."""
    found = []
    for new, stored in matching.pairs:
        if stored is None:
            continue
        old_env = own_environment(stored, stored_environment)
        new_env = own_environment(new, new_environment)
        changes, incomparable = [], []
        for name, shown, refuses in CONFIGURATION:
            before, after = getattr(stored.result, name), getattr(new.result, name)
            if name in ("target", "draft"):
                same, alike = _same_model(before, after, old_env, new_env)
                if same:
                    continue
                refuses = refuses and not alike
            elif before == after:
                continue
            change = f"{shown} {_shown(before)} -> {_shown(after)}"
            changes.append(change)
            if refuses:
                incomparable.append(change)
        if changes:
            found.append(ConfigurationChange(result_key(new), tuple(changes), tuple(incomparable)))
    return found
