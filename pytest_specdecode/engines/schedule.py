"""Which engines the work ahead needs, and the pure decisions taken from it: the order of the
tests (those sharing engines run together) and which resident engine to shut down (the one
needed farthest ahead, or never).

A *need* is the set of engine keys (:attr:`EngineConfig.key`) one test uses; a schedule is the
needs of the tests still to run, the running one first.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

Need = frozenset[str]


def grouped_order(needs: Sequence[Collection[str]]) -> list[int]:
    """A stable order of the tests (indices into ``needs``) in which tests sharing engines run
    together: tests with the same need stay in a block (in file order), and after each block
    comes the block that shares the most engines with it (ties: the earliest in the file)."""
    blocks: dict[Need, list[int]] = {}
    for i, need in enumerate(needs):
        blocks.setdefault(frozenset(need), []).append(i)
    remaining = list(blocks)  # in order of first appearance
    order: list[int] = []
    current: Need | None = None
    while remaining:
        if current is None:
            nxt = remaining[0]
        else:
            last = current
            nxt = max(remaining, key=lambda need: (len(need & last), -remaining.index(need)))
        remaining.remove(nxt)
        order.extend(blocks[nxt])
        current = nxt
    return order


def next_use(key: str, upcoming: Sequence[Collection[str]]) -> float:
    """How many tests ahead ``key`` is needed again (0: by the running test); inf: never."""
    for distance, need in enumerate(upcoming):
        if key in need:
            return distance
    return float("inf")


def victim(
    resident: Sequence[str], keep: Collection[str], upcoming: Sequence[Collection[str]]
) -> str | None:
    """The resident engine to shut down for a new one: not in ``keep``, needed farthest
    ahead in ``upcoming`` (never needed again first); among equals the least recently used
    (``resident`` is ordered least recently used first). None: every one is kept."""
    candidates = [key for key in resident if key not in keep]
    if not candidates:
        return None
    return max(candidates, key=lambda key: (next_use(key, upcoming), -candidates.index(key)))
