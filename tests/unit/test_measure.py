import pytest

from pytest_specdecode.engines.protocol import Counters
from pytest_specdecode.errors import ConfigError, NoSpeculationError
from pytest_specdecode.measure.figures import compare_outputs
from pytest_specdecode.measure.inputs import validate_prompts

from ..helpers import fake_result


def test_counter_delta_and_derived_figures() -> None:
    before = {
        "num_drafts": 5,
        "num_draft_tokens": 20,
        "num_accepted_tokens": 10,
        "accepted_per_position": [4, 3, 2, 1],
    }
    after = {
        "num_drafts": 15,
        "num_draft_tokens": 60,
        "num_accepted_tokens": 40,
        "accepted_per_position": [14, 11, 9, 6],
    }
    delta = Counters.of(after).since(Counters.of(before))
    assert (delta.num_drafts, delta.num_draft_tokens, delta.num_accepted_tokens) == (10, 40, 30)
    assert delta.accepted_per_position == (10, 8, 7, 5)
    assert delta.acceptance_rate == pytest.approx(0.75)
    assert delta.mean_acceptance_length == pytest.approx(4.0)
    assert delta.acceptance_per_position == pytest.approx([1.0, 0.8, 0.7, 0.5])


def test_counter_delta_when_vector_appears_later() -> None:
    before = {
        "num_drafts": 0,
        "num_draft_tokens": 0,
        "num_accepted_tokens": 0,
        "accepted_per_position": [],
    }
    after = {
        "num_drafts": 2,
        "num_draft_tokens": 4,
        "num_accepted_tokens": 3,
        "accepted_per_position": [2, 1],
    }
    assert Counters.of(after).since(Counters.of(before)).accepted_per_position == (2, 1)


def test_compare_outputs_reports_first_divergence() -> None:
    rate, div = compare_outputs([[1, 2, 3], [1, 2, 3], [1, 2]], [[1, 2, 3], [1, 9, 3], [1, 2, 5]])
    assert rate == pytest.approx(1 / 3)
    assert [(d.prompt_index, d.token_index) for d in div] == [(1, 1), (2, 2)]
    assert (div[0].baseline_token, div[0].speculative_token) == (2, 9)
    assert (div[1].baseline_token, div[1].speculative_token) == (None, 5)


def test_build_result_figures() -> None:
    result = fake_result()
    assert result.speedup == pytest.approx(2.0)
    assert result.speedup_ci == (pytest.approx(2.0), pytest.approx(2.0))
    assert result.acceptance_rate == pytest.approx(0.75)
    assert result.mean_acceptance_length == pytest.approx(4.0)
    assert result.match_rate == 1.0
    assert result.baseline.tokens_per_second == pytest.approx(18 / 3.0)
    assert result.speculative.tokens_per_second == pytest.approx(18 / 1.5)
    assert result.baseline.token_ids == [[1, 2, 3], [4, 5, 6]]
    data = result.to_dict()
    for key in (
        "nodeid",
        "category",
        "method",
        "num_speculative_tokens",
        "speedup",
        "speedup_ci",
        "acceptance_rate",
        "mean_acceptance_length",
        "acceptance_per_position",
        "match_rate",
        "baseline",
        "speculative",
    ):
        assert key in data


def test_zero_drafts_says_speculation_never_ran() -> None:
    with pytest.raises(NoSpeculationError, match="speculation never ran"):
        fake_result(counters=Counters(0, 0, 0, ()))


@pytest.mark.parametrize(
    ("prompts", "match"),
    [([], "empty"), ("abc", "single string"), (["ok", ""], "prompt 1"), ([3], "prompt 0")],
)
def test_validate_prompts(prompts: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        validate_prompts(prompts)


def test_adaptive_stop_rule() -> None:
    from pytest_specdecode.measure.paired import adaptive_stop

    decisive = adaptive_stop([1.5], precision=0.03, max_rounds=20)
    assert decisive([2.0, 2.02, 1.98])  # interval far above 1.5
    assert not decisive([1.2, 1.9, 1.5])  # interval contains 1.5
    precise = adaptive_stop([], precision=0.03, max_rounds=20)
    assert precise([2.0, 2.005, 1.995]) and not precise([1.5, 2.5, 2.0])
