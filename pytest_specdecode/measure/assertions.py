"""Gates on a :class:`~pytest_specdecode.measure.result.Result`; failures explain the figures."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigError, GateError, InconclusiveError
from .equivalence import DistributionCheck
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
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name}: expected a number, got {value!r}")
    return float(value)


def assert_speedup(result: Result, min: float) -> None:  # noqa: A002 - public name
    """Fail unless the measured speedup (baseline time / speculative time) is at least ``min``."""
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


#: Marker keyword → the assertion it runs.
GATES: dict[str, Callable[[Result, float], None]] = {
    "min_speedup": assert_speedup,
    "min_acceptance_rate": assert_acceptance_rate,
    "min_acceptance_length": assert_acceptance_length,
    "min_match_rate": assert_outputs_equivalent,
    "max_extra_memory_gib": assert_extra_memory,
}


def check_gates(result: Result, gates: dict[str, float]) -> list[str]:
    """Run every gate in ``gates`` on ``result``; returns the failure messages."""
    failures = []
    for name, threshold in gates.items():
        try:
            GATES[name](result, threshold)
        except GateError as exc:
            failures.append(str(exc))
    return failures
