"""vLLM's k-tuner rule as ``benchmarks/tuner_rule.py`` implements it, on synthetic runs: median
and MAD, the 1.4826 * MAD penalty, the relative-MAD refusal, the 1% tolerance with the smallest
k (k = 0 included) winning ties, ranges started at each measured batch size; and the comparison
with this project's schedule on a synthetic recorded sweep."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ..helpers import benchmark_script

bench = benchmark_script("tuner_rule")


def flat(value: float, n: int = 3) -> list[float]:
    return [value] * n


def test_median_and_mad() -> None:
    assert bench.median_and_mad([1.0, 2.0, 10.0]) == (2.0, 1.0, 0.5)
    assert bench.median_and_mad([0.0, 0.0, 0.0]) == (0.0, 0.0, 0.0)
    assert bench.median_and_mad([-1.0, 0.0, 1.0])[2] == math.inf


def test_the_fastest_k_wins_where_nothing_ties() -> None:
    runs = {(1, 0): flat(100), (1, 2): flat(150), (1, 4): flat(200)}
    decision = bench.vllm_rule(runs)
    assert decision.selected == {1: 4}
    assert decision.entries == ((1, 1, 4),)
    assert decision.refused == ()


def test_the_smallest_k_within_one_percent_wins() -> None:
    runs = {(1, 0): flat(100), (1, 2): flat(199), (1, 4): flat(200)}
    assert bench.vllm_rule(runs).selected == {1: 2}  # 199 >= 0.99 * 200
    runs[(1, 2)] = flat(197)  # 1.5% below: k=4 keeps it
    assert bench.vllm_rule(runs).selected == {1: 4}
    loose = bench.TunerSettings(tolerance=0.05)
    assert bench.vllm_rule(runs, loose).selected == {1: 2}


def test_off_wins_where_the_target_alone_ties_the_best_k() -> None:
    runs = {(1, 0): flat(100), (1, 2): flat(100.5)}
    assert bench.vllm_rule(runs).selected == {1: 0}


def test_the_penalty_is_1_4826_mad() -> None:
    # k=4: median 200, MAD 20 -> 200 - 29.652 = 170.348; k=2: a steady 180 beats it
    runs = {(1, 0): flat(100), (1, 2): flat(180), (1, 4): [180.0, 200.0, 220.0]}
    decision = bench.vllm_rule(runs, bench.TunerSettings(max_relative_mad=1.0))
    assert decision.candidate(1, 4).conservative == pytest.approx(200 - 1.4826 * 20)
    assert decision.selected == {1: 2}
    without = bench.vllm_rule(runs, bench.TunerSettings(penalty=0.0, max_relative_mad=1.0))
    assert without.selected == {1: 4}


def test_an_unstable_candidate_is_a_refusal_that_still_reports_the_pick() -> None:
    runs = {(1, 0): flat(100), (1, 4): [100.0, 200.0, 300.0]}  # relative MAD 0.5
    decision = bench.vllm_rule(runs)
    assert len(decision.refused) == 1 and "k=4" in decision.refused[0]
    assert "0.500 > 0.100" in decision.refused[0]
    assert decision.selected == {1: 0}  # 200 - 148 = 52 < 100


def test_inputs_the_tuner_rejects() -> None:
    with pytest.raises(bench.TunerError, match="at least 3"):
        bench.vllm_rule({(1, 0): [1.0, 2.0]})
    with pytest.raises(bench.TunerError, match="must be 1"):
        bench.vllm_rule({(2, 0): flat(1)})
    with pytest.raises(bench.TunerError, match="other K candidates"):
        bench.vllm_rule({(1, 0): flat(1), (1, 2): flat(2), (4, 0): flat(1)})
    with pytest.raises(bench.TunerError, match="no measurements"):
        bench.vllm_rule({})
    with pytest.raises(bench.TunerError, match="tolerance"):
        bench.vllm_rule({(1, 0): flat(1)}, bench.TunerSettings(tolerance=1.0))
    with pytest.raises(bench.TunerError, match="min_runs"):
        bench.vllm_rule({(1, 0): flat(1)}, bench.TunerSettings(penalty=-1.0))


def test_ranges_start_at_each_measured_batch_size() -> None:
    assert bench.starts_ranges({1: 4, 4: 4, 16: 2}) == ((1, 15, 4), (16, 16, 2))
    assert bench.starts_ranges({1: 4, 4: 2, 16: 0}) == ((1, 3, 4), (4, 15, 2), (16, 16, 0))
    assert bench.k_in(((1, 3, 4), (4, 15, 2)), 99) == 2


def recorded(spec_seconds: dict[tuple[int, int], float]) -> dict[str, Any]:
    """A recorded sweep (the benchmark's JSON) whose baseline rounds take 1 s at every
    concurrency and whose speculative rounds at (k, c) take ``spec_seconds[k, c]``, with five
    identical rounds (so the speedup's interval is the point)."""
    points, rounds = [], []
    for (k, c), seconds in sorted(spec_seconds.items()):
        speedup = 1.0 / seconds
        points.append({
            "num_speculative_tokens": k, "concurrency": c, "speedup": speedup,
            "speedup_ci": [speedup, speedup], "acceptance_rate": 0.8, "phases": None,
        })  # fmt: skip
        rounds.append({
            "num_speculative_tokens": k, "concurrency": c, "baseline_seconds": flat(1.0, 5),
            "speculative_seconds": flat(seconds, 5), "baseline_tokens": 100,
            "speculative_tokens": 100,
        })  # fmt: skip
    config = {"method": "draft_model", "model": "tiny:draft", "num_speculative_tokens": 4}
    sweep = {"nodeid": "x", "points": points, "schedule": {"base_config": config}}
    setup = {
        "target": "t", "draft": "d", "prompts": "4 prompts", "max_tokens": 32, "trials": 5,
        "num_speculative_tokens": [2, 4], "concurrency": [1, 4, 16],
    }  # fmt: skip
    return {
        "command": "python benchmarks/tuner_rule.py measure", "date": "2026-12-07",
        "machine": "a test", "wall_seconds": 61.0, "setup": setup, "sweep": sweep,
        "rounds": rounds,
    }  # fmt: skip


def test_the_two_rules_on_one_sweep() -> None:
    data = recorded({
        (2, 1): 1 / 1.97, (4, 1): 1 / 2.0,   # 1.5% apart: project k=2, vLLM k=4
        (2, 4): 1 / 1.5, (4, 4): 1 / 1.5,    # a tie: both k=2
        (2, 16): 1 / 1.005, (4, 16): 1 / 1.008,  # within 1% of the target alone: vLLM off
    })  # fmt: skip
    runs = bench.throughput_runs(data)
    assert runs[(1, 0)] == flat(100.0, 10)  # the baseline's rounds beside each k, pooled
    rows = {row.concurrency: row for row in bench.compare(data)}
    assert (rows[1].project_k, rows[1].vllm_k) == (2, 4)
    assert (rows[4].project_k, rows[4].vllm_k) == (2, 2)
    assert (rows[16].project_k, rows[16].vllm_k) == (2, 0)
    assert [row.agreement for row in rows.values()] == ["differ", "same k, other range", "differ"]
    assert rows[1].project_reason.startswith("k=2: 1.97x is within 5% of the fastest, k=4")
    assert rows[1].vllm_reason == "k=4: the best conservative throughput (200 tok/s)"
    assert rows[16].vllm_reason.startswith("off (k=0, the target alone): 100 tok/s conservative")
    assert rows[1].difference.startswith("both rank k=4 fastest; the 5% tolerance here admits k=2")
    assert rows[4].difference == (
        "same k=2, other range: here batch 4 ends a range, in vLLM's tuner it starts one"
    )
    assert rows[16].difference.startswith("vLLM's rule counts the target alone as a candidate")
    # the project ends a range at each measured concurrency, vLLM starts one there
    assert rows[4].project_range == (1, 16, 2) and rows[4].vllm_range == (4, 15, 2)


def test_the_rules_rank_the_ks_differently() -> None:
    """Paired speedups by their geometric mean, throughput by median less 1.4826 MAD: one
    slow speculative round of k=4 drags its geometric mean below k=2's, not its median."""
    data = recorded({(2, 1): 1 / 1.8, (4, 1): 1 / 2.0})
    rounds = next(r for r in data["rounds"] if r["num_speculative_tokens"] == 4)
    rounds["speculative_seconds"] = [0.5, 0.5, 0.5, 0.5, 2.0]
    data["sweep"]["points"][1]["speedup"] = 1.52  # the geometric mean of 2, 2, 2, 2, 0.5
    (row,) = bench.compare(data)
    assert (row.project_k, row.vllm_k) == (2, 4)
    assert row.difference.startswith("they rank the ks differently: by the paired speedup k=2")


def test_the_docs_table() -> None:
    data = recorded({
        (2, 1): 1 / 1.97, (4, 1): 1 / 2.0, (2, 4): 1 / 1.5, (4, 4): 1 / 1.5,
        (2, 16): 1 / 1.005, (4, 16): 1 / 1.008,
    })  # fmt: skip
    text = bench.render_markdown(data)
    assert "`python benchmarks/tuner_rule.py measure` on 2026-12-07, a test (1 min 1 s)" in text
    assert bench.VLLM_COMMIT[:10] in text
    assert "| 1 | 2 | 1-16 | k=2: 1.97x is within 5%" in text
    assert "| where they agree, why they differ |" in text
    assert "| 4 | off | 1 (the baseline) | 10 | 100 | 0.0 | 0.000 | 100 |" in text
    assert "This project emits `2` (one k everywhere" in text
    assert "vLLM's rule writes `[[1, 3, 4], [4, 15, 2], [16, 16, 0]]`" in text
    assert "would accept this sweep" in text
