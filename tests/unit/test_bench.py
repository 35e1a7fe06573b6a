"""``Bench`` without pytest machinery, on the simulated backend (the real one runs in
``tests/e2e/test_e2e_bench.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_specdecode import Bench, ConfigError, EngineBackend, EngineSource
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
