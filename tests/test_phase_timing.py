"""Phase timing inside vLLM's worker (``engines/phases.py``), on a stand-in model runner with a
clock the test moves: which span goes to which phase, prefill apart from decode, rounds apart,
and never a failed step for a profile. The real engines: tests/test_e2e_phase_timing.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_specdecode.engines import phases
from pytest_specdecode.engines.phase_clock import WallClock, clock_for
from pytest_specdecode.engines.phases import (
    EXTENSION,
    EXTENSION_ARG,
    PHASES_ENV,
    USER_EXTENSION_ENV,
    PhaseTiming,
    StepTimer,
    with_phase_timing,
)
from pytest_specdecode.engines.protocol import Round

REPO = Path(__file__).resolve().parent.parent


class Clock:
    """A clock that moves only when told: each mark is the current time in seconds."""

    name = "wall"

    def __init__(self) -> None:
        self.now = 0.0

    def mark(self) -> float:
        return self.now

    def settle(self, marks: Any) -> None:
        pass

    def seconds(self, start: float, end: float) -> float:
        return end - start

    def recycle(self, marks: Any) -> None:
        pass


def output(new: list[str], cached: list[tuple[str, int]]) -> SimpleNamespace:
    """A scheduler output: new requests, and cached ones with their computed tokens."""
    return SimpleNamespace(
        total_num_scheduled_tokens=len(new) + len(cached),
        scheduled_new_reqs=[SimpleNamespace(req_id=r) for r in new],
        scheduled_cached_reqs=SimpleNamespace(
            req_ids=[r for r, _ in cached],
            num_computed_tokens=[n for _, n in cached],
            resumed_req_ids=set(),
        ),
    )


class Runner:
    """vLLM's V1 model runner as the timer sees it: each call spends given seconds on the
    clock (prepare, forward, logits; grammar, sampling, bookkeeping; the draft)."""

    def __init__(self, clock: Clock, draft: float = 0.0) -> None:
        self.clock = clock
        self.requests: dict[str, Any] = {}
        self.draft = draft
        self.calls: list[str] = []
        self.pending = False

    def execute_model(self, scheduler_output: Any, intermediate_tensors: Any = None) -> Any:
        self.calls.append("execute_model")
        if not scheduler_output.total_num_scheduled_tokens:
            return "empty"
        for req in scheduler_output.scheduled_new_reqs:
            self.requests[req.req_id] = SimpleNamespace(num_prompt_tokens=5)
        self.clock.now += 0.002  # prepare
        self._model_forward()
        self.clock.now += 0.001  # logits
        self.pending = True
        return None

    def _model_forward(self, **kwargs: Any) -> str:
        self.clock.now += 0.010
        return "hidden"

    def sample_tokens(self, grammar_output: Any) -> str:
        self.calls.append("sample_tokens")
        self.pending = False
        self.clock.now += 0.0005  # grammar bitmask
        self._sample()
        if self.draft:
            self.propose_draft_token_ids()
        self.clock.now += 0.0003  # bookkeeping
        return "output"

    def _sample(self) -> str:
        self.clock.now += 0.001
        return "sampled"

    def propose_draft_token_ids(self) -> str:
        self.clock.now += self.draft
        return "drafts"


def step(runner: Runner, out: SimpleNamespace, gap: float = 0.0) -> None:
    """One engine step as vLLM's engine core drives it, then ``gap`` seconds of its own work."""
    if runner.execute_model(out) is None:
        runner.sample_tokens(None)
    runner.clock.now += gap


def installed(draft: float = 0.0) -> tuple[Runner, StepTimer, Clock]:
    clock = Clock()
    runner = Runner(clock, draft)
    return runner, StepTimer.install(runner, clock), clock


def test_each_span_goes_to_its_phase_and_prefill_apart_from_decode() -> None:
    runner, timer, _ = installed(draft=0.004)
    timer.begin()
    step(runner, output(["a", "b"], []), gap=0.0007)  # prefill
    step(runner, output([], [("a", 5), ("b", 5)]), gap=0.0007)  # decode
    step(runner, output([], [("a", 6), ("b", 6)]))  # decode, the round's last
    profile = timer.collect()
    assert profile is not None
    got = Round.of({"elapsed": 1.0, "requests": [], "profile": profile}).profile
    assert got is not None and got.clock == "wall"
    pre, dec = got.prefill, got.decode
    assert (pre.steps, dec.steps) == (1, 2)
    assert pre.prepare == pytest.approx(0.002)
    assert pre.forward == pytest.approx(0.011)  # the forward pass and its logits
    assert pre.sample == pytest.approx(0.0015)  # grammar bitmask and sampling
    assert pre.draft == pytest.approx(0.004)
    # to the next step's start: bookkeeping and the engine core's work between steps
    assert pre.total == pytest.approx(0.002 + 0.011 + 0.0015 + 0.004 + 0.0003 + 0.0007)
    assert pre.other == pytest.approx(0.001)
    assert dec.forward == pytest.approx(0.022) and dec.draft == pytest.approx(0.008)
    # the last step ends where its sample_tokens returned
    assert dec.total == pytest.approx(2 * 0.0188 + 0.0007)
    assert runner.calls == ["execute_model", "sample_tokens"] * 3


def test_a_step_after_an_idle_engine_leaves_the_idle_time_out() -> None:
    """Between two batches of a round (``concurrency``) the engine idles: the step before a
    step that schedules only new requests ends where its own work ended."""
    runner, timer, _ = installed()
    timer.begin()
    step(runner, output(["a"], []), gap=0.001)
    step(runner, output([], [("a", 5)]), gap=5.0)  # the batch ends; the caller sends the next
    step(runner, output(["b"], []))
    profile = timer.collect()
    assert profile is not None
    assert profile["decode"]["total"] == pytest.approx(0.0148)
    assert profile["prefill"]["total"] == pytest.approx(2 * 0.0148 + 0.001)


def test_chunked_prefill_counts_as_prefill_and_empty_steps_not_at_all() -> None:
    runner, timer, _ = installed()
    runner.requests["a"] = SimpleNamespace(num_prompt_tokens=100)
    timer.begin()
    step(runner, output([], [("a", 64)]))  # the rest of a long prompt
    runner.execute_model(output([], []))  # nothing scheduled: no forward, no step
    profile = timer.collect()
    assert profile is not None
    assert (profile["prefill"]["steps"], profile["decode"]["steps"]) == (1, 0)


def test_nothing_is_recorded_outside_a_round_and_rounds_are_apart() -> None:
    runner, timer, _ = installed()
    step(runner, output(["a"], []))  # warm-up: before any round
    timer.begin()
    step(runner, output([], [("a", 5)]))
    first = timer.collect()
    step(runner, output([], [("a", 6)]))  # between rounds (a load round, sampling)
    timer.begin()
    step(runner, output([], [("a", 7)]))
    step(runner, output([], [("a", 8)]))
    second = timer.collect()
    assert first is not None and second is not None
    assert (first["decode"]["steps"], second["decode"]["steps"]) == (1, 2)
    assert first["prefill"]["steps"] == second["prefill"]["steps"] == 0


def test_a_step_the_timer_cannot_read_runs_and_the_round_has_no_profile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    runner, timer, _ = installed()
    timer.begin()
    odd = SimpleNamespace(total_num_scheduled_tokens=1, scheduled_new_reqs=[])  # another vLLM
    assert runner.execute_model(odd) is None
    assert runner.sample_tokens(None) == "output"
    assert timer.collect() is None
    assert "not timed (reading the scheduler output: AttributeError" in (capsys.readouterr().out)
    timer.begin()  # the next round is timed again
    step(runner, output(["a"], []))
    assert timer.collect() is not None


def test_the_wrapped_methods_pass_arguments_and_results_through() -> None:
    runner, timer, _ = installed(draft=0.001)
    timer.begin()
    assert runner.execute_model(output(["a"], []), intermediate_tensors=None) is None
    assert runner.sample_tokens(None) == "output"
    assert runner._model_forward(input_ids=1) == "hidden"  # outside a step: not timed
    assert runner.propose_draft_token_ids() == "drafts"
    assert runner.execute_model.__name__ == "execute_model"


class Worker(PhaseTiming):
    def __init__(self, runner: Any) -> None:
        self.model_runner = runner


def test_the_extension_starts_and_collects_rounds_on_its_worker() -> None:
    runner = Runner(Clock())
    worker = Worker(runner)
    assert worker.specdecode_phases_collect() is None  # never started
    assert worker.specdecode_phases_start() == {"ok": True, "clock": "wall"}
    step(runner, output(["a"], []))
    profile = worker.specdecode_phases_collect()
    assert profile is not None and profile["prefill"]["steps"] == 1
    json.dumps(profile)  # plain data: it crosses vLLM's and our pipes


def test_a_model_runner_without_a_wrapped_method_is_not_timed_and_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class V2Runner:  # vLLM's model runner V2 has no _model_forward, _sample, ...
        def execute_model(self, scheduler_output: Any) -> None:
            return None

        def sample_tokens(self, grammar_output: Any) -> str:
            return "output"

    worker = Worker(V2Runner())
    reply = worker.specdecode_phases_start()
    assert reply["ok"] is False
    assert "V2Runner has no _model_forward, _sample, propose_draft_token_ids" in reply["note"]
    assert "phases are not timed with this vLLM" in capsys.readouterr().out
    assert worker.specdecode_phases_start()["ok"] is False  # asked once, answered alike
    assert worker.specdecode_phases_collect() is None
    assert worker.model_runner.sample_tokens(None) == "output"  # untouched


def test_the_extension_adds_only_its_two_methods_to_vllms_worker_class() -> None:
    """vLLM refuses an extension with an attribute its worker class already has."""
    added = {a for a in dir(PhaseTiming) if not a.startswith("__")}
    assert added == {"specdecode_phases_start", "specdecode_phases_collect"}


def test_engine_kwargs_get_the_extension_and_keep_the_users_own() -> None:
    env: dict[str, str] = {}
    kwargs, on = with_phase_timing({"dtype": "float32"}, env)
    assert on and kwargs == {"dtype": "float32", EXTENSION_ARG: EXTENSION} and env == {}
    kwargs, on = with_phase_timing({EXTENSION_ARG: "my.pkg.Ext"}, env)
    assert on and kwargs[EXTENSION_ARG] == EXTENSION
    assert env == {USER_EXTENSION_ENV: "my.pkg.Ext"}
    with pytest.raises(TypeError, match="worker_extension_cls=<class 'int'>: vLLM takes"):
        with_phase_timing({EXTENSION_ARG: int}, {})


def test_phase_timing_off_leaves_the_engine_kwargs_alone() -> None:
    kwargs, on = with_phase_timing({EXTENSION_ARG: "my.pkg.Ext"}, {PHASES_ENV: "0"})
    assert not on and kwargs == {EXTENSION_ARG: "my.pkg.Ext"}


def test_the_worker_extension_includes_the_users_extension(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(USER_EXTENSION_ENV, "tests.test_phase_timing.UserExtension")
    phases._extension.cache_clear()
    try:
        extension = phases.WorkerExtension
        assert issubclass(extension, PhaseTiming) and issubclass(extension, UserExtension)
        assert vars(phases)["__getattr__"]("WorkerExtension") is extension
    finally:
        phases._extension.cache_clear()
    monkeypatch.delenv(USER_EXTENSION_ENV)
    assert phases.WorkerExtension is PhaseTiming


class UserExtension:
    def my_rpc(self) -> int:
        return 1


def test_the_phase_modules_import_neither_vllm_nor_torch() -> None:
    code = (
        "import sys, pytest_specdecode.engines.phases, pytest_specdecode.engines.worker;"
        "print(sorted(m for m in ('vllm', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_wall_clock_is_the_clock_off_a_gpu() -> None:
    clock = clock_for("cpu")
    assert isinstance(clock, WallClock) and clock.name == "wall"
    a = clock.mark()
    assert clock.seconds(a, clock.mark()) >= 0.0


def test_the_clock_self_check_runs_on_a_cpu() -> None:
    """``benchmarks/phase_clock_gpu.py`` on a CPU: the wall clock against its reference, a
    table and a verdict. Whether they agree is a timing figure, the benchmark's to print (a
    loaded CI machine may split 15 steps unevenly), so either verdict passes here; a crash,
    another exit status or a missing table does not."""
    if importlib.util.find_spec("torch") is None:  # not imported here: torch stays out of
        pytest.skip("no torch")  # the pytest process
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "phase_clock_gpu.py"), "--steps", "15"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    said = f"exit status {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode in (0, 1), said
    assert "clock wall" in proc.stdout and "heavy" in proc.stdout, said
    verdict = "agree:" if proc.returncode == 0 else "DISAGREE:"
    assert verdict in proc.stdout, said


class PhaseLLM:
    """A ``vllm.LLM`` as the engine worker's phase calls see it: ``collective_rpc`` to the
    extension, ``generate`` that may fail."""

    def __init__(self, start: dict[str, Any], fail: bool = False) -> None:
        self.start, self.fail = start, fail
        self.calls: list[str] = []

    def collective_rpc(self, method: str) -> list[Any]:
        self.calls.append(method)
        if method == "specdecode_phases_start":
            return [self.start]
        return [{"prefill": {"steps": 1, "total": 0.1}, "decode": {"steps": 2, "total": 0.2}}]

    def generate(self, prompts: list[str], params: Any, use_tqdm: bool) -> list[Any]:
        self.calls.append("generate")
        if self.fail:
            raise ValueError("bad prompt")
        completion = SimpleNamespace(token_ids=[1, 2], text="ab")
        return [SimpleNamespace(outputs=[completion], metrics=None) for _ in prompts]


@pytest.fixture
def no_vllm_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_specdecode.engines import worker

    monkeypatch.setattr(worker, "_build_sampling", lambda sampling, n: [None] * n)


@pytest.mark.usefixtures("no_vllm_sampling")
def test_the_worker_returns_each_rounds_profile_from_vllms_workers() -> None:
    from pytest_specdecode.engines import worker

    llm = PhaseLLM({"ok": True, "clock": "wall"})
    engine = worker._Engine(llm, phases=True)
    done = Round.of(engine.generate(["a", "b"], {}, concurrency=1))
    assert done.profile is not None and done.profile.decode.steps == 2
    assert llm.calls == [
        "specdecode_phases_start", "generate", "generate", "specdecode_phases_collect",
    ]  # fmt: skip
    off = worker._Engine(PhaseLLM({"ok": True}), phases=False)
    assert off.generate(["a"], {}, None)["profile"] is None
    assert off.llm.calls == ["generate"]


@pytest.mark.usefixtures("no_vllm_sampling")
def test_a_worker_vllm_cannot_time_gives_rounds_without_a_profile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pytest_specdecode.engines import worker

    llm = PhaseLLM({"ok": False, "note": "the model runner X has no _sample"})
    engine = worker._Engine(llm, phases=True)
    assert engine.generate(["a"], {}, None)["profile"] is None
    assert "phases are not timed: the model runner X has no _sample" in capsys.readouterr().out
    assert engine.generate(["a"], {}, None)["profile"] is None
    assert llm.calls == ["specdecode_phases_start", "generate", "generate"]  # asked once


@pytest.mark.usefixtures("no_vllm_sampling")
def test_a_failed_round_stops_the_recording() -> None:
    from pytest_specdecode.engines import worker

    llm = PhaseLLM({"ok": True, "clock": "wall"}, fail=True)
    with pytest.raises(ValueError, match="bad prompt"):
        worker._Engine(llm, phases=True).generate(["a"], {}, None)
    assert llm.calls == ["specdecode_phases_start", "generate", "specdecode_phases_collect"]
