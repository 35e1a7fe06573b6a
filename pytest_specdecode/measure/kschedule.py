"""Which k at which batch size: a schedule from a sweep, as vLLM's
``num_speculative_tokens_per_batch_size``, and its check against the best fixed k.

A :class:`KSchedule` holds one :class:`KChoice` per measured concurrency and the inclusive
``(start, end, k)`` batch-size ranges vLLM's scheduler acts on (k = 0: no speculation at
those batch sizes). A :class:`ScheduleCheck` says, per concurrency, whether the scheduled
engine is within the tolerance of the best fixed k.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engines.dynamic_sd import SCHEDULE_KEY, check_schedule, k_at
from ..errors import ConfigError
from .model import Derived, Form, Key, Record, if_empty, if_none, json
from .result import Result
from .stats import ratio_of_intervals

#: Default tolerance: the smallest k within 5% of the best k's speedup is chosen.
DEFAULT_TOLERANCE = 0.05


def _ci(ci: Sequence[float]) -> tuple[float, float]:
    return (float(ci[0]), float(ci[1]))


def label_key(call: str, whose: str, example: str) -> dict[str, Key]:
    """The JSON options of a sweep's or a schedule check's ``label``: after ``nodeid``, absent
    when empty."""
    return json(
        after="nodeid", omit=if_empty, schema={"minLength": 1},
        doc=f"{call}(label=...): put before each {whose}'s label ('{example}'); absent without one",
    )  # fmt: skip


_AT_LEAST_1 = {"minimum": 1}
_NUMBER_OR_NULL = {"type": ["number", "null"]}
_TOLERANCE = {"minimum": 0, "exclusiveMaximum": 1}
_INTERVAL = {"$ref": "#/$defs/interval"}
_INTERVAL_OR_NULL = {"anyOf": [_INTERVAL, {"type": "null"}]}


@dataclass(frozen=True)
class KChoice(Record):
    """The k chosen at one measured concurrency, the best k there, and why."""

    JSON = Form(
        "k_choice",
        "the k chosen at one measured concurrency (0: speculation off; its speedup is then "
        "1.0, the target alone) and the best k there",
    )

    concurrency: int = field(metadata=json(schema=_AT_LEAST_1))
    #: 0: speculation off at this concurrency
    k: int = field(metadata=json(schema={"minimum": 0}))
    #: the k with the highest measured speedup
    best_k: int = field(metadata=json(schema=_AT_LEAST_1))
    #: the chosen k's (1.0 when k = 0: the target alone)
    speedup: float = field(metadata=json(schema=_NUMBER_OR_NULL))
    speedup_ci: tuple[float, float] = field(metadata=json(schema=_INTERVAL, replace=True))
    best_speedup: float = field(metadata=json(schema=_NUMBER_OR_NULL))
    best_speedup_ci: tuple[float, float] = field(metadata=json(schema=_INTERVAL, replace=True))
    reason: str = field(metadata=json(read=lambda v: str(v or ""), optional=True))


def choose_k(concurrency: int, by_k: Mapping[int, Result], tolerance: float) -> KChoice:
    """The k for one concurrency from each k's result there: the smallest k whose speedup is
    at least ``(1 - tolerance)`` times the best k's (a smaller k drafts fewer tokens and keeps
    less draft KV cache for about the same speed); 0 (speculation off) where even the best
    k's 95% interval lies wholly below 1.0."""
    best_k = max(sorted(by_k), key=lambda k: by_k[k].speedup)  # ties: the smaller k
    best = by_k[best_k]
    best_ci = _ci(best.speedup_ci)
    if best_ci[1] < 1.0:
        return KChoice(
            concurrency, 0, best_k, 1.0, (1.0, 1.0), best.speedup, best_ci,
            f"off: even the best k={best_k} is slower than the target alone "
            f"({best.speedup:.2f}x, 95% CI {best_ci[0]:.2f}x-{best_ci[1]:.2f}x)",
        )  # fmt: skip
    floor = (1.0 - tolerance) * best.speedup
    k = min(k for k in by_k if by_k[k].speedup >= floor)
    chosen = by_k[k]
    if k == best_k:
        reason = f"k={k}: the fastest ({best.speedup:.2f}x)"
    else:
        reason = (
            f"k={k}: {chosen.speedup:.2f}x is within {tolerance:.0%} of the fastest, "
            f"k={best_k} ({best.speedup:.2f}x), with fewer draft tokens"
        )
    return KChoice(
        concurrency, k, best_k, chosen.speedup, _ci(chosen.speedup_ci), best.speedup, best_ci,
        reason,
    )  # fmt: skip


def ranges(choices: Sequence[KChoice]) -> tuple[tuple[int, int, int], ...]:
    """Contiguous inclusive batch-size ranges from 1: each measured concurrency ends a range
    that takes its choice ((previous measured, this] -> this one's k), neighbours with equal
    k merged."""
    entries: list[tuple[int, int, int]] = []
    start = 1
    for choice in sorted(choices, key=lambda c: c.concurrency):
        if entries and entries[-1][2] == choice.k:
            entries[-1] = (entries[-1][0], choice.concurrency, choice.k)
        else:
            entries.append((start, choice.concurrency, choice.k))
        start = choice.concurrency + 1
    return tuple(entries)


@dataclass(frozen=True)
class KSchedule(Record):
    """A k per batch-size range, measured by a sweep: vLLM's
    ``num_speculative_tokens_per_batch_size`` (:attr:`speculative_config` is ready to use)."""

    JSON = Form(
        "k_schedule",
        "KSchedule: which k at which batch size; speculative_config is ready for vllm serve "
        "--speculative-config or vllm.LLM(speculative_config=...)",
        derived=(
            Derived("speculative_config", dict[str, Any], "base_config"),
            Derived("summary", str, "speculative_config"),
        ),
    )

    nodeid: str = field(metadata=json(schema={"minLength": 1}))
    tolerance: float = field(metadata=json(schema=_TOLERANCE))
    choices: tuple[KChoice, ...] = field(metadata=json(schema={"minItems": 1}))
    #: (start, end, k), inclusive, from batch 1
    entries: tuple[tuple[int, int, int], ...] = field(
        metadata=json(
            doc="num_speculative_tokens_per_batch_size: inclusive [start, end, k] batch-size "
            "ranges from 1, contiguous (k = 0: speculation off)",
            schema={
                "type": "array", "minItems": 1,
                "items": {
                    "type": "array",
                    "prefixItems": [{"type": "integer", "minimum": 1},
                                    {"type": "integer", "minimum": 1},
                                    {"type": "integer", "minimum": 0}],
                    "items": False, "minItems": 3,
                },
            },
            replace=True,
        )
    )  # fmt: skip
    #: the sweep's speculative config, without a schedule
    base_config: dict[str, Any] = field(metadata=json(read=lambda v: dict(v or {}), optional=True))

    @classmethod
    def of(
        cls,
        nodeid: str,
        choices: Sequence[KChoice],
        base_config: Mapping[str, Any],
        tolerance: float,
        source: str = "schedule",
    ) -> KSchedule:
        """The schedule of ``choices``, its entries checked with vLLM's own rules."""
        ordered = tuple(sorted(choices, key=lambda c: c.concurrency))
        entries = ranges(ordered)
        base = {k: v for k, v in base_config.items() if k != SCHEDULE_KEY}
        schedule = cls(nodeid, tolerance, ordered, entries, base)
        check_schedule(
            [list(e) for e in entries], schedule.num_speculative_tokens, f"{nodeid}: {source}"
        )
        return schedule

    @property
    def num_speculative_tokens(self) -> int:
        """The engine's k: the largest scheduled k (the base config's when all are 0)."""
        largest = max((k for _, _, k in self.entries), default=0)
        return largest or int(self.base_config.get("num_speculative_tokens") or 1)

    @property
    def uniform(self) -> bool:
        """Whether the schedule is one k (> 0) at every batch size: a plain fixed k."""
        return len(self.entries) == 1 and self.entries[0][2] > 0

    @property
    def speculative_config(self) -> dict[str, Any]:
        """The base config with ``num_speculative_tokens`` = the largest k and the schedule
        (``num_speculative_tokens_per_batch_size``): for ``vllm.LLM(speculative_config=...)``
        or ``vllm serve --speculative-config``. A :attr:`uniform` schedule is the plain fixed
        k, without the schedule: vLLM runs a schedule differently from a fixed k even where
        it never changes k (vllm#49548)."""
        config = {**self.base_config, "num_speculative_tokens": self.num_speculative_tokens}
        if not self.uniform:
            config[SCHEDULE_KEY] = [list(e) for e in self.entries]
        return config

    @property
    def largest_concurrency(self) -> int:
        return max(c.concurrency for c in self.choices)

    def k_at(self, batch_size: int) -> int:
        """The k vLLM runs at ``batch_size`` (past the last range: the last range's k)."""
        return k_at(self.entries, batch_size)

    def choice_for(self, concurrency: int) -> KChoice:
        """The measured choice whose range holds ``concurrency`` (past the largest measured
        one: the last)."""
        for choice in self.choices:
            if concurrency <= choice.concurrency:
                return choice
        return self.choices[-1]

    def summary(self) -> str:
        """E.g. ``k=4 up to batch 8, k=2 up to 32, off above 32 (measured up to batch 64;
        larger batches stay off, as vLLM carries the last range forward)``."""
        parts: list[str] = []
        for i, (start, end, k) in enumerate(self.entries):
            what = "off" if k == 0 else f"k={k}"
            if len(self.entries) == 1:
                parts.append(f"{what} at every batch size")
            elif i == len(self.entries) - 1:
                parts.append(f"{what} above {start - 1}")
            elif i == 0 and end == 1:
                parts.append(f"{what} at batch 1")
            else:
                parts.append(f"{what} up to {'batch ' if i == 0 else ''}{end}")
        last = self.entries[-1][2]
        return (
            f"{', '.join(parts)} (measured up to batch {self.largest_concurrency}; larger "
            f"batches {'stay off' if last == 0 else f'keep k={last}'}, as vLLM carries the "
            "last range forward)"
        )


@dataclass(frozen=True)
class ScheduleRow(Record):
    """The scheduled engine and the best fixed k at one concurrency, each against the
    baseline. Where the schedule switches speculation off the scheduled engine is not run
    (it would not draft) and the fixed k's figures are the sweep's."""

    JSON = Form(
        "schedule_row",
        "the scheduled engine and the best fixed k at one concurrency, each against the "
        "baseline; scheduled_speedup null: the schedule is off there (not run); fixed_speedup "
        "null: not measured",
    )

    concurrency: int = field(metadata=json(schema=_AT_LEAST_1))
    scheduled_k: int = field(metadata=json(schema={"minimum": 0}))
    fixed_k: int = field(metadata=json(schema=_AT_LEAST_1))
    #: None: k = 0 there, not run
    scheduled_speedup: float | None
    scheduled_speedup_ci: tuple[float, float] | None = field(
        metadata=json(optional=True, schema=_INTERVAL_OR_NULL, replace=True)
    )
    #: None: not measured (k = 0 past the sweep's concurrencies)
    fixed_speedup: float | None
    fixed_speedup_ci: tuple[float, float] | None = field(
        metadata=json(optional=True, schema=_INTERVAL_OR_NULL, replace=True)
    )
    holds: bool  # the ratio's interval reaches 1 - tolerance (see :func:`holds`)
    note: str = ""
    #: scheduled speedup / fixed speedup: the 95% Welch interval of their rounds' log ratios;
    #: None where nothing was compared (the schedule off, or the same engine as the fixed k);
    #: absent then (and in reports from before it existed)
    ratio_ci: tuple[float, float] | None = field(
        default=None,
        metadata=json(
            omit=if_none, schema=_INTERVAL_OR_NULL, replace=True,
            doc="scheduled speedup / fixed speedup: the 95% Welch interval of both runs' "
            "per-round log ratios; the row fails where its upper end is below 1 - tolerance; "
            "null where nothing was compared (schedule off, or the same engine)",
        ),
    )  # fmt: skip
    #: the scheduled engine is the fixed k's engine (a uniform schedule is the plain fixed k):
    #: one measurement stands for both, nothing is compared
    same_engine: bool = field(
        default=False,
        metadata=json(
            omit=if_empty,
            doc="a uniform schedule of the best fixed k is that engine: run once, the row "
            "holds without a comparison",
        ),
    )

    def describe(self) -> str:
        """One line: both speedups with their intervals, the ks, and the verdict."""
        fixed = (
            f"fixed k={self.fixed_k} {_speedup(self.fixed_speedup, self.fixed_speedup_ci)}"
            if self.fixed_speedup is not None
            else f"fixed k={self.fixed_k} not measured"
        )
        if self.scheduled_speedup is None:
            return f"c={self.concurrency}: schedule off (k=0), {fixed}: {self.note}"
        scheduled = _speedup(self.scheduled_speedup, self.scheduled_speedup_ci)
        if self.same_engine:
            return (
                f"c={self.concurrency}: schedule (k={self.scheduled_k}) {scheduled} is the "
                f"fixed k={self.fixed_k} engine: holds (the same configuration, not compared)"
            )
        verdict = "holds" if self.holds else "does not hold"
        ratio = (
            f" (schedule/fixed 95% CI {self.ratio_ci[0]:.2f}-{self.ratio_ci[1]:.2f})"
            if self.ratio_ci is not None
            else ""
        )
        return (
            f"c={self.concurrency}: schedule (k={self.scheduled_k}) {scheduled} vs {fixed}"
            f"{ratio}: {verdict}"
        )


def _speedup(value: float | None, ci: tuple[float, float] | None) -> str:
    if value is None:
        return "n/a"
    interval = f" (95% CI {ci[0]:.2f}x-{ci[1]:.2f}x)" if ci is not None else ""
    return f"{value:.2f}x{interval}"


def holds(ratio_ci: tuple[float, float], tolerance: float) -> bool:
    """The schedule holds unless it is shown slower: it fails where even the upper end of the
    95% interval of its speedup over the best fixed k's (:func:`~.stats.ratio_of_intervals`,
    both runs' rounds) lies below ``1 - tolerance``. Both sides are measured: a rule that takes
    the fixed k's point estimate as exact fails an A/A pair far more often than 2.5%."""
    return ratio_ci[1] >= 1.0 - tolerance


@dataclass(frozen=True)
class ScheduleCheck(Record):
    """``Bench.check_schedule``: the scheduled engine against the best fixed k per
    concurrency; gate it with :func:`~pytest_specdecode.assert_schedule_holds`."""

    JSON = Form(
        "schedule_check",
        "Schedule checks (specdecode.check_schedule / Bench.check_schedule): one per check, a "
        "row per concurrency checked.",
        derived=(Derived("holds", bool, "rows"), Derived("summary", str, "holds")),
    )

    nodeid: str = field(metadata=json(schema={"minLength": 1}))
    schedule: KSchedule
    tolerance: float = field(metadata=json(schema=_TOLERANCE))
    rows: tuple[ScheduleRow, ...] = field(metadata=json(schema={"minItems": 1}))
    #: check_schedule(label=...): "" for none
    label: str = field(default="", metadata=label_key("check_schedule", "run", "long schedule c=8"))

    @property
    def holds(self) -> bool:
        return all(row.holds for row in self.rows)

    @property
    def failing(self) -> tuple[ScheduleRow, ...]:
        return tuple(row for row in self.rows if not row.holds)

    def summary(self) -> str:
        verdict = (
            f"holds at every concurrency checked (within {self.tolerance:.0%} of the best fixed k)"
            if self.holds
            else "does not hold at "
            + ", ".join(f"c={r.concurrency}" for r in self.failing)
            + f" (shown more than {self.tolerance:.0%} slower than the best fixed k)"
        )
        rows = "; ".join(row.describe() for row in self.rows)
        name = f"{self.nodeid}[{self.label}]" if self.label else self.nodeid
        return f"{name}: schedule {self.schedule.summary()} {verdict}: {rows}"


def check_tolerance(tolerance: Any, call: str = "check_schedule") -> float:
    """A tolerance is a fraction in [0, 1)."""
    if (
        isinstance(tolerance, bool)
        or not isinstance(tolerance, int | float)
        or not (0 <= tolerance < 1)
    ):
        raise ConfigError(
            f"{call}(tolerance=...): expected a fraction in [0, 1), e.g. 0.05 (within 5% of "
            f"the best k), got {tolerance!r}"
        )
    return float(tolerance)


def check_concurrencies(concurrency: Sequence[int] | None, schedule: KSchedule) -> list[int]:
    """The concurrencies to check: the given ones (positive, distinct integers), else the ones
    the sweep measured."""
    if concurrency is None:
        return [c.concurrency for c in schedule.choices]
    values = list(concurrency) if isinstance(concurrency, list | tuple) else None
    if (
        not values
        or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values)
        or len(set(values)) != len(values)
    ):
        raise ConfigError(
            f"check_schedule(concurrency=...): expected a list of distinct positive integers, "
            f"e.g. [1, 8, 32], got {concurrency!r:.80}"
        )
    return values


@dataclass(frozen=True)
class Planned:
    """What :meth:`Bench.check_schedule` runs at one concurrency."""

    concurrency: int
    scheduled_k: int  # 0: nothing runs
    fixed_k: int
    choice: KChoice  # the sweep's choice whose range holds the concurrency
    measured: bool  # the sweep measured this concurrency
    #: the scheduled engine is the fixed k's (a uniform schedule of that k): run once
    same_engine: bool = False

    @property
    def runs(self) -> tuple[str, ...]:
        """The labels of the runs this concurrency needs: the scheduled engine's, and the
        fixed k's unless it is the same engine; none where the schedule is off."""
        if not self.scheduled_k:
            return ()
        scheduled = f"schedule c={self.concurrency}"
        if self.same_engine:
            return (scheduled,)
        return (scheduled, f"fixed k={self.fixed_k} c={self.concurrency}")


def check_plan(schedule: KSchedule, concurrencies: Sequence[int]) -> list[Planned]:
    """Per concurrency: the k the schedule runs there and the best fixed k (the sweep's, at
    the measured concurrency whose range holds it); a :attr:`~KSchedule.uniform` schedule of
    the best k is the same engine as that fixed k."""
    measured = {c.concurrency for c in schedule.choices}
    plan = []
    for c in concurrencies:
        choice, k = schedule.choice_for(c), schedule.k_at(c)
        same = schedule.uniform and k == choice.best_k
        plan.append(Planned(c, k, choice.best_k, choice, c in measured, same))
    return plan


#: What a k = 0 range costs with a draft model: vLLM 0.32 still runs one draft forward pass
#: per step to keep the draft's KV cache in sync (``llm_base_proposer.py``); on the tiny CPU
#: models that made batch-8 rounds about 1.3x slower than the baseline's.
DRAFT_STILL_RUNS = (
    "; not free with a draft model: vLLM still runs one draft forward pass per step at k=0"
)


def check_row(
    planned: Planned, results: Mapping[str, Result], tolerance: float, with_draft: bool = False
) -> ScheduleRow:
    """The row of one concurrency from the runs labelled ``schedule c=N`` and
    ``fixed k=K c=N``; where the schedule is off, from the sweep's choice (``with_draft``: the
    proposer is a draft model, whose cost an off range does not remove)."""
    c, choice = planned.concurrency, planned.choice
    if not planned.scheduled_k:
        if planned.measured:
            note = (
                f"speculation off: the sweep's best k={choice.best_k} was slower than the "
                f"target alone: {_speedup(choice.best_speedup, choice.best_speedup_ci)}"
                f"{DRAFT_STILL_RUNS if with_draft else ''}"
            )
            return ScheduleRow(
                c, 0, choice.best_k, None, None, choice.best_speedup, choice.best_speedup_ci,
                True, note,
            )  # fmt: skip
        note = (
            f"speculation off: beyond or between the sweep's concurrencies the schedule keeps "
            f"c={choice.concurrency}'s choice (off); nothing measured here"
        )
        return ScheduleRow(c, 0, choice.best_k, None, None, None, None, True, note)
    scheduled = results[f"schedule c={c}"]
    if planned.same_engine:
        return ScheduleRow(
            c, planned.scheduled_k, planned.fixed_k, scheduled.speedup, _ci(scheduled.speedup_ci),
            scheduled.speedup, _ci(scheduled.speedup_ci), True, same_engine=True,
        )  # fmt: skip
    fixed = results[f"fixed k={planned.fixed_k} c={c}"]
    _, ratio_ci = ratio_of_intervals(scheduled.ratios, fixed.ratios)
    return ScheduleRow(
        c, planned.scheduled_k, planned.fixed_k, scheduled.speedup, _ci(scheduled.speedup_ci),
        fixed.speedup, _ci(fixed.speedup_ci), holds(ratio_ci, tolerance), ratio_ci=ratio_ci,
    )  # fmt: skip
