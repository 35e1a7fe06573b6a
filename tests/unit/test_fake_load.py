"""The fake engines' load model (tests/fakes.py): what the measurement and plugin tests of
``Bench.load`` build on. Speculation must pay at a low rate and stop paying when many
requests share each step, deterministically."""

from __future__ import annotations

import math
import statistics

import pytest

from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.protocol import EngineBackend, LoadRound
from pytest_specdecode.measure.load import arrival_times
from tests.fakes import FakeSource, fake_pool

BASE = EngineConfig.create("target", None, {})
SPEC = EngineConfig.create("target", {"model": "draft", "num_speculative_tokens": 4}, {})
SAMPLING = {"temperature": 0.0, "max_tokens": 32}


def p50_tpot(done: LoadRound) -> float:
    return statistics.median(q.tpot for q in done.requests if q.tpot is not None)


def gain(source: FakeSource, rate: float, requests: int) -> float:
    arrivals = arrival_times(rate, requests=requests)
    prompts = ["p"] * requests
    base = source.acquire(BASE).load_round(prompts, SAMPLING, arrivals)
    spec = source.acquire(SPEC).load_round(prompts, SAMPLING, arrivals)
    return p50_tpot(base) / p50_tpot(spec)


def test_the_gain_shrinks_with_the_rate_to_a_loss_at_saturation() -> None:
    source = FakeSource()
    gains = [gain(source, rate, n) for rate, n in [(0.5, 12), (8.0, 12), (math.inf, 32)]]
    assert gains[0] > 1.5 and gains[0] > gains[1] > gains[2]
    assert gains[2] <= 1.0
    assert gain(source, 0.5, 12) == gains[0]  # deterministic


def test_a_load_round_is_a_plausible_open_loop_round() -> None:
    source = FakeSource()
    engine = source.acquire(SPEC)
    assert isinstance(engine, EngineBackend)
    arrivals = arrival_times(4.0, requests=8)
    done = engine.load_round(["p"] * 8, SAMPLING, arrivals)
    assert [q.arrival for q in done.requests] == arrivals
    for q in done.requests:
        assert q.sent >= q.arrival and q.output_tokens == 32
        assert q.ttft is not None and 0 < q.ttft <= q.e2e
        assert q.e2e == pytest.approx(q.ttft + sum(q.itl))
    assert done.elapsed == pytest.approx(max(q.arrival + q.e2e for q in done.requests))
    counters = engine.counters()
    assert counters.num_drafts > 0 and 3 < counters.mean_acceptance_length < 5.5


def test_a_fake_worker_has_load_rounds_too() -> None:
    world = FakeSource()
    pool = fake_pool(world)
    try:
        engine = pool.acquire(BASE)
        done = engine.load_round(["p", "q"], SAMPLING, [0.0, 0.0])
        assert [q.output_tokens for q in done.requests] == [32, 32]
        assert len(done.requests[0].itl) == 31  # the baseline gives one token a step
    finally:
        pool.close()
