"""Decisions that look at the data after every round, with their error rates kept.

Two rules live here, both pure functions of per-round log ratios:

- :func:`decide`, the regression rule against a stored baseline: Wald's sequential probability
  ratio test between "no change" and "a drop of twice the tolerance" (10% at the default
  ``speedup:5%``), on the information the two runs carry: the per-round variance is pooled from
  the stored rounds and the new ones (the larger of that and the new run's own, so a noisier new
  run is not judged with the baseline's calm), and a measured between-session variance (at its
  upper confidence bound) is added. A drop is only called when its estimate also exceeds the
  tolerance (the practical floor). Run online (stop when it decides) and replayed on the stored
  rounds at the end of the session, it gives the same answer. Location and variance of each run
  are robust (:func:`robust_location`: a Huber M-estimate with a MAD scale), so that a stalled
  round (a CI runner that paused one engine) moves the decision by a bounded amount.
- :func:`repeated_interval`, the interval of a run that stopped when its data said so
  (adaptive trials, or the rule above): a repeated confidence interval whose per-look level
  is calibrated so that all looks from round :data:`MIN_ROUNDS` to the most rounds allowed
  cover together at 95%; a gate at the true value then errs at most 2.5% each way.

The error rates these give are measured, not derived: ``python benchmarks/decisions.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .model import Form, Record, json
from .stats import t_quantile, variance_bound

#: Fewest rounds before any sequential look (and the first look of adaptive trials).
MIN_ROUNDS = 3
#: Nominal error targets of the test: false alarm (before the floor and the baseline's own
#: error, which the benchmark measures) and miss against the designed drop.
NOMINAL_ALPHA = 0.005
NOMINAL_BETA = 0.05
#: One-sided z a run that reached its most rounds undecided must exceed to be called changed.
TRUNCATION_Z = 2.326
#: Fewest stored sessions from which a between-session variance is estimated.
MIN_SESSIONS = 3
#: The upper confidence bound at which the rule takes the spread of the saving sessions' means
#: (:func:`session_variance`), and its z.
SESSION_CONFIDENCE = 0.75
SESSION_Z = 0.6745

#: Huber's tuning constant, in robust sd (1.4826 x MAD): log ratios further than this from
#: the estimate count as this far. 96% efficient for normal noise, 1.85x for t(3) noise.
HUBER_K = 1.5
#: The normal-consistent factor of the median absolute deviation.
_MAD_SD = 1.4826

#: The looks are held to 90% of the table's level: a margin over its Monte Carlo error, so that
#: a gate at the true value errs under 2.5% each way (benchmarks/decisions.py adaptive).
_MARGIN = 0.9

# Per-look two-sided level of a repeated 95% t-interval over looks MIN_ROUNDS..N, by N
# (200,000 simulated normal runs; beyond the table, Bonferroni over the looks, which is valid
# and conservative). See benchmarks/decisions.py for the coverage it gives.
_LOOK_LEVEL = {
    3: 0.05004, 4: 0.03016, 5: 0.02262, 6: 0.01861, 7: 0.01609, 8: 0.01435, 9: 0.01298,
    10: 0.01195, 11: 0.01118, 12: 0.0106, 13: 0.01003, 14: 0.00959, 15: 0.00917, 16: 0.00878,
    17: 0.00843, 18: 0.00815, 19: 0.00793, 20: 0.00771, 21: 0.00749, 22: 0.0073, 23: 0.00713,
    24: 0.00698, 25: 0.00684, 26: 0.00674, 27: 0.00661, 28: 0.00649, 29: 0.00639, 30: 0.00627,
    31: 0.00618, 32: 0.00608, 33: 0.006, 34: 0.00592, 35: 0.00585, 36: 0.00577, 37: 0.0057,
    38: 0.00563, 39: 0.00556, 40: 0.00549, 41: 0.00542, 42: 0.00537, 43: 0.00532, 44: 0.00528,
    45: 0.00523, 46: 0.00519, 47: 0.00515, 48: 0.00512, 49: 0.00507, 50: 0.00503, 51: 0.00499,
    52: 0.00495, 53: 0.00491, 54: 0.00488, 55: 0.00485, 56: 0.00482, 57: 0.00479, 58: 0.00476,
    59: 0.00473, 60: 0.00471,
}  # fmt: skip


def look_level(max_rounds: int) -> float:
    """Two-sided level of each look so that looks ``MIN_ROUNDS..max_rounds`` err 5% jointly."""
    if max_rounds <= MIN_ROUNDS:
        return 0.05 * _MARGIN
    return (_LOOK_LEVEL.get(max_rounds) or 0.05 / (max_rounds - MIN_ROUNDS + 1)) * _MARGIN


def repeated_interval(
    ratios: Sequence[float], max_rounds: int
) -> tuple[float, tuple[float, float]]:
    """Geometric mean of ``ratios`` and its repeated 95% interval for a run that could have
    stopped at any round from :data:`MIN_ROUNDS` to ``max_rounds``."""
    logs = _logs(ratios)
    n = len(logs)
    if n < 2:
        raise ValueError("at least two paired rounds are needed for an interval")
    mean = sum(logs) / n
    var = sum((x - mean) ** 2 for x in logs) / (n - 1)
    level = look_level(max(max_rounds, n)) if n >= MIN_ROUNDS else 0.05
    half = t_quantile(1 - level / 2, n - 1) * math.sqrt(var / n)
    return math.exp(mean), (math.exp(mean - half), math.exp(mean + half))


def _logs(ratios: Sequence[float]) -> list[float]:
    if any(not math.isfinite(r) or r <= 0 for r in ratios):
        raise ValueError(f"ratios must be positive and finite, got {list(ratios)}")
    return [math.log(r) for r in ratios]


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    return mean, (sum((x - mean) ** 2 for x in values) / (n - 1) if n > 1 else 0.0)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


def robust_scale(values: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation from the median: the sd for normal data, and
    not moved by a few outliers."""
    centre = _median(values)
    return _MAD_SD * _median([abs(x - centre) for x in values])


def robust_location(values: Sequence[float], scale: float | None = None) -> tuple[float, float]:
    """Huber M-estimate of the location of ``values`` and its per-value variance.

    Values further than :data:`HUBER_K` x ``scale`` (default :func:`robust_scale`) from the
    estimate count as that far; the variance is the sandwich ``scale² · mean(ψ²) /
    mean(ψ')²`` with an ``n / (n - 1)`` correction, so where nothing is that far out both are
    the plain mean and sample variance. With no spread (a zero scale) they are those too.
    """
    n = len(values)
    scale = robust_scale(values) if scale is None else scale
    if n < 2 or scale <= 0:
        return _mean_var(values)
    limit = HUBER_K * scale
    location = _median(values)
    for _ in range(100):  # iteratively reweighted mean; converges in a few steps
        weights = [1.0 if abs(x - location) <= limit else limit / abs(x - location) for x in values]
        moved = sum(w * x for w, x in zip(weights, values, strict=True)) / sum(weights)
        done = abs(moved - location) <= 1e-12 * scale
        location = moved
        if done:
            break
    clipped = [max(-limit, min(limit, x - location)) for x in values]
    inside = sum(abs(x - location) < limit for x in values) / n
    var = sum(c * c for c in clipped) / (n - 1) / max(inside, 1 / n) ** 2
    return location, var


@dataclass(frozen=True)
class Session(Record):
    """One saving session's summary of a result: mean and variance of its log ratios."""

    JSON = Form("session", inline=True)

    mean: float = field(metadata=json(name="mean_log_ratio", read=float))
    var: float = field(metadata=json(name="var_log_ratio", read=float, schema={"minimum": 0}))
    rounds: int = field(metadata=json(read=int, schema={"minimum": 2}))

    @classmethod
    def of(cls, ratios: Sequence[float]) -> Session:
        mean, var = robust_location(_logs(ratios))
        return cls(mean, var, len(ratios))


def session_variance(sessions: Sequence[Session]) -> float | None:
    """Between-session variance of the log speedup (method of moments: the spread of the
    sessions' means, at its upper :data:`SESSION_CONFIDENCE` confidence bound, less what their
    rounds explain); None with fewer than :data:`MIN_SESSIONS` sessions. The bound keeps the
    false alarms of a rule that trusts a few sessions' spread within its target."""
    if len(sessions) < MIN_SESSIONS:
        return None
    _, spread = _mean_var([s.mean for s in sessions])
    within = sum(s.var / s.rounds for s in sessions) / len(sessions)
    return max(0.0, spread * variance_bound(len(sessions) - 1, SESSION_Z) - within)


@dataclass(frozen=True)
class Reference:
    """What a stored baseline says about one result's speedup."""

    logs: tuple[float, ...]  # stored per-round log ratios
    session_var: float = 0.0  # between-session variance (0: not measured)
    sessions: int = 1  # saving sessions behind session_var
    compared: int | None = None  # most rounds a compared run takes (None: the caller's)

    @classmethod
    def of(
        cls, ratios: Sequence[float], sessions: Sequence[Session] = (), compared: int | None = None
    ) -> Reference:
        tau2 = session_variance(sessions)
        n = len(sessions) if tau2 is not None else 1
        return cls(tuple(_logs(ratios)), tau2 or 0.0, n, compared)


@dataclass(frozen=True)
class Decision:
    """The regression rule's answer after the rounds it saw."""

    status: str  # "regressed", "improved", "unchanged" or "undecided" (may go on)
    rounds: int  # rounds when it decided (all of them when it did not)
    change: float  # estimated relative change of the speedup (new / stored - 1)
    z: float  # estimated log drop over its standard error (positive: slower)

    @property
    def p_value(self) -> float:
        """One-sided p of "the speedup fell" (of "it rose" when improved), from ``z``."""
        z = -self.z if self.status == "improved" else self.z
        return 0.5 * math.erfc(z / math.sqrt(2))

    @property
    def decided(self) -> bool:
        return self.status != "undecided"


#: The largest drop a rule is designed to catch (relative), whatever its tolerance.
MOST_DESIGNED = 0.9


def designed_relative_drop(tolerance: float) -> float:
    """The relative drop the rules are designed to catch: twice the (relative) tolerance, at
    most :data:`MOST_DESIGNED`."""
    return min(2 * tolerance, MOST_DESIGNED)


def designed_drop(tolerance: float) -> float:
    """The log drop the test is designed to catch (:func:`designed_relative_drop`)."""
    return -math.log(1 - designed_relative_drop(tolerance))


def decide(
    reference: Reference, ratios: Sequence[float], tolerance: float, *, final: bool = True
) -> Decision:
    """The regression rule on the new run's ``ratios`` in the order measured.

    The first round (from :data:`MIN_ROUNDS` on) at which the test crosses a boundary
    decides. A run that ends undecided is, when ``final``, called changed only when its
    one-sided z exceeds :data:`TRUNCATION_Z` and the change exceeds the tolerance; otherwise
    unchanged. Improvements are judged at the round it decided, the same way (they never fail
    CI).
    """
    new = _logs(ratios)
    if len(reference.logs) < 2 or len(new) < 2:
        raise ValueError("the rule needs at least two stored and two new rounds")
    base_scale = robust_scale(reference.logs)
    base_mean, base_var = robust_location(reference.logs, base_scale)
    n_b = len(reference.logs)
    drop, floor = designed_drop(tolerance), -math.log(1 - tolerance)
    upper = math.log((1 - NOMINAL_BETA) / NOMINAL_ALPHA)
    lower = math.log(NOMINAL_BETA / (1 - NOMINAL_ALPHA))
    d, z, _ = _estimate(base_mean, base_var, base_scale, n_b, new, reference.session_var)
    for n in range(MIN_ROUNDS, len(new) + 1):
        d, z, info = _estimate(base_mean, base_var, base_scale, n_b, new[:n], reference.session_var)
        llr = drop * d * info - drop * drop * info / 2
        if llr >= upper and d >= floor:
            return Decision("regressed", n, _change(d), z)
        if llr <= lower:
            return _improved_or(Decision("unchanged", n, _change(d), z), floor)
    undecided = Decision("undecided", len(new), _change(d), z)
    if not final:
        return undecided
    if z > TRUNCATION_Z and d >= floor:
        return Decision("regressed", len(new), undecided.change, z)
    return _improved_or(Decision("unchanged", len(new), undecided.change, z), floor)


def _change(log_drop: float) -> float:
    """The relative change of the speedup for an estimated log drop (inf where it overflows:
    a stored speedup near zero)."""
    try:
        return math.expm1(-log_drop)
    except OverflowError:
        return math.inf


def _estimate(
    base_mean: float,
    base_var: float,
    base_scale: float,
    n_b: int,
    new: Sequence[float],
    session_var: float,
) -> tuple[float, float, float]:
    """Estimated log drop, its z, and the information behind it: the variance
    pooled from both runs, at least the new run's own, plus the between-session variance.
    The new run's Huber scale is the baseline's or, when larger, its own."""
    n = len(new)
    mean, var = robust_location(new, max(base_scale, robust_scale(new)))
    pooled = ((n_b - 1) * base_var + (n - 1) * var) / (n_b + n - 2)
    s2 = max(pooled, var, 1e-12)
    info = 1 / (s2 / n + s2 / n_b + 2 * session_var)
    d = base_mean - mean
    z = d * math.sqrt(info)
    return d, z, info


def _improved_or(decision: Decision, floor: float) -> Decision:
    """``decision``, or "improved" when the rounds show a rise beyond the tolerance."""
    if decision.z < -TRUNCATION_Z and math.log1p(decision.change) >= floor:
        return Decision("improved", decision.rounds, decision.change, decision.z)
    return decision
