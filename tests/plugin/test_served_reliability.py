"""What a misbehaving server (or engine) must not do to the figures: counters that restart or
read negative or infinite, an answer that never ends, outputs that are not the baseline's
(issue 34, items 1, 7, 9 and 15). Stand-in servers on loopback, as in ``test_served.py``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_specdecode.baselines import files
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.protocol import Counters, RequestFigures, Round
from pytest_specdecode.engines.served import ServedEngine, parse_metrics
from pytest_specdecode.errors import CounterResetError, EngineError
from pytest_specdecode.measure.judge import judge
from pytest_specdecode.measure.paired import ratios, run_paired
from pytest_specdecode.measure.verdict import Verdict

from ..fakes import FakeSource
from ..helpers import fake_result
from . import test_served
from .test_served import CONFIG, SAMPLING, FakeServer, metrics_text

COUNT_FIELDS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


@pytest.fixture
def servers() -> Iterator[Any]:
    """``test_served``'s factory of fake servers, all closed at the end of the test."""
    yield from test_served.servers.__wrapped__()  # type: ignore[attr-defined]


# -- item 1: counters that restart ---------------------------------------------------------
def test_counters_are_never_negative() -> None:
    with pytest.raises(ValueError, match="cannot be negative: num_accepted_tokens=-5000"):
        Counters(10, 20, -5000)
    with pytest.raises(ValueError, match=r"accepted_per_position\[1\]=-1"):
        Counters(10, 20, 15, (3, -1))


def test_a_counter_that_went_down_is_a_restart_not_a_negative_delta() -> None:
    before, after = Counters(100, 400, 300, (90, 80)), Counters(10, 40, 15, (9, 6))
    with pytest.raises(CounterResetError, match="engine X restarted during the measurement: "
                       "vllm:spec_decode_num_drafts went down from 100 to 10"):  # fmt: skip
        after.since(before, "engine X")
    with pytest.raises(CounterResetError, match=r"per_pos \(position 1\) went down from 80 to 6"):
        Counters(100, 400, 300, (90, 6)).since(before)
    with pytest.raises(CounterResetError, match="has 1 positions, 2 before"):
        Counters(100, 400, 300, (90,)).since(before)
    assert Counters(110, 440, 330, (99, 86)).since(before) == Counters(10, 40, 30, (9, 6))


def test_another_process_start_is_a_restart_even_with_higher_counters() -> None:
    before = Counters(100, 400, 300, (90, 80), process_start=1.7e9)
    after = Counters(200, 800, 500, (150, 120), process_start=1.7e9 + 60)
    with pytest.raises(CounterResetError, match="process_start_time_seconds changed from "
                       "1700000000 to 1700000060"):  # fmt: skip
        after.since(before)
    same = Counters(200, 800, 500, (150, 120), process_start=1.7e9)
    assert same.since(before) == Counters(100, 400, 200, (60, 40))


def test_the_process_start_time_is_read_from_metrics(servers: Any) -> None:
    server = servers(started=1.7e9)
    engine = ServedEngine(server.url, CONFIG)
    assert engine.counters().process_start == 1.7e9
    assert parse_metrics(metrics_text()).counters.process_start is None  # not on every page


def test_a_server_that_restarts_within_a_round_fails_it_with_the_reason(servers: Any) -> None:
    server = servers(old=25000, started=1.7e9, restart_at=2)
    engine = ServedEngine(server.url, CONFIG)
    began = time.monotonic()
    with pytest.raises(CounterResetError) as info:
        engine.generate_round(["a", "b", "c"], SAMPLING, concurrency=1)
    assert server.restarts == 1
    message = str(info.value)
    assert f"--specdecode-speculative-url {server.url} restarted during the measurement" in message
    assert "vllm:request_success went down from 25000 to 1" in message
    assert "no figure from it" in message
    assert time.monotonic() - began < 4  # told at once, not after waiting for the requests


def test_a_restart_that_caught_up_is_told_by_the_process_start(servers: Any) -> None:
    """Restarted and served more since: no counter went down, the start time changed."""
    server = servers(started=1.7e9, restart_at=1)
    server.keep = True
    engine = ServedEngine(server.url, CONFIG)
    with pytest.raises(CounterResetError, match="process_start_time_seconds changed"):
        engine.generate_round(["a", "b"], SAMPLING, concurrency=1)
    before = engine.counters()
    server.restart(keep=True)  # between two rounds
    with pytest.raises(CounterResetError, match="process_start_time_seconds changed"):
        engine.counters().since(before)


def test_local_counters_that_go_down_fail_the_measurement() -> None:
    """The same guard where local engines' counters are diffed (paired rounds)."""
    source = FakeSource()
    spec_config = EngineConfig.create(
        "org/target", {"method": "ngram", "num_speculative_tokens": 4}, {}
    )
    base_config = EngineConfig.create("org/target", None, {})
    engine: Any = source.acquire(spec_config)
    plain = engine.generate_round
    calls = []

    def restarting(*args: Any, **kwargs: Any) -> Round:
        calls.append(1)
        if len(calls) == 3:  # the second measured round: the engine came back from zero
            engine._counters = Counters()
        return plain(*args, **kwargs)  # type: ignore[no-any-return]

    engine.generate_round = restarting
    with pytest.raises(CounterResetError, match="the speculative engine of org/target restarted"):
        run_paired(source, base_config, spec_config, ["a"], SAMPLING, trials=3)


RESTART_SUITE = """
import pytest

@pytest.mark.specdecode("served")
def test_one(specdecode):
    specdecode.run(["a", "b"], max_tokens=8, concurrency=2)

@pytest.mark.specdecode("served")
def test_two(specdecode):
    specdecode.run(["a", "b"], max_tokens=8, concurrency=2)
"""


def negative_after(limit: int) -> Any:
    """A /metrics page that reads -5000 accepted tokens once ``limit`` requests finished."""

    def page(server: FakeServer) -> str:
        n = server.requests
        accepted = n * 6 if n <= limit else -5000
        return metrics_text(drafts=n * 4, draft_tokens=n * 8, accepted=accepted,
                            pos0=n * 4, pos1=n * 2, requests=n)  # fmt: skip

    return page


@pytest.mark.parametrize(
    ("spec_server", "reason"),
    [
        (  # 25,000 requests of other traffic before, restarted in the second test's round 1
            {"old": 25000, "started": 1.7e9, "restart_at": 45},
            "*--specdecode-speculative-url http://127.0.0.1:* restarted during the "
            "measurement: vllm:request_success went down from 25044 to *",
        ),
        (
            {"page": negative_after(44)},
            "*/metrics: unexpected answer (vllm:spec_decode_num_accepted_tokens_total{*} is "
            "-5000: a Prometheus counter is a finite count of 0 or more*",
        ),
    ],
    ids=["restart", "negative"],
)
def test_a_server_whose_counters_restart_fails_the_test_and_saves_no_negative_count(
    pytester: pytest.Pytester, servers: Any, spec_server: dict[str, Any], reason: str
) -> None:
    """End to end: the plugin in served mode (2 prompts, a warm-up and 20 rounds a test: 42
    requests); the test measured before the restart is kept, the one during it (the second
    to run) fails with the reason; the report and the saved baseline hold no negative count
    and load (schema-valid)."""
    base, spec = servers(speculating=False), servers(**spec_server)
    pytester.makepyfile(test_served=RESTART_SUITE)
    result = pytester.runpytest_inprocess(
        "--specdecode-baseline-url", base.url, "--specdecode-speculative-url", spec.url,
        "--specdecode-trials", "2", "--specdecode-report", "r.json", "--specdecode-save",
        "s.json", "--specdecode-baseline-trials", "20",
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([reason])
    reports = result.reprec.getreports("pytest_runtest_logreport")  # type: ignore[attr-defined]
    (passed,) = [r.nodeid for r in reports if r.when == "call" and r.passed]
    for name in ("r.json", "s.json"):
        data = files.load(pytester.path / name)  # validates against the schema
        (entry,) = data["results"]
        assert entry["nodeid"] == passed
        assert all(entry[f] >= 0 for f in COUNT_FIELDS)
        assert all(v >= 0 for v in entry["acceptance_per_position"])
        assert 0 <= entry["acceptance_rate"] <= 1
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["results"][0]["acceptance_rate"] == 0.75  # the test's own traffic only


# -- item 15: values no counter can have ----------------------------------------------------
@pytest.mark.parametrize("value", ["+Inf", "NaN", "-5000"])
def test_a_counter_of_inf_nan_or_below_zero_is_a_clear_engine_error(
    servers: Any, value: str
) -> None:
    page = metrics_text(drafts=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"vllm:spec_decode_num_drafts_total\{engine=\"0\","):
        parse_metrics(page)
    server = servers(page=lambda _: page)
    with pytest.raises(EngineError) as info:
        ServedEngine(server.url, CONFIG).counters()
    shown = {"+Inf": "inf", "NaN": "nan", "-5000": "-5000"}[value]
    assert str(info.value).startswith(f"{server.url}/metrics: unexpected answer (")
    assert f'model_name="m"}} is {shown}: a Prometheus counter is a finite count' in str(info.value)


def test_inf_and_nan_elsewhere_on_the_page_are_not_ours_to_refuse() -> None:
    page = metrics_text(drafts=3) + (
        "# TYPE vllm:some_gauge gauge\nvllm:some_gauge NaN\n"
        "# TYPE vllm:ttft_seconds histogram\n"
        'vllm:ttft_seconds_bucket{le="+Inf"} 2\nvllm:ttft_seconds_count 2\n'
        "vllm:ttft_seconds_sum 0.5\n"
        "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds +Inf\n"
    )
    metrics = parse_metrics(page)
    assert metrics.counters.num_drafts == 3 and metrics.counters.process_start is None


# -- item 7: an answer that never ends ------------------------------------------------------
def test_a_metrics_page_that_never_ends_is_cut_off_at_the_cap(servers: Any) -> None:
    server = servers(endless=True)
    engine = ServedEngine(server.url, CONFIG)
    began = time.monotonic()
    with pytest.raises(EngineError) as info:
        engine.counters()
    assert str(info.value).startswith(
        f"{server.url}/metrics: the answer is larger than 64 MiB, the most read of it; cut off"
    )
    assert "is --specdecode-speculative-url" in str(info.value)
    assert time.monotonic() - began < 30


def test_a_metrics_page_that_trickles_forever_ends_at_the_timeout(servers: Any) -> None:
    server = servers(endless=True, trickle=0.02)
    engine = ServedEngine(server.url, CONFIG, timeout=0.5)
    with pytest.raises(EngineError, match=r"/metrics: no answer within 0\.5 s"):
        engine.counters()


def test_the_cap_of_a_completion_grows_with_the_tokens_it_asks_for() -> None:
    page = ServedEngine._cap(None)
    assert ServedEngine._cap({"n": 4, "max_tokens": 1000}) == page + 4000 * 1024
    assert ServedEngine._cap({"max_tokens": 10}) == page + 10 * 1024


# -- item 9: outputs that are not the baseline's --------------------------------------------
def test_a_stream_without_token_ids_is_an_engine_error(servers: Any) -> None:
    server = servers(token_ids=False)
    engine = ServedEngine(server.url, CONFIG)
    with pytest.raises(EngineError, match="/v1/completions: a streamed chunk has no token_ids"):
        engine.generate_round(["a"], SAMPLING)


def test_the_speedup_counts_tokens_per_second_not_time() -> None:
    """A side that generated a quarter of the tokens in half the time is not 2x faster."""
    full, quarter = [[1] * 8, [2] * 8], [[1] * 2, [2] * 2]
    result = fake_result(base_outputs=full, spec_outputs=quarter, temperature=0.8)
    assert result.speedup == pytest.approx(0.5, rel=0.01)
    assert fake_result(base_outputs=full).speedup == pytest.approx(2.0, rel=0.01)


def test_a_round_without_tokens_is_refused() -> None:
    empty = Round(0.5, (RequestFigures((), "", None, None),))
    some = Round(1.0, (RequestFigures((1, 2), "ab", 0.1, 0.1),))
    with pytest.raises(EngineError, match="round 1: the speculative engine generated 0 tokens"):
        ratios([some], [empty])


def test_a_greedy_result_whose_outputs_differ_is_not_worth_it() -> None:
    """Clearly faster, but at temperature 0 only 1 of 4 prompts gives the baseline's output."""
    base = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 1, 1]]
    spec = [[1, 2, 3], [4, 5, 0], [7, 0, 9], [0, 1, 1]]
    verdict, reasons = judge(fake_result(base_outputs=base, spec_outputs=spec))
    assert verdict == Verdict.INCONCLUSIVE
    assert reasons[0].startswith("faster: speedup 2.00x")
    assert "outputs differ at temperature 0: 0.25 of prompts match the baseline's" in reasons[-1]
    half = [[1, 2, 3], [4, 5, 6], [7, 0, 9], [0, 1, 1]]  # half match: the rule's edge
    assert judge(fake_result(base_outputs=base, spec_outputs=half))[0] == Verdict.WORTH


def test_sampled_outputs_may_differ_the_creative_suite_keeps_its_verdict() -> None:
    base, spec = [[1, 2, 3], [4, 5, 6]], [[3, 2, 1], [6, 5, 4]]
    verdict, reasons = judge(fake_result(base_outputs=base, spec_outputs=spec, temperature=0.8))
    assert verdict == Verdict.WORTH and not any("differ" in r for r in reasons)


def test_output_lengths_far_apart_cannot_be_worth_it() -> None:
    base, short = [[1] * 40, [2] * 40], [[1] * 30, [2] * 30]  # 75% of the tokens
    result = fake_result(base_outputs=base, spec_outputs=short, temperature=0.8,
                         spec_times=(0.3, 0.33, 0.27))  # fmt: skip
    verdict, reasons = judge(result)
    assert verdict == Verdict.INCONCLUSIVE and result.speedup_ci[0] > 1
    assert (
        "output lengths differ: the speculative engine generated 60 tokens to the baseline's "
        "80 (75%) in the last round" in reasons[-1]
    )
    slow = fake_result(base_outputs=base, spec_outputs=short, spec_times=(2.0, 2.1, 1.9))
    assert judge(slow)[0] == Verdict.NOT_WORTH  # slower stays "not worth it"


SHORT_SUITE = """
import pytest

@pytest.mark.specdecode("served", min_speedup=1.2)
def test_short(specdecode):
    specdecode.run(["a", "b"], max_tokens=16, temperature=TEMPERATURE)
"""


@pytest.mark.parametrize(
    ("temperature", "why"), [(0.0, "outputs differ at temperature 0"), (0.8, "lengths differ")]
)
def test_a_server_that_returns_a_quarter_of_the_tokens_is_not_worth_it(
    pytester: pytest.Pytester, servers: Any, temperature: float, why: str
) -> None:
    """End to end: the speculative server streams a quarter of max_tokens, so it takes about
    a quarter of the time; the test fails its speedup gate and the verdict says why."""
    base, spec = servers(speculating=False, trickle=0.02), servers(trickle=0.02, short=4)
    pytester.makepyfile(test_served=SHORT_SUITE.replace("TEMPERATURE", str(temperature)))
    result = pytester.runpytest_inprocess(
        "--specdecode-baseline-url", base.url, "--specdecode-speculative-url", spec.url,
        "--specdecode-trials", "3", "--specdecode-report", "r.json",
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*speedup*below*1.2*"])
    (entry,) = files.load(pytester.path / "r.json")["results"]
    assert entry["verdict"] != Verdict.WORTH and entry["speedup"] < 1.2
    assert any(why in r for r in entry["verdict_reasons"])
