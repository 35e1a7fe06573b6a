"""The worker's open-loop ``load`` command against a stand-in ``vllm.LLM`` on a simulated
clock (no vLLM, no sleeping): when each request is added, what is timed from its arrival,
and that a failure leaves no request in flight. The same loop on real engines is in
``benchmarks/load_lateness.py``."""

from __future__ import annotations

import enum
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_specdecode.engines import worker
from pytest_specdecode.engines.local import Engine
from pytest_specdecode.engines.protocol import LoadRound


class RequestOutputKind(enum.Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


class SamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.output_kind = RequestOutputKind.CUMULATIVE


@pytest.fixture(autouse=True)
def stand_in_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """``vllm.SamplingParams`` and ``vllm.sampling_params`` as the worker imports them."""
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    params = types.ModuleType("vllm.sampling_params")
    params.RequestOutputKind = RequestOutputKind  # type: ignore[attr-defined]
    params.StructuredOutputsParams = dict  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", params)


class Clock:
    """Simulated seconds: only sleeping and engine steps move it."""

    def __init__(self) -> None:
        self.now = 100.0  # the round's start is not 0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class InprocClient:
    """Named like vLLM's in-process engine-core client (the worker's ``broken`` check)."""


class StandInEngine:
    """``llm.llm_engine``: each step takes ``step_s`` and gives every running request
    ``per_step`` tokens (after ``prefill`` steps that give none), in delta outputs."""

    def __init__(self, clock: Clock, *, step_s: float = 0.1, per_step: int = 2) -> None:
        self.clock, self.step_s, self.per_step = clock, step_s, per_step
        self.prefill = 0
        self.fail_at_step: int | None = None
        self.engine_core = InprocClient()
        self.added: list[tuple[float, str, Any, Any]] = []  # (time, id, input, params)
        self.running: dict[str, list[int]] = {}  # id -> [tokens left, steps seen]
        self.aborted: list[str] = []
        self.steps = 0

    def add_request(self, request_id: str, prompt: Any, params: Any) -> str:
        self.added.append((self.clock.now, request_id, prompt, params))
        self.running[request_id] = [params.kwargs["max_tokens"], 0]
        return f"{request_id}-internal"

    def has_unfinished_requests(self) -> bool:
        return bool(self.running)

    def step(self) -> list[Any]:
        self.steps += 1
        if self.steps == self.fail_at_step:
            raise RuntimeError("the model raised")
        self.clock.now += self.step_s
        outputs = []
        for rid, state in list(self.running.items()):
            state[1] += 1
            n = 0 if state[1] <= self.prefill else min(self.per_step, state[0])
            state[0] -= n
            done = state[0] == 0
            if done:
                del self.running[rid]
            completion = types.SimpleNamespace(token_ids=list(range(n)), text="x" * n)
            outputs.append(
                types.SimpleNamespace(request_id=rid, outputs=[completion], finished=done)
            )
        outputs.append(types.SimpleNamespace(request_id="someone-else", outputs=[], finished=True))
        return outputs

    def abort_request(self, request_ids: list[str]) -> None:
        self.aborted.extend(request_ids)
        for rid in request_ids:
            self.running.pop(rid, None)


class StandInLLM:
    def __init__(self, clock: Clock) -> None:
        self.llm_engine = StandInEngine(clock)

    def _preprocess_cmpl(self, prompts: list[Any]) -> list[Any]:
        return [{"rendered": p} for p in prompts]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def engine(clock: Clock) -> Iterator[worker._Engine]:
    engine = worker._Engine(StandInLLM(clock))
    engine.clock, engine.sleep = clock, clock.sleep
    yield engine


SAMPLING = {"temperature": 0.0, "max_tokens": 6, "ignore_eos": True}


def test_each_request_is_added_once_due_in_order_and_timed_from_its_arrival(
    engine: worker._Engine, clock: Clock
) -> None:
    """Steps of 0.1 s, 2 tokens each, 6 tokens a request: request 1 arrives during a step
    and is added at its end; request 2 arrives while request 1 runs; the engine idles (sleeps)
    until request 3."""
    arrivals = [0.0, 0.05, 0.35, 1.0]
    done = engine.load(["a", "b", "c", "d"], SAMPLING, arrivals)
    stand_in = engine.llm.llm_engine
    added = [(round(t - 100.0, 6), rid, prompt) for t, rid, prompt, _ in stand_in.added]
    assert added == [
        (0.0, "specdecode-load-1-0", {"rendered": "a"}),
        (0.1, "specdecode-load-1-1", {"rendered": "b"}),
        (0.4, "specdecode-load-1-2", {"rendered": "c"}),
        (1.0, "specdecode-load-1-3", {"rendered": "d"}),
    ]
    assert all(p.output_kind is RequestOutputKind.DELTA for *_, p in stand_in.added)
    assert all(p.kwargs == SAMPLING for *_, p in stand_in.added)
    assert clock.sleeps == [pytest.approx(0.3)]  # idle from 0.7 to request 3's arrival
    requests = LoadRound.of(done).requests
    assert [q.arrival for q in requests] == arrivals
    assert [q.sent for q in requests] == pytest.approx([0.0, 0.1, 0.4, 1.0])
    # first token one step after the request was added; the last two steps later
    assert [q.ttft for q in requests] == pytest.approx([0.1, 0.15, 0.15, 0.1])
    assert [q.e2e for q in requests] == pytest.approx([0.3, 0.35, 0.35, 0.3])
    assert all(q.itl == pytest.approx((0.1, 0.1)) for q in requests)
    assert [q.output_tokens for q in requests] == [6] * 4
    assert requests[1].tpot == pytest.approx(0.2 / 5)  # 2 tokens a chunk
    assert done["elapsed"] == pytest.approx(1.3)
    assert not stand_in.running and not stand_in.aborted


def test_all_at_once_shares_the_steps_and_ids_differ_from_round_to_round(
    engine: worker._Engine, clock: Clock
) -> None:
    first = engine.load(["a", "b"], SAMPLING, [0.0, 0.0])
    second = engine.load(["a"], SAMPLING, [0.0])
    ids = [rid for _, rid, *_ in engine.llm.llm_engine.added]
    assert ids == ["specdecode-load-1-0", "specdecode-load-1-1", "specdecode-load-2-0"]
    assert [q["e2e"] for q in first["requests"]] == pytest.approx([0.3, 0.3])
    assert second["requests"][0]["ttft"] == pytest.approx(0.1)
    assert not clock.sleeps


def test_steps_without_tokens_are_not_chunks(engine: worker._Engine) -> None:
    """A prefill step that gives no token neither starts TTFT nor makes an inter-token gap."""
    engine.llm.llm_engine.prefill = 2
    (request,) = engine.load(["a"], SAMPLING, [0.0])["requests"]
    assert request["ttft"] == pytest.approx(0.3)
    assert request["itl"] == pytest.approx([0.1, 0.1])
    assert request["output_tokens"] == 6


@pytest.mark.parametrize("fail_at_step", [1, 3])
def test_a_failure_aborts_the_requests_in_flight_and_leaves_the_engine_usable(
    engine: worker._Engine, fail_at_step: int
) -> None:
    stand_in = engine.llm.llm_engine
    stand_in.fail_at_step = fail_at_step
    with pytest.raises(RuntimeError, match="the model raised"):
        engine.load(["a", "b", "c"], SAMPLING, [0.0, 0.05, 0.5])
    in_flight = ["specdecode-load-1-0", "specdecode-load-1-1"][:fail_at_step]
    assert stand_in.aborted == in_flight  # request 2 was never sent
    assert not stand_in.running
    assert engine.mode == "in-process" and not engine.broken()  # the worker answers "error"
    stand_in.fail_at_step = None
    assert len(engine.load(["a"], SAMPLING, [0.0])["requests"]) == 1


def test_a_failure_while_adding_aborts_those_added_before(engine: worker._Engine) -> None:
    stand_in = engine.llm.llm_engine
    original = stand_in.add_request

    def add_request(request_id: str, prompt: Any, params: Any) -> str:
        if prompt == {"rendered": "bad"}:
            raise ValueError("prompt too long")
        return original(request_id, prompt, params)

    stand_in.add_request = add_request  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="prompt too long"):
        engine.load(["a", "bad"], SAMPLING, [0.0, 0.0])
    assert stand_in.aborted == ["specdecode-load-1-0"] and not stand_in.running


def test_an_engine_that_loses_a_request_is_an_error_not_a_hang(engine: worker._Engine) -> None:
    stand_in = engine.llm.llm_engine
    stand_in.has_unfinished_requests = lambda: False  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="never finished \\['specdecode-load-1-0'\\]"):
        engine.load(["a"], SAMPLING, [0.0])


def test_without_vllms_renderer_the_prompts_go_as_they_are(
    engine: worker._Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(StandInLLM, "_preprocess_cmpl")
    engine.load(["a"], SAMPLING, [0.0])
    assert engine.llm.llm_engine.added[0][2] == "a"


@pytest.mark.parametrize(
    ("arrivals", "message"),
    [([0.0], "2 prompts but 1 arrival times"), ([0.5, 0.1], "must ascend"), ([-1.0, 0], "ascend")],
)
def test_a_bad_schedule_is_refused_before_anything_is_sent(
    engine: worker._Engine, arrivals: list[float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        engine.load(["a", "b"], SAMPLING, arrivals)
    assert not engine.llm.llm_engine.added


def test_the_local_engine_sends_the_load_command_and_parses_its_answer() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    answer = {"elapsed": 0.5, "requests": [
        {"arrival": 0.0, "sent": 0.001, "ttft": 0.1, "e2e": 0.5, "itl": [0.2, 0.2],
         "output_tokens": 3},
    ]}  # fmt: skip

    def call(command: str, **kwargs: Any) -> Any:
        calls.append((command, kwargs))
        return answer

    local = Engine.__new__(Engine)  # no worker process: only the call is under test
    local.call = call  # type: ignore[method-assign]
    done = local.load_round(("a",), {"max_tokens": 3}, (0.0,))
    assert calls == [("load", {"prompts": ["a"], "sampling": {"max_tokens": 3}, "arrivals": [0.0]})]
    assert done == LoadRound.of(answer) and done.requests[0].tpot == pytest.approx(0.2)
