"""Phase timing inside vLLM's worker (``engines/phases.py``), on a stand-in model runner with a
clock the test moves: which span goes to which phase, prefill apart from decode, rounds apart,
and never a failed step for a profile. The real engines: tests/e2e/test_e2e_phase_timing.py."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import subprocess
import sys
import time
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

from ..helpers import benchmark_script

REPO = Path(__file__).resolve().parents[2]


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
    assert worker.specdecode_phases_start() == {"ok": True, "clock": "wall", "runner": "V1"}
    step(runner, output(["a"], []))
    profile = worker.specdecode_phases_collect()
    assert profile is not None and profile["prefill"]["steps"] == 1
    json.dumps(profile)  # plain data: it crosses vLLM's and our pipes


def test_a_model_runner_without_a_wrapped_method_is_not_timed_and_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Renamed:  # a future runner: neither V1's points nor V2's
        def execute_model(self, scheduler_output: Any) -> None:
            return None

        def sample_tokens(self, grammar_output: Any) -> str:
            return "output"

    worker = Worker(Renamed())
    reply = worker.specdecode_phases_start()
    assert reply["ok"] is False
    assert reply["note"].startswith("phase profile unavailable: vLLM ")
    assert "model runner V1 (" in reply["note"]  # the nearest: fewest points missing
    assert "Renamed) has no _model_forward, _sample, propose_draft_token_ids" in reply["note"]
    assert "specdecode phases: phase profile unavailable: vLLM " in capsys.readouterr().out
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
    monkeypatch.setenv(USER_EXTENSION_ENV, "tests.unit.test_phase_timing.UserExtension")
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


class Tensor:
    """A stand-in tensor: dividing it gives itself."""

    def __truediv__(self, other: Any) -> Tensor:
        return self


class FakeCuda:
    """Just enough of ``torch`` for ``benchmarks/phase_clock_gpu.py``'s GPU checks to run on
    the host: products are counted, events read the wall clock, a graph records the products
    queued while it is captured and runs them on ``replay``."""

    def __init__(self, available: bool = True) -> None:
        self.products = 0  # run, not captured
        self.capturing: list[Any] | None = None
        fake = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = 0.0

            def record(self) -> None:
                self.at = time.perf_counter()

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, end: Any) -> float:
                return (end.at - self.at) * 1000.0

        class Stream:
            def wait_stream(self, other: Any) -> None:
                pass

        class CUDAGraph:
            def __init__(self) -> None:
                self.ops: list[Any] = []

            def replay(self) -> None:
                fake.products += len(self.ops)

        @contextlib.contextmanager
        def graph(g: Any) -> Any:
            fake.capturing = g.ops
            yield
            fake.capturing = None

        self.cuda = SimpleNamespace(
            is_available=lambda: available, synchronize=lambda: None, Event=Event,
            Stream=Stream, current_stream=Stream, stream=lambda s: contextlib.nullcontext(),
            CUDAGraph=CUDAGraph, graph=graph, get_device_name=lambda: "fake",
        )  # fmt: skip
        self.version = SimpleNamespace(cuda="0.0")
        self.__version__ = "0.0+fake"

    def randn(self, *shape: int, device: str) -> Tensor:
        return Tensor()

    def empty_like(self, tensor: Any) -> Any:
        return object()

    def mm(self, a: Any, b: Any, out: Any) -> None:
        if self.capturing is not None:
            self.capturing.append(out)
        else:
            self.products += 1


def _clock_benchmark(monkeypatch: pytest.MonkeyPatch, fake: FakeCuda) -> Any:
    """``benchmarks/phase_clock_gpu.py`` loaded with ``fake`` as its torch."""
    monkeypatch.setitem(sys.modules, "torch", fake)
    return benchmark_script("phase_clock_gpu")


def test_the_clock_gpu_checks_run_through_on_a_stand_in_torch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The mark-cost and CUDA-graph checks, run through with a stand-in torch (no GPU here):
    they print their figures and a verdict, and the graph's replays run what was captured.
    Their timing is checked on a GPU (docs/methodology.md, Clocks)."""
    fake = FakeCuda()
    bench = _clock_benchmark(monkeypatch, fake)
    argv = ["--mark-steps", "5", "--repeats", "2", "--replays", "3", "--graph-products", "2"]
    assert bench.main(["--check", "marks", *argv]) == 0
    out = capsys.readouterr().out
    assert "GPU: fake, torch 0.0+fake" in out
    assert "a mark (reused event)" in out and "per mark: host" in out
    fake.products = 0
    assert bench.main(["--check", "graph", *argv]) in (0, 1)  # host timings: either verdict
    out = capsys.readouterr().out
    assert "graph replay: 2 chained" in out and ("agree:" in out or "DISAGREE:" in out)
    # warm-up 3 x 2 eager, 3 warm-up replays, 3 timed, 3 synchronized (2 each), 3 eager x 2
    assert fake.products == 3 * 2 + 3 * 2 + 3 * 2 + 3 * 2 + 3 * 2


def test_the_clock_gpu_checks_need_a_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _clock_benchmark(monkeypatch, FakeCuda(available=False))
    for check in ("marks", "graph"):
        assert bench.main(["--check", check]) == 2
        assert f"--check {check} needs a CUDA GPU" in capsys.readouterr().err
    with pytest.raises(SystemExit) as help_exit:
        bench.main(["--help"])
    assert help_exit.value.code == 0
    assert "--check {all,split,marks,graph}" in capsys.readouterr().out


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

    note = "phase profile unavailable: vLLM 0.34.0 model runner V2 (x.Runner) has no sample"
    llm = PhaseLLM({"ok": False, "note": note})
    engine = worker._Engine(llm, phases=True)
    first = engine.generate(["a"], {}, None)
    assert first["profile"] is None and first["profile_note"] == note  # the result carries it
    assert f"specdecode worker: {note}" in capsys.readouterr().out
    assert engine.generate(["a"], {}, None)["profile_note"] == note
    assert llm.calls == ["specdecode_phases_start", "generate", "generate"]  # asked once
    assert Round.of(first).profile_note == note
    off = worker._Engine(PhaseLLM({"ok": True}), phases=False)
    assert off.generate(["a"], {}, None)["profile_note"] == (
        "phase timing switched off (SPECDECODE_PHASES=0)"
    )


@pytest.mark.usefixtures("no_vllm_sampling")
def test_a_failed_round_stops_the_recording() -> None:
    from pytest_specdecode.engines import worker

    llm = PhaseLLM({"ok": True, "clock": "wall"}, fail=True)
    with pytest.raises(ValueError, match="bad prompt"):
        worker._Engine(llm, phases=True).generate(["a"], {}, None)
    assert llm.calls == ["specdecode_phases_start", "generate", "specdecode_phases_collect"]


# -- model runner V2 ------------------------------------------------------------------------
def v2_output(new: list[str], cached: list[tuple[str, int]]) -> SimpleNamespace:
    """A scheduler output as V2 reads it: cached requests with their output tokens so far (V2
    keeps no ``requests`` by id; a request with none is still in its prompt)."""
    out = output(new, [(r, 0) for r, _ in cached])
    out.scheduled_cached_reqs.num_output_tokens = [n for _, n in cached]
    return out


class StepTiming:
    """V2's ``StepTimingCollector`` as ``execute_model`` calls it (vLLM 0.32)."""

    def record_batch(self, input_batch: Any, full_cudagraph: bool) -> None:
        pass

    def forward_start(self) -> None:
        pass


class Speculator:
    def __init__(self, clock: Clock, cost: float) -> None:
        self.clock, self.cost = clock, cost

    def propose(self, *args: Any, **kwargs: Any) -> str:
        self.clock.now += self.cost
        return "drafts"


class V2Runner:
    """vLLM 0.32's model runner V2 (``vllm/v1/worker/gpu/model_runner.py``) as the timer sees
    it, with its call structure and stand-in computations: ``execute_model`` prepares the
    inputs, calls ``step_timing.forward_start()`` and runs the model inline (no
    ``_model_forward``); ``sample_tokens`` calls the public ``sample`` (logits, sampling,
    rejection) and then ``speculator.propose`` (no ``propose_draft_token_ids``); without a
    proposer ``speculator`` is None."""

    def __init__(self, clock: Clock, draft: float = 0.0) -> None:
        self.clock = clock
        self.step_timing = StepTiming()
        self.speculator = Speculator(clock, draft) if draft else None
        self.execute_model_state: Any = None

    def execute_model(self, scheduler_output: Any, intermediate_tensors: Any = None) -> Any:
        if not scheduler_output.total_num_scheduled_tokens:
            return "empty"
        self.clock.now += 0.002  # update states, inputs, attention metadata
        self.step_timing.record_batch(None, False)
        self.step_timing.forward_start()
        self.clock.now += 0.010  # model_output = self.model(**model_inputs)
        self.execute_model_state = "state"
        return None

    def sample_tokens(self, grammar_output: Any) -> Any:
        if self.execute_model_state is None:
            return None
        self.execute_model_state = None
        self.clock.now += 0.0005  # unpack the state
        self.sample("hidden", "batch", grammar_output)
        if self.speculator is not None:
            self.speculator.propose("batch", "hidden")
        self.clock.now += 0.0003  # postprocess
        return "output"

    def sample(self, hidden_states: Any, input_batch: Any, grammar_output: Any) -> Any:
        self.clock.now += 0.002  # compute_logits, bitmask, sampler or rejection sampler
        return "sampler output", 1, 0


def test_model_runner_v2_is_timed_through_its_own_points() -> None:
    clock = Clock()
    runner = V2Runner(clock, draft=0.004)
    timer = StepTimer.install(runner, clock)
    assert timer.runner == "V2"
    timer.begin()
    for out in (v2_output(["a", "b"], []), v2_output([], [("a", 1), ("b", 1)]),
                v2_output([], [("a", 2), ("b", 2)])):  # fmt: skip
        assert runner.execute_model(out) is None
        assert runner.sample_tokens(None) == "output"
        clock.now += 0.0007
    profile = timer.collect()
    assert profile is not None and profile["runner"] == "V2"
    got = Round.of({"elapsed": 1.0, "requests": [], "profile": profile}).profile
    assert got is not None and got.runner == "V2"
    pre, dec = got.prefill, got.decode
    assert (pre.steps, dec.steps) == (1, 2)
    assert pre.prepare == pytest.approx(0.002)
    assert pre.forward == pytest.approx(0.010)  # V2 computes the logits in sample()
    assert pre.sample == pytest.approx(0.0025)  # from sample_tokens' start to sample's return
    assert pre.draft == pytest.approx(0.004)
    assert pre.total == pytest.approx(0.002 + 0.010 + 0.0025 + 0.004 + 0.0003 + 0.0007)
    assert dec.draft == pytest.approx(0.008) and dec.forward == pytest.approx(0.020)
    # the baseline: no proposer (speculator None), timed all the same, nothing drafted
    base_clock = Clock()
    base = V2Runner(base_clock)
    base_timer = StepTimer.install(base, base_clock)
    base_timer.begin()
    assert base.execute_model(v2_output(["a"], [])) is None and base.sample_tokens(None)
    assert base.execute_model(v2_output([], [("a", 1)])) is None and base.sample_tokens(None)
    profile = base_timer.collect()
    assert profile is not None and profile["runner"] == "V2"
    assert profile["decode"]["steps"] == 1 and profile["decode"]["draft"] == 0.0


def test_a_v2_runner_missing_a_point_is_named_with_the_runner_and_the_point() -> None:
    class Renamed(V2Runner):  # a later vLLM renames sample(): nothing is wrapped
        sample = None  # type: ignore[assignment]

    runner = Renamed(Clock(), draft=0.001)
    worker = Worker(runner)
    reply = worker.specdecode_phases_start()
    assert reply["ok"] is False
    assert reply["note"].startswith("phase profile unavailable: vLLM ")
    assert "model runner V2 (tests.unit.test_phase_timing." in reply["note"]
    assert reply["note"].endswith("Renamed) has no sample")
    assert runner.sample_tokens(None) is None  # untouched: nothing was wrapped
    # a proposer without propose() is a missing point too (not "no proposer")
    runner = V2Runner(Clock(), draft=0.001)
    runner.speculator = SimpleNamespace()  # type: ignore[assignment]
    with pytest.raises(LookupError, match=r"model runner V2 \(.*V2Runner\) has no speculator\."):
        StepTimer.install(runner)


def test_the_installed_vllms_runners_have_every_point_the_timer_needs() -> None:
    """Read from the installed vLLM's source (no import): V1's runner and V2's, each point the
    timer wraps; fails the day an upgrade renames one (then RUNNERS needs the new point)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    for points in phases.RUNNERS:
        spec = importlib.util.find_spec(points.module)
        assert spec is not None and spec.origin, f"{points.module} is gone from vLLM"
        source = Path(spec.origin).read_text(encoding="utf-8")
        found = phases.points_in_source(source, points)
        assert all(found.values()), f"model runner {points.name}: {found}"
    # V2's forward point is its step-timing collector's method: the collector has it too
    collector = importlib.util.find_spec("vllm.v1.worker.gpu.async_utils")
    assert collector is not None and collector.origin
    text = Path(collector.origin).read_text(encoding="utf-8")
    assert "class StepTimingCollector" in text and "def forward_start(self)" in text


def test_points_in_source_tells_a_missing_point() -> None:
    v2 = next(p for p in phases.RUNNERS if p.name == "V2")
    source = (
        "class GPUModelRunner:\n"
        "    def execute_model(self, s):\n        self.step_timing.forward_start()\n"
        "    def sample_tokens(self, g):\n        self.speculator.propose()\n"
    )
    assert phases.points_in_source(source, v2) == {
        "execute_model": True, "step_timing.forward_start": True, "sample_tokens": True,
        "sample": False, "speculator.propose": True,
    }  # fmt: skip
    assert not any(phases.points_in_source("class Other: pass", v2).values())


def test_each_step_counts_its_requests_and_the_full_batch_apart() -> None:
    """Two requests, the second longer: the decode steps count each request they ran, and the
    steps that ran both (the round's largest decode batch) are kept apart."""
    runner, timer, clock = installed()

    def counted(new: list[str], cached: list[tuple[str, int]]) -> SimpleNamespace:
        out = output(new, cached)
        out.num_scheduled_tokens = dict.fromkeys([*new, *(r for r, _ in cached)], 1)
        return out

    timer.begin()
    step(runner, counted(["a", "b"], []))  # prefill, 2 requests
    step(runner, counted([], [("a", 5), ("b", 5)]))  # decode, both
    step(runner, counted([], [("a", 6), ("b", 6)]))  # decode, both
    step(runner, counted([], [("b", 7)]))  # decode, the long one alone
    profile = timer.collect()
    assert profile is not None
    decode = Round.of({"elapsed": 1.0, "requests": [], "profile": profile}).profile
    assert decode is not None
    assert (decode.decode.steps, decode.decode.request_steps) == (3, 5)
    assert decode.decode.full_steps == 2 and decode.prefill.request_steps == 2
    assert decode.decode.full_total == pytest.approx(2 * 0.0148)
