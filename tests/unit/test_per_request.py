"""Per-request acceptance: what the engines report per prompt, how a result carries it (each
prompt's acceptance length, the spread, the prompts that gain least) and its one dict form.
On real engines: tests/e2e/test_e2e_phase_timing.py (the draft pair it profiles)."""

from __future__ import annotations

import json
import statistics
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest

from pytest_specdecode import Bench
from pytest_specdecode.baselines.files import results_schema
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.protocol import (
    REQUEST_METRICS_ARG,
    Counters,
    RequestFigures,
    Round,
    Sampling,
    request_spec_fields,
)
from pytest_specdecode.engines.served import ServedEngine
from pytest_specdecode.engines.worker import _request_figures, with_request_metrics
from pytest_specdecode.measure.figures import (
    build_result,
    least_gain,
    least_gain_note,
    request_acceptance,
)
from pytest_specdecode.measure.paired import PairedRounds
from pytest_specdecode.measure.result import Result

from ..fakes import FakeSource
from ..plugin.test_served import FakeServer

#: What vLLM 0.32's ``RequestSpecDecodeMetrics.to_dict()`` gives at the ``detailed`` level
#: (k=3; steps accepting 2 of 3, 3 of 3 and 0 of a 2-token draft).
DETAILED = {
    "mean_acceptance_length": 2.666666666666667,
    "draft_acceptance_rate": 0.625,
    "acceptance_histogram": [1, 0, 1, 1],
    "num_spec_steps": 3,
    "num_accepted_draft_tokens": 5,
    "num_draft_tokens": 8,
    "num_spec_tokens": 3,
    "per_step_accepted": [2, 3, 0],
    "per_step_drafted": [3, 3, 2],
}
SUMMARY = {k: v for k, v in DETAILED.items() if not k.startswith("per_step")}
NGRAM = {"method": "ngram", "num_speculative_tokens": 4}


# -- engine boundary ---------------------------------------------------------------------------
def test_vllm_metrics_become_plain_request_fields() -> None:
    fields = request_spec_fields(DETAILED)
    assert fields == {
        "spec_steps": 3, "accepted_tokens": 5, "draft_tokens": 8,
        "per_step_accepted": (2, 3, 0), "per_step_drafted": (3, 3, 2),
    }  # fmt: skip
    assert json.loads(json.dumps(fields)) == {
        k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()
    }
    assert request_spec_fields(SUMMARY) == {
        "spec_steps": 3,
        "accepted_tokens": 5,
        "draft_tokens": 8,
    }
    request = RequestFigures((1, 2), "ab", 0.1, 0.01, **fields)
    assert request.acceptance_length == pytest.approx(DETAILED["mean_acceptance_length"])


@pytest.mark.parametrize(
    "metrics",
    [None, "x", {}, {**SUMMARY, "num_spec_steps": "many"}, {"num_spec_steps": 3}],
)
def test_absent_or_malformed_metrics_give_no_fields(metrics: Any) -> None:
    assert request_spec_fields(metrics) == {}


def test_per_step_arrays_of_different_lengths_are_left_out() -> None:
    fields = request_spec_fields({**DETAILED, "per_step_drafted": [3, 3]})
    assert "per_step_accepted" not in fields and fields["spec_steps"] == 3


def test_request_figures_cross_the_pipe_as_plain_data() -> None:
    sent = {
        "token_ids": [1],
        "text": "a",
        "ttft": 0.1,
        "tpot": None,
        **request_spec_fields(DETAILED),
    }
    request = RequestFigures.of(json.loads(json.dumps(sent)))  # lists arrive, tuples come out
    assert request.per_step_accepted == (2, 3, 0) and request.per_step_drafted == (3, 3, 2)
    assert request.spec_steps == 3 and request.accepted_tokens == 5 and request.draft_tokens == 8
    plain = RequestFigures.of({"token_ids": [1], "text": "a", "ttft": None, "tpot": None})
    assert plain.spec_steps is None and plain.acceptance_length is None


def test_acceptance_length_without_a_draft_is_one() -> None:
    request = RequestFigures((1,), "a", None, None, spec_steps=0, accepted_tokens=0)
    assert request.acceptance_length == 1.0


def _vllm_output(spec: Any) -> Any:
    """A stand-in ``RequestOutput`` as the worker reads it."""
    metrics = None if spec is None else SimpleNamespace(to_dict=lambda: spec)
    completion = SimpleNamespace(token_ids=[7, 8], text="xy", spec_decode_metrics=metrics)
    return SimpleNamespace(outputs=[completion], metrics=None)


def test_the_worker_sends_each_requests_acceptance() -> None:
    sent = _request_figures(_vllm_output(DETAILED))
    assert sent["spec_steps"] == 3 and sent["per_step_drafted"] == (3, 3, 2)
    assert RequestFigures.of(sent).acceptance_length == pytest.approx(8 / 3)
    assert "spec_steps" not in _request_figures(_vllm_output(None))  # metrics off


def test_the_speculative_engine_starts_with_detailed_metrics() -> None:
    spec = {"speculative_config": {"method": "ngram"}, "dtype": "float32"}
    assert with_request_metrics(spec, True)[REQUEST_METRICS_ARG] == "detailed"
    chosen = {**spec, REQUEST_METRICS_ARG: "none"}  # the caller's level is kept
    assert with_request_metrics(chosen, True)[REQUEST_METRICS_ARG] == "none"
    assert REQUEST_METRICS_ARG not in with_request_metrics(spec, False)  # an older vLLM
    # engine_kwargs are shared: a baseline never gets it (vLLM refuses it without speculation)
    baseline = {"dtype": "float32", REQUEST_METRICS_ARG: "detailed"}
    assert with_request_metrics(baseline, True) == {"dtype": "float32"}
    assert spec == {"speculative_config": {"method": "ngram"}, "dtype": "float32"}  # not changed


# -- served ------------------------------------------------------------------------------------
SERVED = EngineConfig.create("tiny", {"method": "served"}, {})
SAMPLING = {"temperature": 0.0, "max_tokens": 8, "ignore_eos": True}


@pytest.fixture
def served() -> Any:
    made: list[FakeServer] = []

    def make(**kwargs: Any) -> ServedEngine:
        made.append(FakeServer(**kwargs))
        return ServedEngine(made[-1].url, SERVED)

    yield make
    for server in made:
        server.close()


def test_served_responses_carry_each_requests_acceptance(served: Any) -> None:
    engine = served(spec_decoding=DETAILED)
    done = engine.generate_round(["a", "b"], SAMPLING)
    for request in done.requests:
        assert request.token_ids == tuple(range(8))  # the usage chunk adds no token
        assert (request.spec_steps, request.accepted_tokens, request.draft_tokens) == (3, 5, 8)
        assert request.per_step_accepted == (2, 3, 0)
    assert request_acceptance([done]) == pytest.approx((8 / 3, 8 / 3))


@pytest.mark.parametrize("spec_decoding", [None, {"mean_acceptance_length": 2.0}])
def test_a_server_without_per_request_metrics_gives_none(served: Any, spec_decoding: Any) -> None:
    engine = served(spec_decoding=spec_decoding)
    done = engine.generate_round(["a"], SAMPLING)
    assert done.requests[0].spec_steps is None and done.requests[0].token_ids == tuple(range(8))
    assert request_acceptance([done]) is None


# -- figures -----------------------------------------------------------------------------------
def _request(steps: int | None, accepted: int | None) -> RequestFigures:
    return RequestFigures((1,), "a", None, None, spec_steps=steps, accepted_tokens=accepted)


def test_acceptance_length_per_prompt_pools_the_rounds() -> None:
    rounds = [
        Round(1.0, (_request(10, 30), _request(10, 0), _request(None, None))),
        Round(1.0, (_request(30, 30), _request(0, 0), _request(None, None))),
    ]
    # prompt 0: 60 accepted in 40 steps (not the mean of 4.0 and 2.0); prompt 1: never
    # accepted; prompt 2: not reported
    assert request_acceptance(rounds) == (2.5, 1.0, None)
    unreported = Round(1.0, (_request(None, None),) * 3)
    assert request_acceptance([unreported]) is None and request_acceptance([]) is None


def test_least_gain_names_the_lowest_below_the_best() -> None:
    values = (3.0, 1.5, None, 2.0, 1.5, 4.0, 3.5, 2.5)
    assert least_gain(values) == (1, 4, 3)  # lowest first, ties by index, at most 3
    assert least_gain((2.0, 1.0, 3.0, 4.0)) == (1, 0)  # at most half of the prompts
    assert least_gain((2.0, 2.0, 2.0, 2.0)) == ()  # none gains less than the others
    assert least_gain((1.0,)) == () and least_gain((None, None)) == () and least_gain(None) == ()
    assert least_gain_note(values, (1, 4)) == "prompts 1, 4 (acceptance length 1.50, 1.50)"
    assert least_gain_note(values, (3,)) == "prompt 3 (acceptance length 2.00)"


def _raw(per_prompt: list[tuple[int, int] | None]) -> PairedRounds:
    """Three paired rounds; each speculative request reports ``(steps, accepted)``."""
    spec_requests = tuple(_request(*(q or (None, None))) for q in per_prompt)
    base_requests = tuple(_request(None, None) for _ in per_prompt)
    return PairedRounds(
        baseline=tuple(Round(t, base_requests) for t in (1.0, 1.1, 0.9)),
        speculative=tuple(Round(t, spec_requests) for t in (0.5, 0.55, 0.45)),
        counters=Counters(10, 40, 30, (10, 8, 7, 5)),
        round_counters=(Counters(3, 12, 9, (3, 3, 2, 1)),) * 3,
        mode="interleaved",
        memory="test",
    )


def _result(per_prompt: list[tuple[int, int] | None]) -> Result:
    spec = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}
    return build_result(
        _raw(per_prompt), nodeid="t.py::test_a", category="c",
        speculative=EngineConfig.create("org/target", spec, {}), num_prompts=len(per_prompt),
        sampling=Sampling(max_tokens=1), concurrency=None,
    )  # fmt: skip


def test_a_result_carries_the_per_prompt_figures_and_names_the_least_gain() -> None:
    steps = [(10, 40), (10, 2), (10, 30), (10, 20), (10, 4), (10, 40), None]
    result = _result(steps)
    assert result.request_acceptance == pytest.approx((5.0, 1.2, 4.0, 3.0, 1.4, 5.0, None))
    assert result.least_gain == (1, 4, 3)
    assert result.notes == {"least gain": "prompts 1, 4, 3 (acceptance length 1.20, 1.40, 3.00)"}
    valued = sorted(v for v in result.request_acceptance or () if v is not None)
    deciles = statistics.quantiles(valued, n=10, method="inclusive")
    assert result.acceptance_spread == pytest.approx((deciles[0], deciles[4], deciles[8]))
    assert result.acceptance_spread == pytest.approx((1.3, 3.5, 5.0))


def test_without_per_request_figures_the_fields_are_empty() -> None:
    result = _result([None, None])
    assert result.request_acceptance is None and result.least_gain == ()
    assert result.acceptance_spread is None and "least gain" not in result.notes
    again = Result.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result and again.to_dict()["request_acceptance"] is None


def test_the_dict_form_round_trips_and_fits_the_schema() -> None:
    result = _result([(10, 40), (10, 2), None, (10, 20)])
    data = json.loads(json.dumps(result.to_dict()))
    assert data["request_acceptance"] == [5.0, 1.2, None, 3.0] and data["least_gain"] == [1]
    again = Result.from_dict(data)
    assert again == result and again.acceptance_spread == result.acceptance_spread
    assert isinstance(again.request_acceptance, tuple) and isinstance(again.least_gain, tuple)
    jsonschema.Draft202012Validator(results_schema()).validate(
        {"format_version": 1, "results": [data], "environment": {}}
    )


# -- on the simulated engines ------------------------------------------------------------------
def test_a_bench_run_reports_each_prompts_acceptance() -> None:
    source = FakeSource()
    source.prompt_acceptance = lambda i: [0.9, 0.2, 0.6, 0.8][i]
    bench = Bench("org/target", NGRAM, source=source, progress=None, trials=3)
    result = bench.run(["p0", "p1", "p2", "p3"], max_tokens=4)
    # 10 steps of 4 tokens per prompt and round: 36, 8, 24, 32 accepted
    assert result.request_acceptance == pytest.approx((4.6, 1.8, 3.4, 4.2))
    assert result.least_gain == (1, 2)
    assert result.notes["least gain"] == "prompts 1, 2 (acceptance length 1.80, 3.40)"
    source.per_request = False
    plain = bench.run(["p0", "p1"], max_tokens=4)
    assert plain.request_acceptance is None and "least gain" not in plain.notes
