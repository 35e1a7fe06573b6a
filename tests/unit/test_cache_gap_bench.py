"""``benchmarks/cache_gap.py``'s simulation path (tiny repetitions): the simulated hit rates
reach the result, and the rule's note and ``clearly_below`` judge it."""

from __future__ import annotations

import pytest

from ..helpers import benchmark_script

bench = benchmark_script("cache_gap")


def test_a_noiseless_drop_beyond_the_margin_is_flagged() -> None:
    flagged, result = bench.run_once(bench.Cell("sd 0", -0.2, 3), seed=1, rep=0)
    assert flagged
    assert result.prefix_cache_gap == pytest.approx(-0.2, abs=1e-3)
    assert result.baseline.prefix_cache_hit_rate == pytest.approx(bench.BASELINE_RATE, abs=1e-3)


@pytest.mark.parametrize("gap", [0.0, -0.04])
def test_a_noiseless_gap_above_the_margin_is_not(gap: float) -> None:
    flagged, result = bench.run_once(bench.Cell("sd 0", gap, 3), seed=1, rep=0)
    assert not flagged
    assert result.prefix_cache_gap == pytest.approx(gap, abs=1e-3)


def test_block_rounds_find_whole_prompts() -> None:
    _, result = bench.run_once(bench.Cell("block", 0.0, 3), seed=1, rep=0)
    whole = (bench.PROMPT_TOKENS - 1) // bench.BLOCK * bench.BLOCK
    for side in (result.baseline, result.speculative):
        assert side.prefix_cache_queries == 3 * bench.PROMPTS * bench.PROMPT_TOKENS
        assert side.prefix_cache_hits % whole == 0
    assert result.prefix_cache_gap_ci is not None


def test_main_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["--reps", "3", "--models", "sd 0.05", "block", "--gaps", "0", "-0.5",
                "--trials", "3"])  # fmt: skip
    out = capsys.readouterr().out
    assert "command: python benchmarks/cache_gap.py --reps 3 --models 'sd 0.05' block" in out
    assert "gap -0.50" in out and "block    3" in out
