"""The engine schedule: test order, farthest-next-use eviction, starts together, restarts, the
cost-ratio timing without an extra restart, and wall-time accounting (no vLLM: the real
EnginePool drives FakeWorker engines)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_specdecode import Bench
from pytest_specdecode.engines import pool as pool_module
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.hardware import Device
from pytest_specdecode.engines.pool import start_together
from pytest_specdecode.engines.protocol import Placement
from pytest_specdecode.engines.schedule import grouped_order, next_use, victim
from pytest_specdecode.errors import EngineStartError
from tests.fakes import FakeSource, fake_pool

#: hub names not in the cache: their compatibility is said to be unchecked
pytestmark = pytest.mark.filterwarnings(
    "ignore::pytest_specdecode.errors.UncheckedCompatibilityWarning"
)

TARGET = "org/target"
DRAFT = {"model": "org/draft", "num_speculative_tokens": 4}
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}


def cfg(spec: dict[str, Any] | None = None, target: str = TARGET) -> EngineConfig:
    return EngineConfig.create(target, spec, {})


BASE, SPEC, OTHER = cfg(), cfg(DRAFT), cfg(NGRAM)


# -- pure decisions ------------------------------------------------------------------------


def test_tests_sharing_engines_are_grouped_stably() -> None:
    needs = [{"b", "s1"}, {"b", "s2"}, {"b", "s1"}, {"c", "s3"}, {"b", "s2"}]
    assert grouped_order(needs) == [0, 2, 1, 4, 3]


def test_after_a_group_comes_the_one_sharing_most_engines() -> None:
    needs = [{"b", "s1"}, {"c", "s3"}, {"b", "s2"}]
    # (b, s2) shares the baseline with (b, s1): it comes before (c, s3), though later in file
    assert grouped_order(needs) == [0, 2, 1]


def test_file_order_is_kept_when_nothing_is_shared() -> None:
    assert grouped_order([{"a"}, {"b"}, {"c"}]) == [0, 1, 2]
    assert grouped_order([]) == []


def test_next_use_counts_tests_ahead() -> None:
    upcoming = [{"a"}, {"b"}, {"a", "c"}]
    assert [next_use(k, upcoming) for k in "abcd"] == [0, 1, 2, float("inf")]


def test_the_victim_is_needed_farthest_ahead_or_never() -> None:
    upcoming = [{"x", "b"}, {"x", "c"}]
    assert victim(["b", "c", "d"], set(), upcoming) == "d"  # never needed again
    assert victim(["b", "c"], set(), upcoming) == "c"  # b is needed sooner
    assert victim(["b", "c"], {"c"}, upcoming) == "b"  # kept ones are not candidates
    assert victim(["b"], {"b"}, upcoming) is None


def test_without_a_plan_the_least_recently_used_goes() -> None:
    assert victim(["old", "new"], set(), []) == "old"


# -- the pool -------------------------------------------------------------------------------


def test_a_pair_starts_together_and_is_not_started_again() -> None:
    world = FakeSource()
    pool = fake_pool(world)
    pool.acquire(BASE, keep=[SPEC])
    pool.acquire(SPEC, keep=[BASE])
    kinds = [kind for kind, _ in world.events]
    assert kinds == ["spawn", "spawn", "ready", "ready"]  # both spawned before either waits
    assert (pool.starts, pool.restarts) == (2, 0)


def test_farthest_next_use_keeps_the_engine_needed_next() -> None:
    world = FakeSource()
    messages: list[str] = []
    pool = fake_pool(world, progress=messages.append)
    pool.plan([{BASE.key, SPEC.key}, {BASE.key, OTHER.key}, {BASE.key, SPEC.key}])
    pool.acquire(BASE, keep=[SPEC])
    pool.plan([{BASE.key, OTHER.key}, {BASE.key, SPEC.key}])
    pool.acquire(OTHER, keep=[BASE])  # evicts SPEC, the only one not kept
    pool.plan([{BASE.key, SPEC.key}])
    pool.acquire(SPEC, keep=[BASE])
    assert (pool.starts, pool.restarts) == (4, 1)
    assert any(
        m.startswith("restarting speculative engine")
        and "shut down to make room for speculative engine (org/target, ngram" in m
        for m in messages
    ), messages


def test_without_keep_the_plan_decides_which_engine_goes() -> None:
    world = FakeSource()
    pool = fake_pool(world)
    pool.acquire(BASE, keep=[SPEC])
    # the next tests need SPEC before BASE: BASE goes for OTHER
    pool.plan([{OTHER.key}, {SPEC.key}, {BASE.key}])
    pool.acquire(OTHER)
    assert pool.is_running(SPEC) and not pool.is_running(BASE)


def test_a_pool_of_one_starts_its_engines_one_at_a_time() -> None:
    world = FakeSource()
    pool = fake_pool(world, max_engines=1)
    pool.acquire(BASE, keep=[SPEC])
    assert [k for k, _ in world.events] == ["spawn", "ready"]


def test_one_failed_start_leaves_the_other_engine_running() -> None:
    world = FakeSource()
    world.fail_start = {"org/draft"}
    pool = fake_pool(world)
    alone = cfg(target="org/draft")
    with pytest.raises(EngineStartError, match="failed to start"):
        pool.acquire(alone, keep=[BASE])
    assert pool.is_running(BASE) and not pool.is_running(alone)


@pytest.mark.parametrize(
    ("device", "kwargs", "cores", "together"),
    [
        (Device("cpu", "c"), {}, 2, True),
        (Device("cpu", "c"), {}, 1, False),
        (Device("gpu", "g"), {"kv_cache_memory_bytes": 2**30}, 1, True),
        (Device("gpu", "g"), {"gpu_memory_utilization": 0.45}, 8, False),
    ],
)
def test_when_engines_may_start_together(
    monkeypatch: pytest.MonkeyPatch,
    device: Device,
    kwargs: dict[str, Any],
    cores: int,
    together: bool,
) -> None:
    monkeypatch.setattr(pool_module.os, "sched_getaffinity", lambda _: set(range(cores)))
    placements = [Placement(kwargs, "m", {}), Placement(kwargs, "m", {})]
    why = start_together(device, placements)
    assert (why is None) is together
    if not together:
        assert ("kv_cache_memory_bytes" in why) if device.kind == "gpu" else ("core" in why)
    assert start_together(device, placements[:1]) is None


def test_gpu_engines_without_a_kv_budget_start_one_after_the_other() -> None:
    world = FakeSource()
    pool = fake_pool(world, device=Device("gpu", "fake GPU"))
    pool.acquire(BASE, keep=[SPEC])
    assert [k for k, _ in world.events] == ["spawn", "ready", "spawn", "ready"]
    assert "kv_cache_memory_bytes" in pool.sequential_reasons[0]


# -- the cost ratio and time spent, through Bench ------------------------------------------


def test_a_draft_model_run_starts_two_engines_and_times_the_draft_inside() -> None:
    world = FakeSource()
    pool = fake_pool(world)
    bench = Bench(TARGET, DRAFT, source=pool, progress=None, trials=3)
    result = bench.run(["p"], max_tokens=4)
    assert result.cost_ratio == pytest.approx(0.1, rel=0.05)  # from the speculative engine
    assert (pool.starts, pool.restarts) == (2, 0)  # baseline and speculative, nothing alone
    starts = [what for kind, what in world.events if kind == "spawn"]
    assert not any("alone" in what for what in starts), starts
    bench.run(["p"], max_tokens=4, label="again")
    assert pool.starts == 2


def test_cost_ratio_off_reports_none() -> None:
    world = FakeSource()
    pool = fake_pool(world)
    result = Bench(TARGET, DRAFT, source=pool, progress=None, trials=3, cost_ratio="off").run(
        ["p"], max_tokens=4
    )
    assert pool.starts == 2 and result.cost_ratio is None and result.efficiency is None
    assert result.phases is not None  # the phases are measured all the same


def test_bench_counts_its_warm_up_and_rounds() -> None:
    bench = Bench(TARGET, NGRAM, source=FakeSource(), progress=None, trials=3)
    bench.run(["p"], max_tokens=4)
    assert bench.time.round_seconds > 0 and bench.time.warmup_seconds > 0


def test_choose_draft_measures_a_running_candidate_first() -> None:
    world = FakeSource()
    pool = fake_pool(world)
    bench = Bench(TARGET, DRAFT, source=pool, progress=None, trials=3, cost_ratio="off")
    bench.engine("speculative")  # the baseline and the draft pair are running
    ranking = bench.choose_draft(["p"], {"ngram": NGRAM, "draft": DRAFT}, max_tokens=4)
    assert sorted(ranking.names) == ["draft", "ngram"]
    assert [r.label for r in bench.results] == ["draft", "ngram"]  # measured in this order
    assert (pool.starts, pool.restarts) == (3, 0)  # run as given, the pair would restart


@pytest.mark.parametrize(("kind", "waited"), [("cpu", False), ("gpu", True)])
def test_an_evicted_engine_shuts_down_while_the_next_starts_on_a_cpu(
    kind: str, waited: bool
) -> None:
    world = FakeSource()
    pool = fake_pool(world, device=Device(kind, "fake"))
    pool.acquire(BASE, keep=[SPEC])
    pool.acquire(OTHER, keep=[BASE])  # SPEC goes
    assert ("close", SPEC.describe()) in world.events
    assert world.closed == (1 if waited else 0)  # a GPU waits until its memory is free
    pool.close()
    assert world.closed == 3  # every engine reaped at the end


def test_a_dead_engine_is_dropped_before_anything_is_evicted() -> None:
    world = FakeSource()
    messages: list[str] = []
    pool = fake_pool(world, progress=messages.append)
    spec = pool.acquire(SPEC, keep=[BASE])
    spec.kill()  # its worker died
    pool.acquire(OTHER, keep=[BASE])  # room comes from the dead engine: nothing alive goes
    assert pool.is_running(BASE) and not any(m.startswith("shutting down") for m in messages)
    assert any(m.endswith("is no longer running") for m in messages), messages
    pool.acquire(SPEC, keep=[BASE])
    assert any(m.startswith("restarting speculative engine") and m.endswith("its engine had died")
               for m in messages), messages  # fmt: skip


def test_every_failed_engine_of_a_start_is_reported() -> None:
    world = FakeSource()
    world.fail_start = {"org/draft", TARGET}
    pool = fake_pool(world)
    alone = cfg(target="org/draft")
    with pytest.raises(EngineStartError) as info:
        pool.acquire(alone, keep=[BASE])
    assert str(info.value).count("failed to start") == 2  # both logs' engines are named
