"""The phase summary (issue 28): each engine's step time by phase, the break-even acceptance
length L* and its interval, the cost ratio from inside the speculative engine, the sentence
naming what dominates; and synthetic acceptance, refused on CPU before any engine starts and
lossy where it runs. Hand-built rounds and the simulated backend: no vLLM."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest

from pytest_specdecode import Bench, ConfigError, assert_outputs_equivalent
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.hardware import Device
from pytest_specdecode.engines.protocol import (
    Counters,
    PhaseTimes,
    RequestFigures,
    Round,
    Sampling,
    StepProfile,
)
from pytest_specdecode.measure.assertions import check_gates
from pytest_specdecode.measure.figures import build_result, with_theory, with_verdict
from pytest_specdecode.measure.paired import PairedRounds
from pytest_specdecode.measure.phases import PhaseSummary, cost_ratio, summarize
from pytest_specdecode.measure.result import Result

from ..fakes import FakeSource, use_fake
from ..helpers import fake_find_spec
from ..phase_reports import entry, typed

pytestmark = pytest.mark.filterwarnings(
    "ignore::pytest_specdecode.errors.UncheckedCompatibilityWarning"
)

DRAFT = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}
NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
SYNTHETIC = {**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.0}
SCALES = (1.0, 1.1, 0.9)  # the baseline rounds' decode time, relative
T975_2 = 4.302652729911275  # Student's t, 97.5%, 2 degrees of freedom (scipy)


def base_round(f: float) -> Round:
    """12 decode steps of 5 ms (times f): prepare 0.2, forward 4.0, sample 0.3, other 0.5."""
    decode = PhaseTimes(12, 0.060 * f, 0.0024 * f, 0.048 * f, 0.0036 * f)
    return Round(
        1.0 * f, _requests(), profile=StepProfile(PhaseTimes(1, 0.01, 0.001, 0.008), decode)
    )


def spec_round(draft: float = 0.012, steps: int = 4) -> Round:
    """``steps`` decode steps of 10 ms: prepare 0.25, sample 0.5, draft 3.0 (``draft`` s per 4
    steps, by default), other 0.25 and the verification pass the rest."""
    forward = 0.040 - 0.001 - 0.002 - draft - 0.001
    n = steps / 4
    decode = PhaseTimes(steps, 0.040 * n, 0.001 * n, forward * n, 0.002 * n, draft * n)
    return Round(0.5, _requests(), profile=StepProfile(PhaseTimes(1, 0.012, 0.001, 0.01), decode))


def _requests() -> tuple[RequestFigures, ...]:
    return (RequestFigures((1, 2, 3), "x", 0.01, 0.002),) * 2


def round_counters(accepted: tuple[int, ...] = (8, 10, 6)) -> tuple[Counters, ...]:
    """Per round 4 drafts of 4 tokens, ``accepted`` of them accepted."""
    return tuple(Counters(4, 16, a) for a in accepted)


def paired(
    accepted: tuple[int, ...] = (8, 10, 6), draft: float = 0.012, spec_time: float = 0.5,
    steps: int | None = None,
) -> PairedRounds:  # fmt: skip
    """Three paired rounds; by default the speculative engine takes the 12 baseline tokens in
    as many decode steps as the mean acceptance length allows (4 at 3.0); ``steps`` more where
    some steps drafted nothing (guided decoding)."""
    per_round = round_counters(accepted)
    if steps is None:
        steps = round(12 / (1 + sum(accepted) / len(accepted) / 4))
    return PairedRounds(
        baseline=tuple(base_round(f) for f in SCALES),
        speculative=tuple(replace(spec_round(draft, steps), elapsed=spec_time) for _ in SCALES),
        counters=sum(per_round, Counters()),
        round_counters=per_round,
        mode="interleaved",
        memory="test",
    )


def result_of(raw: PairedRounds, spec: dict[str, Any] = DRAFT) -> Result:
    return build_result(
        raw, nodeid="t.py::test_a", category="structured",
        speculative=EngineConfig.create("org/target", spec, {}), num_prompts=2,
        sampling=Sampling(max_tokens=3, temperature=0.0), concurrency=None,
    )  # fmt: skip


# -- the arithmetic, on hand-built rounds ------------------------------------------------


def test_phase_summary_of_hand_built_rounds() -> None:
    raw = paired()
    phases = summarize(raw.baseline, raw.speculative, raw.counters, raw.round_counters, 2)
    assert phases is not None and phases.clock == "wall"
    base, spec = phases.baseline.decode, phases.speculative.decode
    assert base.steps == 12 and spec.steps == 4 and phases.step_yield == pytest.approx(3.0)
    # pooled over rounds: seconds / steps * 1000
    assert (base.prepare_ms, base.forward_ms, base.sample_ms, base.draft_ms) == pytest.approx(
        (0.2, 4.0, 0.3, 0.0)
    )
    assert base.other_ms == pytest.approx(0.5) and base.step_ms == pytest.approx(5.0)
    assert spec.draft_ms == pytest.approx(3.0) and spec.forward_ms == pytest.approx(6.0)
    assert spec.step_ms == pytest.approx(10.0)
    assert phases.baseline.prefill.steps == 1 and phases.baseline.prefill.step_ms == pytest.approx(
        10
    )
    # L* = 10 / 5; its interval from the per-round ratios 2 / f, t on logs around log L*
    assert phases.break_even_length == pytest.approx(2.0)
    logs = [math.log(2 / f) for f in SCALES]
    m = sum(logs) / 3
    half = T975_2 * math.sqrt(sum((v - m) ** 2 for v in logs) / 2 / 3)
    assert phases.break_even_ci == pytest.approx((2 * math.exp(-half), 2 * math.exp(half)))
    # acceptance: pooled 1 + 24 / 12, per round 3.0, 3.5, 2.5
    assert phases.acceptance_length == pytest.approx(3.0)
    half = T975_2 * 0.5 / math.sqrt(3)
    assert phases.acceptance_length_ci == pytest.approx((3 - half, 3 + half))
    assert phases.draft_share == pytest.approx(0.3) and phases.verify_cost == pytest.approx(1.5)
    # 3.00 [1.76-4.24] against 2.00 [1.56-2.57]: the intervals overlap, so no claim either way
    assert phases.pays is None
    assert phases.explanation == (
        "the baseline took 3.00 [1.76-4.24] decode steps per speculative one against the "
        "break-even 2.00 [1.56-2.57]: the intervals overlap, so the decode steps alone do not "
        "tell whether speculation pays; the largest cost: draft proposal is 30% of each "
        "speculative step"
    )
    # the same yield from rounds that agree: its interval clears the break-even's
    steady = summary(paired(accepted=(8, 8, 8)), 2)
    assert steady is not None and steady.pays is True
    assert steady.explanation == (
        "the baseline took 3.00 decode steps per speculative one, above the break-even 2.00, "
        "so speculation pays; the largest cost: draft proposal is 30% of each speculative step"
    )
    # c = (3 ms of draft per step / 4 tokens per draft) / 5 ms per baseline step
    assert cost_ratio(phases, 12, 48) == pytest.approx(0.15)


def test_the_break_even_is_compared_with_the_step_yield_not_the_acceptance_length() -> None:
    """Guided decoding (the recorded json_schema run): the acceptance length counts only the
    steps that drafted, so it clears the break-even while the steps do not pay: 12 tokens in 8
    speculative steps of twice a baseline step's time is 1.5 tokens a step against 2.0."""
    guided = summary(paired(accepted=(8, 8, 8), steps=8), 2)
    assert guided is not None
    assert guided.acceptance_length == pytest.approx(3.0)
    assert guided.break_even_length == pytest.approx(2.0)
    assert guided.step_yield == pytest.approx(1.5) and guided.tokens_per_step == pytest.approx(1.5)
    assert guided.pays is False
    assert guided.explanation == (
        "the baseline took 1.50 decode steps per speculative one (acceptance length 3.00 "
        "counts only the steps with drafts), below the break-even 2.00: draft proposal is 30% "
        "of each speculative step"
    )
    # within 10% of the acceptance length but on the other side of the break-even: both named
    near = summary(paired(accepted=(4, 4, 4), steps=7), 2)  # length 2.0 + 0; yield 12 / 7
    assert near is not None and "took 1.71 decode steps per speculative one" in near.explanation
    assert near.pays is None and "the intervals overlap" in near.explanation  # L* 1.56-2.57


def test_a_report_recorded_before_the_step_yield_derives_it_from_the_step_counts() -> None:
    from pytest_specdecode.reporting.checklist import checklists
    from pytest_specdecode.reporting.phases import explanation, pays, phase_line, step_yield

    guided = summary(paired(accepted=(8, 8, 8), steps=8), 2)
    assert guided is not None
    old = guided.to_dict()
    assert "step_yield" not in old  # derived, not stored: the schema is unchanged
    old["acceptance_length_ci"] = [2.9, 3.1]  # apart from the break-even's: a clear answer
    # what a run recorded before the fix said
    old["explanation"] = (
        "each verification step yields 3.00 tokens, above the break-even 2.00, so speculation "
        "pays; the largest cost: draft proposal is 30% of each speculative step"
    )
    again = PhaseSummary.from_dict(json.loads(json.dumps(old)))
    assert again.step_yield == pytest.approx(1.5) and again.pays is False
    data = {"nodeid": "t.py::test_json", "label": "json_schema", "num_prompts": 2, "phases": old}
    row = entry(data)
    assert step_yield(again) == pytest.approx(1.5) and pays(again) is False
    assert explanation(row) == guided.explanation  # derived afresh, not the stale sentence
    assert phase_line(row).endswith(
        "break-even 2.00 tokens/step [1.56-2.57], measured: step ratio 1.50 "
        "(acceptance length 3.00 counts only the steps with drafts)"
    )
    (found,) = checklists(typed({"format_version": 1, "results": [data], "environment": {}}))
    (draft,) = [x for x in found.lines if x.question == "choice of draft"]
    said = (
        "step ratio 1.50 (acceptance length 3.00 [2.90-3.10] counts only the steps with "
        "drafts) against break-even 2.00"
    )
    assert draft.answer == "no" and said in draft.figure
    # a report without step counts falls back on the acceptance length
    for side in ("baseline", "speculative"):
        old[side]["decode"]["steps"] = 0
    assert PhaseSummary.from_dict(old).step_yield is None and PhaseSummary.from_dict(old).pays
    assert step_yield(PhaseSummary.from_dict(old)) is None
    assert "measured 3.0" in phase_line(entry(data))


def test_the_explanation_names_what_dominates_a_loss() -> None:
    low = summary(paired(accepted=(2, 2, 2)), 2)
    assert low is not None and not low.pays
    assert low.explanation == (
        "the baseline took 1.50 decode steps per speculative one, below the break-even 2.00: "
        "draft proposal is 30% of each speculative step"
    )
    cheap_draft = summary(paired(accepted=(2, 2, 2), draft=0.001), 32)
    assert cheap_draft is not None
    assert cheap_draft.explanation.endswith(
        "the verification pass at batch 32 costs 2.2 baseline steps"  # 8.75 / 4.0 ms
    )


def summary(raw: PairedRounds, batch: int) -> PhaseSummary | None:
    return summarize(raw.baseline, raw.speculative, raw.counters, raw.round_counters, batch)


def test_the_dict_form_is_the_contract_and_round_trips() -> None:
    result = with_verdict(with_theory(result_of(paired()), 0.15), None)
    data = json.loads(json.dumps(result.to_dict()))["phases"]
    assert set(data) == {
        "clock", "baseline", "speculative", "break_even_length", "break_even_ci",
        "acceptance_length", "acceptance_length_ci", "draft_share", "verify_cost", "explanation",
    }  # fmt: skip
    assert set(data["speculative"]) == {"decode", "prefill", "round_ms"}
    assert set(data["speculative"]["decode"]) == {
        "steps", "step_ms", "prepare_ms", "forward_ms", "sample_ms", "draft_ms", "other_ms",
    }  # fmt: skip
    assert data["speculative"]["decode"]["step_ms"] == pytest.approx(10.0)
    assert isinstance(data["break_even_ci"], list) and len(data["break_even_ci"]) == 2
    again = Result.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result and isinstance(again.phases, PhaseSummary)
    old = result.to_dict()
    del old["phases"]  # a report written before phases existed
    assert Result.from_dict(old).phases is None


def test_a_kind_without_steps_has_no_milliseconds() -> None:
    data = summary(paired(), 2)
    assert data is not None
    empty = replace(data.baseline.prefill, steps=0.0, prepare_ms=None, forward_ms=None,
                    sample_ms=None, draft_ms=None, other_ms=None)  # fmt: skip
    assert empty.to_dict() == {
        "steps": 0.0, "step_ms": None, "prepare_ms": None, "forward_ms": None,
        "sample_ms": None, "draft_ms": None, "other_ms": None,
    }  # fmt: skip


def test_rounds_without_a_profile_give_no_phases() -> None:
    raw = paired()
    served_like = replace(
        raw, speculative=(*raw.speculative[:2], replace(raw.speculative[2], profile=None))
    )
    result = result_of(served_like)
    assert result.phases is None and result.to_dict()["phases"] is None
    assert cost_ratio(None, 12, 48) is None


def test_a_slower_result_quotes_the_dominant_term_in_its_verdict() -> None:
    result = with_verdict(
        with_theory(result_of(paired(accepted=(2, 2, 2), spec_time=1.5)), 0.15), None
    )
    assert result.verdict == "not worth it"
    assert (
        "why: the baseline took 1.50 decode steps per speculative one, below the break-even "
        "2.00: draft proposal is 30% of each speculative step"
    ) in result.verdict_reasons
    paying = with_verdict(
        with_theory(result_of(paired(accepted=(8, 8, 8), spec_time=1.5)), 0.15), None
    )
    assert paying.verdict == "not worth it"
    assert (
        "the decode steps pay (3.00 tokens per step, above the break-even 2.00); the loss lies "
        "outside them (prefill 12.0 vs 10.0 ms per round, speculative vs baseline, or time "
        "between steps)"
    ) in paying.verdict_reasons
    faster = with_verdict(with_theory(result_of(paired(accepted=(2, 2, 2))), 0.15), None)
    assert faster.verdict == "worth it"
    assert not any("break-even" in r for r in faster.verdict_reasons)


# -- through Bench, on the simulated backend --------------------------------------------


def test_bench_on_the_fake_gives_phases_and_the_cost_ratio_from_inside() -> None:
    source = FakeSource()
    result = Bench("org/target", DRAFT, source=source, progress=None, trials=4).run(
        ["p1", "p2"], max_tokens=8
    )
    phases = result.phases
    assert phases is not None
    assert phases.baseline.decode.draft_ms == 0 and phases.draft_share and phases.draft_share > 0
    assert phases.break_even_length and phases.break_even_ci
    assert phases.break_even_ci[0] <= phases.break_even_length <= phases.break_even_ci[1]
    assert result.cost_ratio == pytest.approx(source.draft_cost, rel=0.05)
    assert source.starts == 2  # baseline and speculative: no draft model started alone


def test_served_like_rounds_give_no_phases_and_no_cost_ratio() -> None:
    source = FakeSource()
    source.profiles = False
    result = Bench("org/target", DRAFT, source=source, progress=None, trials=3).run(
        ["p"], max_tokens=4
    )
    assert result.phases is None and result.cost_ratio is None and result.efficiency is None
    assert result.verdict == "worth it"


def test_an_engine_whose_runner_lacks_a_point_says_so_everywhere_and_keeps_the_rest() -> None:
    """A future vLLM whose model runner lost a timing point: the result keeps every other
    figure and names what is missing, and why, in the terminal line, the JSON, the HTML
    page and the checklist."""
    import html

    from pytest_specdecode.measure.result import entry as report_entry
    from pytest_specdecode.reporting.checklist import checklists
    from pytest_specdecode.reporting.html import render_html
    from pytest_specdecode.reporting.phases import phase_line

    note = (
        "phase profile unavailable: vLLM 0.34.0 model runner V2 "
        "(vllm.v1.worker.gpu.model_runner.GPUModelRunner) has no sample"
    )
    source = FakeSource()
    source.profiles, source.profile_note = False, note
    result = Bench("org/target", DRAFT, source=source, progress=None, trials=3).run(
        ["p"], max_tokens=4
    )
    assert result.phases is None and result.phases_unavailable == note
    assert result.cost_ratio is None and result.efficiency is None
    assert result.verdict == "worth it" and result.speedup == pytest.approx(2.0, rel=0.1)
    said = f"{note}; so no cost ratio, break-even length or theory efficiency"
    assert phase_line(result) == f"phases: {said}"
    data = json.loads(json.dumps(report_entry(result, None)))
    assert data["phases"] is None and data["phases_unavailable"] == note
    assert Result.from_dict(data).phases_unavailable == note
    report = typed({"results": [data]})
    page = render_html(report)
    assert html.escape(said) in page
    (found,) = checklists(report)
    (draft,) = [x for x in found.lines if x.question == "choice of draft"]
    assert draft.answer == "unknown" and draft.figure == said
    # where there is nothing to say (timed, served, a report from before) the key is absent
    assert (
        "phases_unavailable" not in Result.from_dict({**data, "phases_unavailable": ""}).to_dict()
    )


@pytest.mark.parametrize("method", ["ngram", "ngram_gpu", "suffix"])
def test_proposers_without_a_model_cost_nothing(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_find_spec(monkeypatch, arctic_inference=True)  # suffix's package, absent in CI
    spec = {"method": method, "num_speculative_tokens": 4}
    result = Bench("org/target", spec, source=FakeSource(), progress=None, trials=3).run(
        ["p"], max_tokens=4
    )
    assert result.cost_ratio == 0.0 and result.phases is not None


def test_ngram_gpu_gets_the_figures_of_ngram() -> None:
    """One proposer table answers "has a model": ngram_gpu, like ngram, costs nothing and so
    gets a predicted speedup and an efficiency (it once got a cost ratio of None)."""
    figures = {}
    for method in ("ngram", "ngram_gpu"):
        spec = {"method": method, "num_speculative_tokens": 4}
        result = Bench("org/target", spec, source=FakeSource(), progress=None, trials=3).run(
            ["p"], max_tokens=4
        )
        figures[method] = (result.cost_ratio, result.predicted_speedup, result.efficiency)
    assert figures["ngram_gpu"] == figures["ngram"]
    cost, predicted, efficiency = figures["ngram_gpu"]
    assert cost == 0.0 and predicted is not None and efficiency is not None


def test_the_break_even_rises_with_concurrency_in_a_sweep() -> None:
    source = FakeSource()
    source.speedup_fn = lambda k, c: {1: 2.0, 4: 1.4, 16: 0.9}[c]
    sweep = Bench("org/target", DRAFT, source=source, progress=None, trials=3).sweep(
        ["p"] * 16, max_tokens=8, concurrency=[1, 4, 16]
    )
    lengths = [
        r.phases.break_even_length
        for _, _, r in sweep.points
        if r.phases and r.phases.break_even_length is not None
    ]
    assert len(lengths) == 3 and lengths == sorted(lengths), lengths
    last = sweep.points[-1][2]
    assert last.phases is not None and last.phases.acceptance_length > 1
    points = sweep.to_dict()["points"]  # the report's sweep points carry them too
    assert [p["phases"]["break_even_length"] for p in points] == lengths


# -- synthetic acceptance ---------------------------------------------------------------


def test_synthetic_acceptance_is_refused_on_cpu_before_any_engine_starts() -> None:
    source = FakeSource()  # a CPU device
    bench = Bench("org/target", SYNTHETIC, source=source, progress=None)
    with pytest.raises(ConfigError) as info:
        bench.run(["p"], max_tokens=4)
    message = str(info.value)
    assert "Synthetic acceptance not supported with CPU sampling" in message  # vLLM's words
    assert "run it on a GPU, or remove rejection_sample_method" in message
    assert "bench: run(): speculative_config" in message
    assert source.starts == 0
    for call in (
        lambda: bench.engine("baseline"),
        lambda: bench.sweep(["p"], max_tokens=4),
        lambda: bench.load(["p"], max_tokens=4, rates=[1.0], requests=2),
    ):
        with pytest.raises(ConfigError, match="Synthetic acceptance not supported"):
            call()
    ngram = Bench("org/target", NGRAM, source=source, progress=None)
    with pytest.raises(ConfigError, match=r"choose_draft\(\): speculative_config"):
        ngram.choose_draft(["p"], {"ngram": NGRAM, "forced": SYNTHETIC}, max_tokens=4)
    assert source.starts == 0


def test_synthetic_acceptance_through_the_marker_fails_before_any_engine_starts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = use_fake(pytester, monkeypatch)
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.specdecode("structured", target="org/target",
                                speculative_config={SYNTHETIC!r}, min_match_rate=1.0)
        def test_forced(specdecode):
            specdecode.run(["p"], max_tokens=4)
        """
    )
    result = pytester.runpytest_inprocess(
        "-W", "ignore::pytest_specdecode.errors.UncheckedCompatibilityWarning"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Synthetic acceptance not supported with CPU sampling*"])
    assert source.starts == 0


def test_synthetic_acceptance_where_it_runs_is_lossy_and_skips_the_equivalence_gates() -> None:
    source = FakeSource()
    source.device = Device("gpu", "fake GPU")
    bench = Bench("org/target", SYNTHETIC, source=source, progress=None, trials=3)
    result = bench.run(["p"], max_tokens=4)
    assert "lossy" in result.notes and "do not apply" in result.notes["lossy"]
    assert "synthetic_acceptance_length=3.0" in result.notes["lossy"]
    diverged = replace(result, match_rate=0.0)
    assert check_gates(diverged, {"min_match_rate": 1.0}) == []  # not applied: lossy
    with pytest.raises(ConfigError, match="lossy"):
        assert_outputs_equivalent(diverged)
    with pytest.raises(ConfigError, match="sample_equivalence.*lossy"):
        bench.sample_equivalence(["p"], samples=10, tokens=2)
    lossless = Bench("org/target", DRAFT, source=source, progress=None, trials=3)
    plain = replace(lossless.run(["p"], max_tokens=4), match_rate=0.0)
    assert "lossy" not in plain.notes and check_gates(plain, {"min_match_rate": 1.0})


def test_requests_of_different_lengths_tell_the_per_request_yield_from_the_step_ratio() -> None:
    """Two requests, 4 and 12 tokens: the baseline runs 12 decode steps (16 request-steps,
    the last 8 for the long request alone). Speculation yields 4 tokens a step to the short
    one and 2 to the long one: 6 steps (1 at batch 2, 5 at batch 1), 7 request-steps. The
    step ratio (12 / 6 = 2.00) is what L* is compared with; the tokens a verification step
    yields per request are 16 / 7 = 2.29; the tail steps, with one request left, are cheaper,
    so L* at full batch differs from the pooled one."""

    def decode(steps: int, request_steps: int, step_s: float, full: int, full_s: float) -> Any:
        # every phase in forward, for the arithmetic; `full` steps ran the largest batch
        return PhaseTimes(
            steps, steps * step_s, forward=steps * step_s * 0.9, request_steps=request_steps,
            full_steps=full, full_total=full * full_s,
        )  # fmt: skip

    def rounds(steps: int, request_steps: int, step_s: float, full: int, full_s: float,
               draft: bool) -> tuple[Round, ...]:  # fmt: skip
        times = decode(steps, request_steps, step_s, full, full_s)
        if draft:
            times = replace(times, forward=times.total * 0.6, draft=times.total * 0.3)
        prefill = PhaseTimes(1, 0.01, forward=0.009, request_steps=2, full_steps=1, full_total=0.01)
        profile = StepProfile(prefill, times, runner="V1")
        return tuple(Round(steps * step_s + 0.02, _requests(), profile=profile) for _ in SCALES)

    # baseline: 12 steps, 4 at batch 2 (5 ms), 8 at batch 1 (4 ms): 52 ms
    base = rounds(12, 16, 52 / 12 / 1000, 4, 0.005, draft=False)
    # speculative: 6 steps, 1 at batch 2 (12 ms), 5 at batch 1 (9 ms): 57 ms
    spec = rounds(6, 7, 57 / 6 / 1000, 1, 0.012, draft=True)
    # acceptance length 2.00: here it happens to match the step ratio, so it is not named
    phases = summarize(base, spec, Counters(18, 72, 18), (Counters(6, 24, 6),) * 3, 2)
    assert phases is not None and phases.runner == "V1"
    assert phases.step_yield == pytest.approx(2.0)  # set by the long request
    assert phases.request_yield == pytest.approx(16 / 7)  # what a request gets per step
    assert phases.break_even_length == pytest.approx((57 / 6) / (52 / 12))  # 2.19, pooled
    assert phases.break_even_full == pytest.approx(12 / 5)  # 2.40 at batch 2
    assert (
        phases.speculative.decode.request_steps == 7
        and phases.baseline.round_ms == pytest.approx(72)
    )
    assert phases.baseline.split() == pytest.approx((10.0, 52.0, 10.0))  # prefill, decode, outside
    assert phases.speculative.decode.named_share == pytest.approx(0.9)
    said = phases.explanation
    assert said.startswith(
        "the baseline took 2.00 decode steps per speculative one (each verification step "
        "yields 2.29 tokens per request; the slowest request sets the step ratio), below the "
        "break-even 2.19"
    )
    again = PhaseSummary.from_dict(json.loads(json.dumps(phases.to_dict())))
    assert again == phases and again.request_yield == pytest.approx(16 / 7)
    from pytest_specdecode.reporting.phases import break_even_text, round_split

    text = break_even_text(phases, ".2f")
    assert text.startswith("break-even 2.19 tokens/step [") and "] (2.40 at full batch), " in text
    assert text.endswith(
        "; 2.29 tokens per request-step (the slowest request sets the step count, 2.00)"
    )
    assert round_split(phases) == (
        "a round: baseline 72.0 ms = prefill 10.0 + decode 52.0 + outside the steps 10.0; "
        "speculative 77.0 ms = prefill 10.0 + decode 57.0 + outside the steps 10.0; named "
        "phases 90% of a speculative decode step (the rest is other)"
    )
