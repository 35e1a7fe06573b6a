"""What a baseline can see (``measure/detectable.py``): the detectable drop found by simulating
the rules on a result's own rounds, the compared rounds a baseline plans, and the stopping rule
of a saving run sized by its noise. The error rates of the whole design are measured in
``benchmarks/decisions.py sized``; these tests pin its behaviour."""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from functools import partial

import pytest

from pytest_specdecode.measure.detectable import (
    FIRST_LOOK,
    MOST_DROP,
    RESOLUTION,
    Detectable,
    _search,
    compared_rounds,
    figure_drop,
    planned_rounds,
    sees,
    sized_stop,
    speedup_drop,
    spread_inflation,
)
from pytest_specdecode.measure.sequential import Reference, decide


def ratios(sd: float, n: int, seed: int = 1, speedup: float = 2.0) -> list[float]:
    rng = random.Random(seed)
    return [speedup * math.exp(rng.gauss(0.0, sd)) for _ in range(n)]


def test_quieter_rounds_see_smaller_drops_and_noisy_ones_are_blind() -> None:
    drops = [speedup_drop(ratios(sd, 30), 20, 0.05) for sd in (0.03, 0.07, 0.15)]
    assert [d.designed for d in drops] == [0.10] * 3
    assert drops[0].drop < drops[1].drop < drops[2].drop
    assert not drops[0].blind and not drops[1].blind  # sd 0.07 at 30/20: about 9%
    assert drops[2].blind and drops[2].drop > 0.12
    # the tolerance is the rule's floor: nothing below it is ever called a drop
    assert all(d.drop > 0.05 for d in drops)


def test_more_rounds_see_smaller_drops() -> None:
    rounds = ratios(0.10, 60)
    assert speedup_drop(rounds, 40, 0.05).drop < speedup_drop(rounds[:30], 20, 0.05).drop


def test_the_same_rounds_give_the_same_figure() -> None:
    rounds = ratios(0.08, 25, seed=4)
    assert speedup_drop(rounds, 20, 0.05) == speedup_drop(list(rounds), 20, 0.05)


@pytest.mark.parametrize("sd", [0.04, 0.09, 0.10, 0.11, 0.14])
def test_sees_answers_whether_the_detectable_drop_is_within_the_designed_one(sd: float) -> None:
    rounds = ratios(sd, 30, seed=7)
    assert sees(rounds, 20, 0.05) == (not speedup_drop(rounds, 20, 0.05).blind)


def test_a_stalled_round_in_the_baseline_is_simulated_too() -> None:
    calm = ratios(0.06, 30, seed=2)
    stalled = list(calm)
    stalled[3] /= 3.0  # one speculative round took three times as long
    stalled[17] *= 3.0  # one baseline round did
    assert speedup_drop(stalled, 20, 0.05).drop > speedup_drop(calm, 20, 0.05).drop


def test_a_measured_between_session_variance_raises_the_drop() -> None:
    rounds = ratios(0.05, 30, seed=3)
    plain = speedup_drop(rounds, 20, 0.05)
    wandering = speedup_drop(rounds, 20, 0.05, session_var=0.02**2, sessions=5)
    assert wandering.drop > plain.drop


def test_the_figure_is_what_the_rule_catches() -> None:
    """At the detectable drop, the rule itself (fresh runs drawn like the stored rounds)
    catches about 95%; at the tolerance, a small share."""
    sd, stored = 0.07, ratios(0.07, 30, seed=11)
    found = speedup_drop(stored, 20, 0.05).drop
    rng = random.Random(5)

    def share(drop: float, reps: int = 300) -> float:
        hits = 0
        for _ in range(reps):
            base = Reference(tuple(rng.gauss(0.0, sd) for _ in range(30)))
            new = [math.exp(math.log1p(-drop) + rng.gauss(0.0, sd)) for _ in range(20)]
            hits += decide(base, new, 0.05).status == "regressed"
        return hits / reps

    assert share(found) > 0.88
    assert share(0.05) < 0.6


def test_the_two_gate_figures() -> None:
    rng = random.Random(8)
    steady = [0.7 + rng.gauss(0.0, 0.01) for _ in range(30)]
    shaky = [0.7 + rng.gauss(0.0, 0.15) for _ in range(30)]
    kw = {"relative": True, "log": False, "alpha": 0.01}
    calm = figure_drop(steady, 20, 0.05, **kw)  # type: ignore[arg-type]
    assert 0.05 < calm.drop < 0.07 and not calm.blind
    assert figure_drop(shaky, 20, 0.05, **kw).blind  # type: ignore[arg-type]
    absolute = figure_drop(steady, 20, 0.03, relative=False, log=False, alpha=0.01)
    assert not absolute.relative and 0.03 < absolute.drop < 0.06 and absolute.designed == 0.06
    assert math.isinf(figure_drop([0.7], 20, 0.05, **kw).drop)  # type: ignore[arg-type]


def test_the_search_ends_for_a_zero_or_tiny_declared_drop() -> None:
    # a 0% tolerance (refused up front since) made the bisection's precision 0: it never ended
    def bounded(target: Callable[[], float]) -> float:
        box: list[float] = []
        worker = threading.Thread(target=lambda: box.append(target()), daemon=True)
        worker.start()
        worker.join(timeout=30)
        assert box, "the search did not end"
        return box[0]

    def above_a_tenth(drop: float) -> bool:
        return drop >= 0.1

    for declared in (0.0, 5e-324):
        found = bounded(partial(_search, above_a_tenth, declared, 0.0, MOST_DROP))
        assert 0.1 <= found <= 0.1 + RESOLUTION * MOST_DROP
    steady = ratios(0.02, 30)
    assert bounded(lambda: speedup_drop(steady, 20, 0.0).drop) > 0
    assert bounded(lambda: figure_drop(steady, 20, 0.0, relative=False, log=False, alpha=0.01).drop)


def test_detectable_text_and_dict_form() -> None:
    assert Detectable(0.0874, 0.10).text() == "8.7%"
    blind = Detectable(math.inf, 0.10)
    assert blind.blind and blind.text() == f"none up to {MOST_DROP:.0%}"
    assert blind.to_dict() == {"drop": "none", "designed": 0.10, "relative": True}
    for d in (blind, Detectable(0.031, 0.06, relative=False)):
        assert Detectable.from_dict(d.to_dict()) == d


def test_compared_rounds_are_two_thirds_of_the_saved_at_least_20_within_the_cap() -> None:
    assert [compared_rounds(n, 40) for n in (20, 30, 45, 60, 90)] == [20, 20, 30, 40, 40]
    assert compared_rounds(90, 25) == 25 and compared_rounds(30, 10) == 10


def test_a_sized_saving_run_plans_its_rounds_once_from_its_first_20() -> None:
    quiet = sized_stop(0.05, most=40, compare_cap=40)
    calm = ratios(0.02, 40)
    assert [n for n in range(2, 41) if quiet(calm[:n])] == list(range(FIRST_LOOK, 41))
    noisy = sized_stop(0.05, most=40, compare_cap=40)
    rough = ratios(0.2, 20) + ratios(0.001, 20)  # a calm stretch after the plan changes nothing
    assert [n for n in range(2, 41) if noisy(rough[:n])] == [40]  # only the cap stops it
    # the plan: the fewest rounds (20, 25, ...) whose simulated baselines see twice the
    # tolerance, planning for an sd 1.28 times the first 20 rounds' (their 90% upper bound)
    assert spread_inflation(20) == pytest.approx(1.28, abs=0.01)
    assert planned_rounds(ratios(0.04, 20), 0.05, 90, 40) == 20
    middle = planned_rounds(ratios(0.09, 20, seed=3), 0.05, 90, 40)
    assert 20 < middle < 90 and middle % 5 == 0
    assert planned_rounds(ratios(0.2, 20), 0.05, 90, 40) == 90
