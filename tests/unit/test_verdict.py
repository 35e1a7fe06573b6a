import json
import math
from dataclasses import replace

import pytest

from pytest_specdecode import assert_extra_memory
from pytest_specdecode.baselines.report import Report
from pytest_specdecode.errors import ConfigError, GateError
from pytest_specdecode.measure.figures import with_verdict
from pytest_specdecode.measure.judge import judge, verdict_of
from pytest_specdecode.measure.result import Result, entry
from pytest_specdecode.measure.verdict import Verdict, by_interval, written

from ..helpers import fake_result


def test_clear_speedup_is_worth_it() -> None:
    verdict, reasons = judge(fake_result())
    assert verdict == Verdict.WORTH and reasons[0].startswith("faster: speedup 2.00x")


def test_slowdown_with_low_first_position_acceptance_names_the_cost_ratio() -> None:
    result = replace(
        fake_result(spec_times=(2.0, 2.2, 1.8)),
        acceptance_per_position=[0.25, 0.1, 0.05, 0.02],
        alpha=0.2,
        cost_ratio=0.3,
    )
    verdict, reasons = judge(result)
    assert verdict == Verdict.NOT_WORTH
    assert any(
        "acceptance too low for this cost ratio: first draft token accepted 0.25 <= "
        "draft/target cost 0.30, so even k=1 cannot win" in r
        for r in reasons
    )


def test_decaying_acceptance_with_low_alpha_is_not_called_hopeless() -> None:
    # conditional acceptance [0.5, 0.05, 0.05, 0.05]: alpha-hat 0.345 <= c = 0.4, yet k = 1
    # gives (1 + 0.5) / (1 + 0.4) = 1.07
    result = replace(
        fake_result(spec_times=(1.1, 1.2, 1.0)),
        acceptance_per_position=[0.5, 0.025, 0.00125, 0.0000625],
        alpha=0.345,
        cost_ratio=0.4,
    )
    _, reasons = judge(result)
    assert not any("acceptance too low" in r for r in reasons)
    hopeless = replace(result, acceptance_per_position=[0.4, 0.04, 0.004, 0.0004])
    _, reasons = judge(hopeless)
    assert any("first draft token accepted 0.40 <= draft/target cost 0.40" in r for r in reasons)


def test_overhead_reads_efficiency_against_measured_tokens_per_step() -> None:
    plain = fake_result(spec_times=(1.1, 1.2, 1.0))  # 4 tokens per step measured
    result = replace(plain, cost_ratio=0.1, efficiency=0.5, alpha=0.9, predicted_speedup=3.0)
    _, reasons = judge(result)
    allowed = plain.mean_acceptance_length / 1.4
    assert f"overhead: the measured speedup is 50% of the {allowed:.2f}x that 4.00 tokens" in (
        " ".join(reasons)
    )


def test_straddling_one_is_inconclusive() -> None:
    result = fake_result(spec_times=(0.8, 1.3, 1.0))
    verdict, reasons = judge(result)
    assert verdict == Verdict.INCONCLUSIVE and "contains 1.0" in reasons[0]


def test_memory_gate() -> None:
    plain = fake_result()
    result = replace(
        plain,
        baseline=replace(plain.baseline, memory_gib=1.0),
        speculative=replace(plain.speculative, memory_gib=3.5),
        extra_memory_gib=2.5,
    )
    verdict, reasons = judge(result, max_extra_memory_gib=1.0)
    assert verdict == Verdict.NOT_WORTH and "above the 1 GiB allowed" in reasons[-1]
    assert_extra_memory(result, max=3.0)
    with pytest.raises(GateError, match="costs 2.50 GiB more memory than the baseline"):
        assert_extra_memory(result, max=1.0)


def test_a_verdict_is_its_words_in_a_report_and_read_back() -> None:
    """The JSON form is the words ("" for none); reading gives the enum back."""
    assert [str(v) for v in Verdict] == ["worth it", "not worth it", "inconclusive"]
    judged = with_verdict(fake_result(), None)
    assert judged.verdict is Verdict.WORTH
    data = judged.to_dict()
    assert type(data["verdict"]) is str and data["verdict"] == "worth it"
    assert json.dumps(data["verdict"]) == '"worth it"'
    assert Result.from_dict(data).verdict is Verdict.WORTH
    unjudged = fake_result()
    assert unjudged.verdict is None and unjudged.to_dict()["verdict"] == ""
    assert Result.from_dict(unjudged.to_dict()).verdict is None
    assert Verdict.read("") is None and Verdict.read(None) is None
    assert all(Verdict.read(written(v)) is v for v in Verdict) and written(None) == ""


def test_the_interval_alone_decides_and_an_unknown_end_decides_nothing() -> None:
    assert by_interval((1.1, 1.5)) is Verdict.WORTH
    assert by_interval((0.5, 0.9)) is Verdict.NOT_WORTH
    assert by_interval((0.9, 1.1)) is Verdict.INCONCLUSIVE
    assert by_interval((math.nan, 0.9)) is Verdict.NOT_WORTH
    assert by_interval((1.1, math.nan)) is Verdict.WORTH
    for unknown in ((math.nan, math.nan), (math.inf, math.inf), (-math.inf, -math.inf)):
        assert by_interval(unknown) is Verdict.INCONCLUSIVE


def test_verdict_of_a_result_is_its_own_else_its_intervals() -> None:
    slower = fake_result(spec_times=(2.0, 2.2, 1.8))
    assert slower.verdict is None and verdict_of(slower) is Verdict.NOT_WORTH
    # a judged result keeps its verdict though its interval alone says otherwise
    assert verdict_of(replace(fake_result(), verdict=Verdict.INCONCLUSIVE)) is Verdict.INCONCLUSIVE


def test_a_report_with_a_verdict_this_version_does_not_write_is_refused() -> None:
    data = {"format_version": 1, "environment": {}, "results": [entry(fake_result(), None)]}
    assert Report.from_dict(data, "report r.json").results[0].result.verdict is None
    data["results"][0]["verdict"] = "maybe"
    with pytest.raises(ConfigError, match="r.json: invalid at results/0/verdict: 'maybe' is not"):
        Report.from_dict(data, "report r.json")
