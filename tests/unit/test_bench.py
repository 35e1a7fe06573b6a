"""``Bench`` without pytest machinery, on the simulated backend (the real one runs in
``tests/e2e/test_e2e_bench.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_specdecode import Bench, ConfigError, EngineBackend, EngineSource
from pytest_specdecode.engines.protocol import Sampling
from pytest_specdecode.measure import bench as bench_module

from ..fakes import Collected, FakeSource

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
DRAFT = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}


def test_the_fake_meets_the_engine_protocols() -> None:
    source = FakeSource()
    assert isinstance(source, EngineSource)
    bench = Bench("org/target", NGRAM, source=source, progress=None)
    assert isinstance(bench.engine("baseline"), EngineBackend)


def test_run_returns_a_complete_result() -> None:
    source = FakeSource()
    seen = Collected()
    bench = Bench(
        "org/target", DRAFT, {"max_model_len": 512}, source=source, progress=None,
        sink=seen, trials=4,
    )  # fmt: skip
    result = bench.run(["p1", "p2"], max_tokens=4)
    assert seen.products == [result] and bench.results == [result]
    assert result.trials == 4 and result.speedup == pytest.approx(2.0, rel=0.1)
    # the cost ratio from inside the speculative engine (the fake's draft: 0.1 of a step)
    assert result.alpha is not None and result.cost_ratio == pytest.approx(0.1, rel=0.05)
    assert result.predicted_speedup is not None and result.efficiency is not None
    assert result.verdict == "worth it" and result.verdict_reasons
    phases = result.phases
    assert phases is not None and phases.clock == "wall"
    assert phases.speculative.decode.draft_ms and phases.draft_share and phases.draft_share > 0
    assert phases.baseline.decode.draft_ms == 0 and phases.baseline.decode.steps == 3
    assert phases.break_even_length == pytest.approx(1.5, rel=0.1)  # 2 base steps / speedup 2
    assert phases.acceptance_length == pytest.approx(result.mean_acceptance_length)
    assert phases.pays and "speculation pays" in phases.explanation
    assert source.starts == 2  # the pair only: no third engine timing the draft alone
    bench.run(["p1"], max_tokens=4)
    assert source.starts == 2 and bench.results[1].label == "#2"


def test_adaptive_trials_decide_against_the_gates() -> None:
    bench = Bench(
        "org/target", NGRAM, source=FakeSource(), progress=None, gates={"min_speedup": 1.2},
        trials="auto", max_trials=12,
    )  # fmt: skip
    result = bench.run(["p"], max_tokens=4)
    assert result.adaptive and result.trials < 12 and not result.inconclusive


def test_sweep_and_distribution_check() -> None:
    source = FakeSource()
    source.speedup_fn = lambda k, c: 1.0 + 0.1 * k
    bench = Bench("org/target", NGRAM, source=source, progress=None)
    sweep = bench.sweep(["p"], max_tokens=4, num_speculative_tokens=[1, 3], concurrency=[1, 2])
    assert [(k, c) for k, c, _ in sweep.points] == [(1, 1), (1, 2), (3, 1), (3, 2)]
    assert {c: k for c, (k, _) in sweep.best_k().items()} == {1: 3, 2: 3}
    check = bench.sample_equivalence(["p"], samples=40, tokens=3)
    assert check.samples_per_engine == 40 and check.tests


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trials": 1}, r"Bench\(trials=...\): at least 2 trials"),
        ({"timeout": -1}, r"Bench\(timeout=...\): expected a positive number"),
        ({"report": "r.json"}, r"Bench\(report=...\): unknown setting; known: trials"),
        ({"baseline_url": "http://a:1"}, "baseline_url and speculative_url go together"),
        ({"speculative_url": "ftp://x"}, r"Bench\(speculative_url=...\): expected the http"),
    ],
)
def test_settings_are_validated_like_the_plugin_options(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Bench("org/target", NGRAM, **kwargs)


def test_configuration_errors_name_the_keyword() -> None:
    with pytest.raises(ConfigError, match=r"Bench\(target=...\): no target model"):
        Bench(None, NGRAM)
    with pytest.raises(ConfigError, match="num_speculative_tokens is missing"):
        Bench("org/target", {"method": "ngram"})


def test_shared_engines_close_with_the_last_open_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[FakeSource] = []

    def make_source(settings: object, progress: object) -> FakeSource:
        made.append(FakeSource())
        return made[-1]

    monkeypatch.setattr(bench_module, "_shared", bench_module._Shared())
    monkeypatch.setattr(bench_module, "make_source", make_source)
    with Bench("org/target", NGRAM, progress=None) as outer:
        outer.run(["p"], max_tokens=4)
        with Bench("org/target", NGRAM, progress=None) as inner:
            inner.run(["p"], max_tokens=4)  # the same engines: started once
        assert len(made) == 1 and made[0].starts == 2 and made[0].closed == 0
    assert made[0].closed == 2  # the last open Bench shut both engines down


def test_engine_memory_comes_from_the_source_through_the_protocol() -> None:
    class Measured(FakeSource):
        def memory_gib(self, engine: Any) -> float | None:
            return 2.5 if engine.config.speculative_json else 2.0

    result = Bench("org/target", NGRAM, source=Measured(), progress=None, trials=2).run(
        ["p1"], max_tokens=4
    )
    assert (result.baseline.memory_gib, result.speculative.memory_gib) == (2.0, 2.5)
    assert isinstance(Measured(), EngineSource)


def test_every_run_gets_one_typed_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []
    run_paired = bench_module.run_paired

    def recording(*args: Any, **kwargs: Any) -> Any:
        sent.append(args[4])
        return run_paired(*args, **kwargs)

    monkeypatch.setattr(bench_module, "run_paired", recording)
    bench = Bench("org/target", NGRAM, source=FakeSource(), progress=None, trials=2)
    schema = {"type": "object"}
    bench.run(["p"], max_tokens=4, json_schema=schema, ignore_eos=False, top_p=0.9)
    bench.sweep(["p"], max_tokens=3, num_speculative_tokens=[2], seed=5, label="s")
    typed, swept = sent
    assert isinstance(typed, Sampling) and isinstance(swept, Sampling)
    assert (typed.max_tokens, typed.ignore_eos, typed.extra) == (4, False, {"top_p": 0.9})
    # its mapping is the keywords vLLM's SamplingParams gets, as the backends take them
    assert typed == {
        "temperature": 0.0, "max_tokens": 4, "ignore_eos": False, "seed": 0, "top_p": 0.9,
        "structured_outputs": {"json": schema},
    }  # fmt: skip
    assert dict(swept) == {"temperature": 0.0, "max_tokens": 3, "ignore_eos": True, "seed": 5}


def test_sampling_takes_typed_keywords_from_the_extra_ones() -> None:
    made = Sampling.of(8, 1, {"n": 3, "seed": 7, "structured_outputs": "x", "top_k": 2})
    assert (made.temperature, made.n, made.seed, made.extra) == (1.0, 3, 7, {"top_k": 2})
    assert made.structured_outputs == "x"
    both = Sampling.of(8, 0, {"structured_outputs": "x"}, structured_outputs="y")
    assert both["structured_outputs"] == "y"  # run(json_schema=...) over the keyword
    assert "seed" not in Sampling(max_tokens=2) and Sampling(max_tokens=2).get("n") is None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda b: b.sweep(["p"], max_tokens=4, num_speculative_tokens=[0]),
            "sweep(num_speculative_tokens=...): expected positive integers, got [0]",
        ),
        (
            lambda b: b.sweep(["p"], max_tokens=4, concurrency=[2, 2]),
            "sweep(concurrency=...): a value is listed twice in [2, 2]",
        ),
        (
            lambda b: b.sweep(["p"], max_tokens=4, label=" "),
            "sweep(label=...): expected a non-empty string, e.g. label=\"long\", got ' '",
        ),
        (
            lambda b: b.sample_equivalence(["p"], temperature=0),
            "sample_equivalence(temperature=...): expected a number > 0, got 0; at temperature 0"
            " use run() and exact matching",
        ),
        (
            lambda b: b.conversation([["a"]], max_tokens=4, warmup=2, prompts=["p"]),
            "conversation(warmup=...): each turn is sent once, unmeasured, before its rounds "
            "(its first sending, whose cache hit rate the result notes); leave warmup out",
        ),
        (
            lambda b: b.conversation([["a"]], max_tokens=4, prompts=["p"]),
            "conversation(prompts=...): the prompts are the conversations' turns; pass "
            "conversations=",
        ),
        (
            lambda b: b.run([], max_tokens=0, label=3),
            "run(prompts=...): the prompt list is empty",
        ),
        (
            lambda b: b.run(["p"], max_tokens=0, label=3),
            "run(max_tokens=...): expected a positive integer, got 0",
        ),
        (
            lambda b: b.run(["p"], max_tokens=4, label=3, json_schema="{}"),
            "run(label=...): expected a string, got 3",
        ),
        (
            lambda b: b.load(["p"], max_tokens=4, rates=[0], label=3),
            "load(rates=...): every rate must be a number of requests per second above 0 and "
            'at most 1e+06 (float("inf"): all at once), got 0 in [0]',
        ),
    ],
)
def test_argument_errors_come_in_their_order(call: Any, message: str) -> None:
    bench = Bench("org/target", NGRAM, source=FakeSource(), progress=None, trials=2)
    with pytest.raises(ConfigError) as raised:
        call(bench)
    assert str(raised.value) == message


def test_a_clash_asks_for_distinct_labels() -> None:
    bench = Bench("org/target", NGRAM, name="t.py::t", source=FakeSource(), progress=None, trials=2)
    bench.run(["p"], max_tokens=4, label="a")
    with pytest.raises(ConfigError) as raised:
        bench.run(["p"], max_tokens=4, label="a")
    assert str(raised.value) == (
        "t.py::t: run(label='a'): this test already stored a result under the key 't.py::t[a]'; "
        'give each run() of a test a distinct label, e.g. run(..., label="short") and '
        'run(..., label="long")'
    )
    bench.sweep(["p"], max_tokens=4)
    with pytest.raises(ConfigError) as raised:
        bench.sweep(["p"], max_tokens=4)
    assert str(raised.value) == (
        "t.py::t: sweep(): its result 'k=4 c=1' would be stored under the key 't.py::t[k=4 c=1]',"
        " which this test's earlier sweep() holds; give each sweep() of a test a distinct label,"
        ' e.g. sweep(..., label="short") and sweep(..., label="long")'
    )
