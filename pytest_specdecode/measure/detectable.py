"""What a stored baseline can see: the smallest drop the regression rules catch.

A baseline's rounds fix how well a later run can be judged against it. The *detectable drop*
of a figure is the smallest relative drop that the figure's rule catches with
:data:`POWER` probability when a compared run takes at most ``compared`` rounds. It is found
by simulating the rule itself, not a formula:

- the speedup: :func:`~.sequential.decide` on simulated stored and compared runs whose per-round
  log ratios are resampled from the stored run's own (centred on their robust location, so a
  stalled round in the baseline is as likely in the simulation), each run shifted by a
  between-session offset of the measured variance;
- every other figure with per-round values: the two-gate rule of
  :func:`~pytest_specdecode.baselines.compare.compare_one` (a drop beyond the tolerance that a
  one-sided Welch t-test at ``alpha`` also finds), on values resampled the same way, the
  compared run taking ``compared`` rounds.

The same simulated draws serve every drop tried (common random numbers), so the share caught
rises with the drop and the search is exact to :data:`RESOLUTION`; the draws come from a
fixed seed, so the same rounds always give the same figure. A drop of twice the tolerance is
what the rules are designed to catch (:func:`~.sequential.designed_relative_drop`); a figure
whose detectable drop is larger cannot see it (it is *blind*).

The stored rounds' spread is an estimate, and a run whose rounds happened to look calm would
see drops it cannot. So the simulations scale the residuals to the spread's upper
:data:`SPREAD_CONFIDENCE` confidence bound (:func:`spread_inflation`): the saving run's plan
from its first rounds and the detectable drop of the rounds it saved alike.

:func:`sized_stop` is the stopping rule of a saving session sized by its noise: it stops once
the rounds saved so far can see the declared drop with the compared rounds they plan
(:func:`compared_rounds`). The error rates of the whole design are measured in
``benchmarks/decisions.py sized``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..tolerances import Tolerance
from .model import Form, Record, json
from .sequential import (
    MIN_ROUNDS,
    MOST_DESIGNED,
    Reference,
    decide,
    designed_relative_drop,
    robust_location,
)
from .stats import variance_bound, welch_less

#: Share of drops of the detectable size the rule catches.
POWER = 0.95
#: Simulated compared runs per drop tried (Monte Carlo sd of the share near POWER: 1.1 points).
REPS = 400
#: The largest drop searched (relative); a figure that cannot see this reports ``inf``.
MOST_DROP = MOST_DESIGNED
#: Precision of the search, as a share of the declared drop.
RESOLUTION = 0.02
#: A bound on the search's halvings (a float interval cannot usefully halve more often).
_MOST_HALVINGS = 64
#: The compared rounds of a baseline saved with at most this many rounds (the old default).
LEAST_COMPARED = 20
#: A saving session sized by its noise plans its rounds after this many (a multiple of
#: :data:`LOOK_EVERY`, at most its cap).
FIRST_LOOK = 20
LOOK_EVERY = 5
#: The upper confidence bound of the rounds' sd that the simulations assume, and its z (the
#: error rates it gives: ``benchmarks/decisions.py sized``, on the validation page).
SPREAD_CONFIDENCE = 0.9
_SPREAD_Z = 1.2816
#: Rounds of a saving run whose engines cannot stop early (a pool of one engine), and of a
#: fixed ``baseline_trials`` before sizing existed.
DEFAULT_SAVED = 30
_SEED = 20261205


@dataclass(frozen=True)
class Detectable(Record):
    """The smallest drop of a figure its rule catches with :data:`POWER` probability
    (``math.inf``: not even the largest searched) and the drop the rule is designed to catch
    (twice the tolerance), both relative for a % tolerance, else absolute."""

    JSON = Form(
        "detectable",
        "the smallest drop of a figure its regression rule catches with 95% probability "
        '(drop; "none": not even a 90% drop, or 10 times the designed drop of an absolute '
        "tolerance), found by simulating the rule on the stored result's own rounds, and the "
        "drop the rule is designed to catch (designed: twice the tolerance). Both are shares "
        "of the stored value for a % tolerance (relative true), else absolute amounts. drop "
        "above designed: the comparison cannot see the drop it is designed to catch",
        required=("relative",),
        schema={"additionalProperties": False},
    )

    #: ``"none"`` in JSON for infinity
    drop: float = field(
        metadata=json(
            write=lambda d: "none" if math.isinf(d) else d,
            read=lambda v: math.inf if v == "none" else float(v),
            schema={"oneOf": [{"type": "number", "minimum": 0}, {"const": "none"}]},
            replace=True,
        )
    )
    designed: float = field(metadata=json(read=float, schema={"minimum": 0}))
    relative: bool = True

    @property
    def blind(self) -> bool:
        """Whether the designed drop would go unseen more than 1 - POWER of the time."""
        return self.drop > self.designed

    def text(self) -> str:
        """``"8.7%"``, ``"0.031"``, ``"none up to 90%"``."""
        if math.isinf(self.drop):
            return f"none up to {MOST_DROP:.0%}" if self.relative else "none up to 10x"
        return f"{self.drop * 100:.1f}%" if self.relative else f"{self.drop:.3g}"


def compared_rounds(saved: int, cap: int) -> int:
    """The most rounds a compared run takes against a baseline of ``saved`` rounds: two thirds
    of them, at least :data:`LEAST_COMPARED`, at most ``cap``."""
    return max(MIN_ROUNDS, min(cap, max(LEAST_COMPARED, math.ceil(2 * saved / 3))))


def _residuals(values: Sequence[float]) -> list[float]:
    """``values`` less their robust location, scaled up by sqrt(n / (n - 1)) (a resample of n
    values from n spreads less than the values did) and to their spread's upper confidence
    bound (:func:`spread_inflation`)."""
    centre, _ = robust_location(values)
    n = len(values)
    inflate = math.sqrt(n / (n - 1)) * spread_inflation(n) if n > 1 else 1.0
    return [(v - centre) * inflate for v in values]


@dataclass(frozen=True)
class _Draws:
    """The simulated runs, as offsets from the truth: stored and compared, one pair per rep."""

    stored: tuple[tuple[float, ...], ...]
    compared: tuple[tuple[float, ...], ...]

    @classmethod
    def of(
        cls, residuals: Sequence[float], n_stored: int, n_compared: int, session_var: float
    ) -> _Draws:
        rng = random.Random(_SEED)
        tau = math.sqrt(session_var)
        stored, compared = [], []
        for _ in range(REPS):
            a = rng.gauss(0.0, tau) if tau else 0.0
            b = rng.gauss(0.0, tau) if tau else 0.0
            stored.append(tuple(a + rng.choice(residuals) for _ in range(n_stored)))
            compared.append(tuple(b + rng.choice(residuals) for _ in range(n_compared)))
        return cls(tuple(stored), tuple(compared))


#: Simulated runs of :data:`REPS` that must catch a drop for it to count as detectable.
NEEDED = round(POWER * REPS)

Enough = Callable[[float], bool]


def _enough(hit: Callable[[int, float], bool]) -> Enough:
    """Whether ``hit(rep, drop)`` holds in at least :data:`NEEDED` of the reps; stops
    simulating as soon as the answer is known."""

    def enough(drop: float) -> bool:
        misses = 0
        for rep in range(REPS):
            misses += not hit(rep, drop)
            if misses > REPS - NEEDED:
                return False
            if misses + REPS - rep - 1 <= REPS - NEEDED:
                return True
        return True

    return enough


def _speedup_enough(
    logs: Sequence[float],
    compared: int,
    tolerance: float,
    session_var: float,
    sessions: int,
    *,
    stored: int | None = None,
) -> Enough:
    """Whether a drop is caught often enough against ``stored`` rounds (default: as many as
    ``logs``) drawn from the residuals of ``logs``."""
    draws = _Draws.of(_residuals(logs), stored or len(logs), compared, session_var)
    references = [Reference(stored, session_var, sessions) for stored in draws.stored]

    def hit(rep: int, drop: float) -> bool:
        log_drop = -math.log1p(-drop)
        ratios = [math.exp(x - log_drop) for x in draws.compared[rep]]
        return decide(references[rep], ratios, tolerance).status == "regressed"

    return _enough(hit)


def _two_gate_enough(
    values: Sequence[float], compared: int, tolerance: float, relative: bool, log: bool,
    alpha: float,
) -> Enough:  # fmt: skip
    scale = [math.log(v) for v in values] if log else list(values)
    draws = _Draws.of(_residuals(scale), len(values), compared, 0.0)
    centre, _ = robust_location(scale)
    rule = Tolerance("", tolerance, relative)  # its floor, as compare_one applies it

    def hit(rep: int, drop: float) -> bool:
        stored, new = draws.stored[rep], draws.compared[rep]
        if log:
            b = [centre + x for x in stored]
            a = [centre + math.log1p(-drop) + x for x in new]
            old_v = sum(math.exp(x) for x in b) / len(b)
            new_v = sum(math.exp(x) for x in a) / len(a)
        else:
            shift = centre * drop if relative else drop
            b = [centre + x for x in stored]
            a = [centre - shift + x for x in new]
            old_v, new_v = sum(b) / len(b), sum(a) / len(a)
        return new_v < rule.floor(old_v) and welch_less(a, b) < alpha

    return _enough(hit)


def _search(enough: Enough, declared: float, least: float, most: float) -> float:
    """The smallest drop in (``least``, ``most``] that is caught often enough (``inf`` when
    ``most`` is not), bracketed on the side of ``declared`` its own answer puts it, so the
    result is above ``declared`` exactly when ``declared`` is not caught often enough.

    It ends whatever ``declared`` is: a zero one (a tolerance of 0, which the tolerance parser
    refuses) is searched to :data:`RESOLUTION` of ``most`` instead, and a tiny one stops after
    :data:`_MOST_HALVINGS` halvings."""
    if enough(declared):
        low, high = least, declared
    else:
        if not enough(most):
            return math.inf
        low, high = declared, most
    precision = RESOLUTION * (declared if declared > 0 else most)
    for _ in range(_MOST_HALVINGS):
        if not high - low > precision:
            break
        middle = (low + high) / 2
        if enough(middle):
            high = middle
        else:
            low = middle
    return high


def speedup_drop(
    ratios: Sequence[float],
    compared: int,
    tolerance: float,
    session_var: float = 0.0,
    sessions: int = 1,
) -> Detectable:
    """The relative speedup drop the regression rule catches with :data:`POWER` probability
    against a baseline of these per-round ``ratios`` when a compared run takes at most
    ``compared`` rounds (``tolerance`` relative; ``session_var`` the measured
    between-session variance of the log speedup, from ``sessions`` saving sessions)."""
    logs = [math.log(r) for r in ratios]
    enough = _speedup_enough(logs, compared, tolerance, session_var, sessions)
    designed = designed_relative_drop(tolerance)
    return Detectable(_search(enough, designed, tolerance, MOST_DROP), designed)


def figure_drop(
    values: Sequence[float],
    compared: int,
    tolerance: float,
    *,
    relative: bool,
    log: bool,
    alpha: float,
) -> Detectable:
    """The drop of a figure judged by the two-gate rule that is caught with :data:`POWER`
    probability from these stored per-round ``values`` and a compared run of ``compared``
    rounds: relative to the stored level for a relative ``tolerance``, else absolute."""
    designed = designed_relative_drop(tolerance) if relative else 2 * tolerance
    if len(values) < 2 or (log and min(values) <= 0):
        return Detectable(math.inf, designed, relative)
    enough = _two_gate_enough(values, compared, tolerance, relative, log, alpha)
    most = MOST_DROP if relative else 10 * designed
    return Detectable(_search(enough, designed, tolerance, most), designed, relative)


def sees(
    ratios: Sequence[float],
    compared: int,
    tolerance: float,
    session_var: float = 0.0,
    sessions: int = 1,
) -> bool:
    """Whether a baseline of these ``ratios`` lets the regression rule catch
    :func:`~.sequential.designed_relative_drop` with :data:`POWER` probability in ``compared``
    rounds: exactly when :func:`speedup_drop` (same arguments) is at most that drop."""
    logs = [math.log(r) for r in ratios]
    enough = _speedup_enough(logs, compared, tolerance, session_var, sessions)
    return enough(designed_relative_drop(tolerance))


def relative_tolerance(tolerance: Tolerance, speedup: float) -> float:
    """A speedup tolerance as a relative drop (an absolute amount relative to ``speedup``)."""
    return tolerance.amount if tolerance.relative else tolerance.amount / max(speedup, 1e-9)


def spread_inflation(rounds: int) -> float:
    """How much the simulations scale the spread of ``rounds`` rounds: their sd's upper
    :data:`SPREAD_CONFIDENCE` confidence bound over the sd (chi-square with rounds - 1
    degrees of freedom, :func:`~.stats.variance_bound`): 1.28 at 20 rounds, 1.11 at 90."""
    return math.sqrt(variance_bound(rounds - 1, _SPREAD_Z))


def planned_rounds(ratios: Sequence[float], tolerance: float, most: int, compare_cap: int) -> int:
    """The rounds a saving run takes, planned once from its first rounds (Stein's two-stage
    design, so that stopping does not favour rounds that happened to be calm): the fewest of
    ``len(ratios)``, then every :data:`LOOK_EVERY`, up to ``most``, whose simulated baselines,
    drawn from these rounds (their spread scaled by :func:`spread_inflation`), let the rule
    catch :func:`~.sequential.designed_relative_drop` with :data:`POWER` probability in the
    compared rounds they plan; ``most`` when none does."""
    logs = [math.log(r) for r in ratios]
    declared = designed_relative_drop(tolerance)
    candidates: list[int] = [*range(len(logs), most, LOOK_EVERY), most]
    for n in candidates:
        compared = compared_rounds(n, compare_cap)
        enough = _speedup_enough(logs, compared, tolerance, 0.0, 1, stored=n)
        if enough(declared):
            return n
    return most


@dataclass(frozen=True)
class SavePlan:
    """How a saving run sized by its noise takes its rounds: until they see a drop of twice
    the speedup ``tolerance`` with the compared rounds they plan (at most ``compare_cap``),
    at most ``most`` rounds; ``fixed`` rounds where the engines cannot stop early (a pool of
    one engine)."""

    tolerance: Tolerance
    most: int
    compare_cap: int
    fixed: int = DEFAULT_SAVED

    def stop(self) -> Callable[[list[float]], bool]:
        """A fresh stopping rule for one run (:func:`sized_stop`; an absolute tolerance taken
        relative to the first rounds' speedup)."""
        rule: list[Callable[[list[float]], bool]] = []

        def stop(ratios: list[float]) -> bool:
            if not rule:
                speedup = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
                tolerance = relative_tolerance(self.tolerance, speedup)
                rule.append(sized_stop(tolerance, self.most, self.compare_cap))
            return rule[0](ratios)

        return stop


def sized_stop(tolerance: float, most: int, compare_cap: int) -> Callable[[list[float]], bool]:
    """The stopping rule of one saving run sized by its noise: after :data:`FIRST_LOOK`
    rounds it plans its rounds once (:func:`planned_rounds`) and stops when it has them; at
    ``most`` rounds it stops anyway (the cap)."""
    planned: list[int] = []

    def stop(ratios: list[float]) -> bool:
        n = len(ratios)
        if n >= most:
            return True
        if n < FIRST_LOOK:
            return False
        if not planned:
            planned.append(planned_rounds(ratios[:FIRST_LOOK], tolerance, most, compare_cap))
        return n >= planned[0]

    return stop
