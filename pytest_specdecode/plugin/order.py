"""The order of specdecode tests: those sharing engines run together (and, under pytest-xdist,
on one worker), and the engine pool learns what the tests ahead need."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import pytest

from ..engines.schedule import Need, grouped_order
from .marker import TestSpec

#: Prefix of the engine groups' names.
GROUP_PREFIX = "specdecode-"


def engines_of(spec: TestSpec) -> Need:
    """The engine keys a test uses by its marker: its baseline and speculative engines."""
    return frozenset({spec.baseline.key, spec.speculative.key})


def group_name(need: Need) -> str:
    """A short, stable name for the tests that use these engines."""
    digest = hashlib.sha1("\n".join(sorted(need)).encode()).hexdigest()[:8]
    return GROUP_PREFIX + digest


def test_id(item: pytest.Item) -> str:
    """The test's node id without the ``@group`` suffix pytest-xdist's ``loadgroup`` adds
    (results and baselines are keyed by the plain id, whatever the scheduling)."""
    nodeid = item.nodeid
    names = sorted(
        {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
    )
    suffix = "@" + "_".join(names)
    return nodeid.removesuffix(suffix) if names else nodeid


def reorder(items: list[pytest.Item], specs: Mapping[str, TestSpec]) -> list[pytest.Item]:
    """``items`` with the specdecode tests (those in ``specs``) regrouped so that tests sharing
    engines run one after the other (:func:`~..engines.schedule.grouped_order`); they take
    the places specdecode tests had, every other test keeps its place."""
    places = [i for i, item in enumerate(items) if item.nodeid in specs]
    tests = [items[i] for i in places]
    order = grouped_order([engines_of(specs[item.nodeid]) for item in tests])
    result = list(items)
    for place, index in zip(places, order, strict=True):
        result[place] = tests[index]
    return result


def groups(specs: Mapping[str, TestSpec]) -> dict[str, str]:
    """Each specdecode test's engine group (:func:`group_name`), by node id: pytest-xdist's
    controller sends the tests of one group to one worker."""
    return {nodeid: group_name(engines_of(spec)) for nodeid, spec in specs.items()}


def schedule(order: Sequence[TestSpec]) -> list[tuple[str, Need]]:
    """Each test's node id and the engine keys it needs (its pair), in run order."""
    return [(spec.nodeid, engines_of(spec)) for spec in order]
