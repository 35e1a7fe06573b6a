"""Gates on a :class:`~pytest_specdecode.measure.result.Result`, a
:class:`~pytest_specdecode.measure.load.LoadResult` and a
:class:`~pytest_specdecode.measure.kschedule.ScheduleCheck`; failures explain the figures."""

from __future__ import annotations

import math
from collections.abc import Callable

from ..engines.config import lossy
from ..errors import ConfigError, GateError, InconclusiveError
from .equivalence import DistributionCheck
from .kschedule import ScheduleCheck
from .load import LoadPoint, LoadResult, ms_text, rate_text
from .result import Result


def _where(result: Result) -> str:
    name = result.nodeid + (f" [{result.label}]" if result.label else "")
    return f"{name}: {result.method} k={result.num_speculative_tokens}"


def _ci(result: Result) -> str:
    low, high = result.speedup_ci
    return f"95% CI {low:.2f}x-{high:.2f}x over {result.trials} paired rounds"


def _fail(result: Result, message: str) -> None:
    raise GateError(message, result.key)


def _check_min(name: str, value: object) -> float:
    """A gate's threshold: a finite number (nan would pass every figure, inf fail every one)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


def assert_speedup(result: Result, min: float) -> None:  # noqa: A002 - public name
    """Fail unless the measured speedup (speculative / baseline output tokens per second) is at
    least ``min``."""
    threshold = _check_min("assert_speedup(min=...)", min)
    low, high = result.speedup_ci
    if result.adaptive and low < threshold <= high:
        raise InconclusiveError(
            f"{_where(result)}: speedup {result.speedup:.2f}x cannot be told from the minimum "
            f"{threshold:.2f}x: {_ci(result)} (adaptive trials ran out of rounds; raise "
            "--specdecode-max-trials, or quiet the machine)"
        )
    if result.speedup < threshold:
        _fail(
            result,
            f"{_where(result)}: speedup {result.speedup:.2f}x is below the minimum "
            f"{threshold:.2f}x ({_ci(result)}; baseline "
            f"{result.baseline.tokens_per_second:.1f} tok/s, speculative "
            f"{result.speculative.tokens_per_second:.1f} tok/s; acceptance rate "
            f"{result.acceptance_rate:.2f})",
        )


def assert_acceptance_rate(result: Result, min: float) -> None:  # noqa: A002
    """Fail unless accepted / draft tokens is at least ``min``."""
    threshold = _check_min("assert_acceptance_rate(min=...)", min)
    if result.acceptance_rate < threshold:
        per_pos = ", ".join(f"{p:.2f}" for p in result.acceptance_per_position)
        _fail(
            result,
            f"{_where(result)}: acceptance rate {result.acceptance_rate:.3f} is below the "
            f"minimum {threshold:.3f} ({result.num_accepted_tokens} of "
            f"{result.num_draft_tokens} draft tokens accepted over {result.num_drafts} "
            f"drafts; per position [{per_pos}]; speedup {result.speedup:.2f}x, {_ci(result)})",
        )


def assert_acceptance_length(result: Result, min: float) -> None:  # noqa: A002
    """Fail unless the mean acceptance length (1 + accepted / drafts) is at least ``min``."""
    threshold = _check_min("assert_acceptance_length(min=...)", min)
    if result.mean_acceptance_length < threshold:
        _fail(
            result,
            f"{_where(result)}: mean acceptance length {result.mean_acceptance_length:.2f} "
            f"is below the minimum {threshold:.2f} (of at most "
            f"{result.num_speculative_tokens + 1}; {result.num_drafts} drafts; speedup "
            f"{result.speedup:.2f}x, {_ci(result)})",
        )


def _assert_same_distribution(check: DistributionCheck) -> None:
    if check.passed:
        return
    worst = check.worst
    detail = ""
    if worst is not None:
        fmt = ", ".join
        detail = (
            f"; worst: prompt {worst.prompt_index}, token {worst.position}: chi2 "
            f"{worst.statistic:.1f} (df {worst.df}), baseline top "
            f"[{fmt(f'{t}: {p:.2f}' for t, p in worst.top_baseline)}], speculative top "
            f"[{fmt(f'{t}: {p:.2f}' for t, p in worst.top_speculative)}]"
        )
    raise GateError(
        f"{check.nodeid}: the speculative engine samples another distribution at temperature "
        f"{check.temperature:g}: p = {check.p_value:.2g} < {check.alpha:g} ({check.rule}, "
        f"{check.samples_per_engine} samples of "
        f"{check.tokens} tokens per engine){detail}"
    )


def assert_outputs_equivalent(
    result: Result | DistributionCheck, min_match_rate: float = 1.0
) -> None:
    """Fail unless the speculative engine's outputs match the baseline's.

    For a greedy :class:`Result` (temperature 0): at least ``min_match_rate`` of prompts must
    give identical token ids. Speculative *sampling* is lossless in distribution, not sample by
    sample: at temperature > 0 pass the :class:`DistributionCheck` from
    ``specdecode.sample_equivalence(...)``, which fails when its p-value is below its alpha.
    """
    if isinstance(result, DistributionCheck):
        _assert_same_distribution(result)
        return
    threshold = _check_min("assert_outputs_equivalent(min_match_rate=...)", min_match_rate)
    why = lossy(result.speculative_config)
    if why is not None:
        raise ConfigError(
            f"{_where(result)}: assert_outputs_equivalent on a result whose speculative engine "
            f"is {why}; leave the equivalence check out for this config"
        )
    if result.temperature > 0:
        raise ConfigError(
            f"{_where(result)}: exact output equivalence needs greedy decoding, but this run "
            f"used temperature={result.temperature:g}; gate sampling with "
            "assert_outputs_equivalent(specdecode.sample_equivalence(prompts, "
            f"temperature={result.temperature:g})), or run with temperature=0.0"
        )
    if result.match_rate < threshold:
        shown = result.divergences[:5]
        lines = [
            f"prompt {d.prompt_index}: first differs at token {d.token_index} "
            f"(baseline {d.baseline_token}, speculative {d.speculative_token})"
            for d in shown
        ]
        more = len(result.divergences) - len(shown)
        if more > 0:
            lines.append(f"... and {more} more")
        _fail(
            result,
            f"{_where(result)}: match rate {result.match_rate:.2f} is below the minimum "
            f"{threshold:.2f} ({len(result.divergences)} of {result.num_prompts} prompts "
            "diverged):\n  " + "\n  ".join(lines),
        )


def assert_extra_memory(result: Result, max: float) -> None:  # noqa: A002
    """Fail if the proposer holds more than ``max`` GiB: the extra-memory figure, the draft's
    weights plus its KV cache (``Result.extra_memory_gib``; unknown passes)."""
    threshold = _check_min("assert_extra_memory(max=...)", max)
    extra = result.extra_memory_gib
    if extra is not None and extra > threshold:
        parts = result.notes.get("memory")
        _fail(
            result,
            f"{_where(result)}: speculation costs {extra:.2f} GiB more memory than the "
            f"baseline, above the maximum {threshold:.2f} GiB" + (f" ({parts})" if parts else ""),
        )


def _load_point(result: LoadResult, at_rate: float | None, call: str) -> LoadPoint:
    """The point a load gate checks: the one at ``at_rate``, else the lowest rate measured."""
    if not isinstance(result, LoadResult):
        raise ConfigError(
            f"{call}: expected the LoadResult that specdecode.load(...) returns, got "
            f"{type(result).__name__}"
        )
    if at_rate is None:
        return result.points[0]
    if isinstance(at_rate, bool) or not isinstance(at_rate, int | float):
        raise ConfigError(f"{call}: at_rate must be a rate in requests per second, got {at_rate!r}")
    try:
        return result.at(float(at_rate))
    except ConfigError as exc:
        raise ConfigError(f"{call}: {exc}") from None


def _load_where(result: LoadResult, point: LoadPoint) -> str:
    return (
        f"{result.key}: {result.method} k={result.num_speculative_tokens} at "
        f"{rate_text(point.rate)} ({point.baseline.requests} requests per engine)"
    )


def assert_latency_gain(
    result: LoadResult,
    at_rate: float | None = None,
    min: float = 1.0,  # noqa: A002 - public name
) -> None:
    """Fail unless speculation lowers p50 TPOT by at least ``min`` at ``at_rate`` (requests per
    second, a rate the load measured; default: the lowest): baseline p50 TPOT / speculative
    p50 TPOT >= ``min``."""
    threshold = _check_min("assert_latency_gain(min=...)", min)
    point = _load_point(result, at_rate, "assert_latency_gain(at_rate=...)")
    gain = point.tpot_speedup
    if not gain >= threshold:  # nan (no TPOT measured) fails too
        low, high = point.tpot_speedup_ci
        b, s = point.baseline, point.speculative
        raise GateError(
            f"{_load_where(result, point)}: p50 TPOT gain {gain:.2f}x is below the minimum "
            f"{threshold:.2f}x (95% CI {low:.2f}x-{high:.2f}x; p50 TPOT baseline "
            f"{ms_text(b.tpot, 50)}, speculative {ms_text(s.tpot, 50)}; p99 TPOT "
            f"{ms_text(b.tpot, 99)} vs {ms_text(s.tpot, 99)}; acceptance rate "
            f"{point.acceptance_rate:.2f}; {result.traffic_line()})"
        )


def assert_goodput(
    result: LoadResult, at_rate: float | None = None, min_ratio: float = 1.0
) -> None:
    """Fail unless the speculative engine's goodput (requests per second meeting the load's
    SLO) is at least ``min_ratio`` times the baseline's at ``at_rate`` (default: the lowest
    rate measured). Needs ``load(..., slo={...})``."""
    threshold = _check_min("assert_goodput(min_ratio=...)", min_ratio)
    point = _load_point(result, at_rate, "assert_goodput(at_rate=...)")
    ratio = point.goodput_ratio
    if ratio is None:
        raise ConfigError(
            f"{result.key}: assert_goodput needs an SLO; measure with "
            'specdecode.load(..., slo={"ttft_ms": 500, "tpot_ms": 50})'
        )
    if ratio < threshold:
        b, s = point.baseline, point.speculative
        bounds = ", ".join(f"{k} {v:g}" for k, v in result.slo.items())
        raise GateError(
            f"{_load_where(result, point)}: goodput ratio {ratio:.2f} is below the minimum "
            f"{threshold:.2f} (goodput under the SLO {bounds}: baseline {b.goodput:.3f} req/s, "
            f"speculative {s.goodput:.3f} req/s; p99 TTFT {ms_text(b.ttft, 99)} vs "
            f"{ms_text(s.ttft, 99)}, p99 TPOT {ms_text(b.tpot, 99)} vs {ms_text(s.tpot, 99)})"
        )


#: Marker keyword → the assertion it runs.
GATES: dict[str, Callable[[Result, float], None]] = {
    "min_speedup": assert_speedup,
    "min_acceptance_rate": assert_acceptance_rate,
    "min_acceptance_length": assert_acceptance_length,
    "min_match_rate": assert_outputs_equivalent,
    "max_extra_memory_gib": assert_extra_memory,
}


def assert_schedule_holds(check: ScheduleCheck) -> None:
    """Fail where the schedule is shown slower than the best fixed k at a concurrency of
    ``check`` (from ``specdecode.check_schedule``): the upper end of the 95% interval of its
    speedup over the fixed k's below ``1 - tolerance``."""
    if not isinstance(check, ScheduleCheck):
        raise ConfigError(
            "assert_schedule_holds(check): expected the ScheduleCheck of check_schedule(), got "
            f"{type(check).__name__}"
        )
    if check.holds:
        return
    rows = "; ".join(
        f"{row.describe()} (the interval of schedule/fixed needs to reach "
        f"{1 - check.tolerance:.2f})"
        for row in check.failing
    )
    raise GateError(
        f"{check.nodeid}: the k schedule ({check.schedule.summary()}) is more than "
        f"{check.tolerance:.0%} slower than the best fixed k at "
        f"{', '.join(f'concurrency {r.concurrency}' for r in check.failing)}: {rows}. "
        "Sweep again with more trials, or drop the schedule's ranges there (use the fixed k)"
    )


def check_gates(result: Result, gates: dict[str, float]) -> list[str]:
    """Run every gate in ``gates`` on ``result``; returns the failure messages. A lossy
    result (synthetic acceptance; its ``notes["lossy"]`` says so) skips ``min_match_rate``."""
    failures = []
    for name, threshold in gates.items():
        if name not in GATES:  # a load gate, or its rate
            continue
        if name == "min_match_rate" and lossy(result.speculative_config) is not None:
            continue  # a lossy method: the result's notes say the gate does not apply
        try:
            GATES[name](result, threshold)
        except GateError as exc:
            failures.append(str(exc))
    return failures


#: Marker keyword → the load assertion it runs (at the marker's ``at_rate``).
LOAD_GATES: dict[str, Callable[[LoadResult, float | None, float], None]] = {
    "min_latency_gain": assert_latency_gain,
    "min_goodput_ratio": assert_goodput,
}


def check_load_gates(result: LoadResult, gates: dict[str, float]) -> list[str]:
    """Run every load gate in ``gates`` on ``result`` at ``gates["at_rate"]`` (default: the
    lowest rate measured); returns the failure messages."""
    failures = []
    at_rate = gates.get("at_rate")
    for name, threshold in gates.items():
        if name in LOAD_GATES:
            try:
                LOAD_GATES[name](result, at_rate, threshold)
            except GateError as exc:
                failures.append(str(exc))
    return failures
