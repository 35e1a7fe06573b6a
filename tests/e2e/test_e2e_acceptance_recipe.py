"""vLLM's acceptance-length test as a recipe (issue 29): ``examples/test_acceptance_length.py``
runs as shipped on real vLLM for CPU. Its tiny-model row (the committed target and its EAGLE-3
head, the 80 MT-Bench questions shipped in the package) passes against its recorded figures
and vLLM's GPU rows skip; copies with the tiny figure moved out of the 5% band fail, below it
through ``assert_acceptance_length``, above it through the recipe's upper check. One session:
the three copies share the engines."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ..e2e_support import needs_vllm

pytestmark = [needs_vllm, pytest.mark.slow]

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "test_acceptance_length.py"
TINY_FIGURE = re.compile(r'(str\(WEIGHTS_DIR / "eagle3_head"\),\n\s+)([\d.]+),')


def test_tiny_figure_is_where_the_copies_expect_it() -> None:
    """The copies below edit the tiny row's expected figure; it must be found exactly once."""
    assert len(TINY_FIGURE.findall(RECIPE.read_text())) == 1


def _with_figure(text: str, factor: float) -> str:
    return TINY_FIGURE.sub(lambda m: f"{m.group(1)}{float(m.group(2)) * factor:.4f},", text)


@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("recipe")
    text = RECIPE.read_text()
    (folder / "test_recipe.py").write_text(text)
    (folder / "test_recipe_low.py").write_text(_with_figure(text, 1.2))  # run falls below
    (folder / "test_recipe_high.py").write_text(_with_figure(text, 0.8))  # run rises above
    (folder / "pytest.ini").write_text("[pytest]\n")
    report = folder / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfs", "-s",
         "--specdecode-trials", "2", "--specdecode-cost-ratio", "off",
         "--specdecode-report", str(report)],
        cwd=folder, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    data = json.loads(report.read_text()) if report.exists() else {}
    return proc.returncode, proc.stdout + proc.stderr, data


def test_tiny_row_passes_and_gpu_rows_skip(recipe_run: Any) -> None:
    code, output, data = recipe_run
    assert code == 1, output
    assert "2 failed, 1 passed, 12 skipped" in output, output
    assert "needs 1 GPU(s), NVML sees 0" in output
    tiny = [
        r
        for r in data["results"]
        if r["nodeid"] == "test_recipe.py::test_acceptance_length[tiny-cpu]"
    ]
    assert len(tiny) == 1
    result = tiny[0]
    assert (result["num_prompts"], result["max_tokens"], result["num_speculative_tokens"]) == (
        80,
        32,
        3,
    )
    assert result["temperature"] == 0.0 and len(result["acceptance_per_position"]) == 3


def test_figures_outside_the_band_fail(recipe_run: Any) -> None:
    _, output, _ = recipe_run
    assert "FAILED test_recipe_low.py::test_acceptance_length[tiny-cpu]" in output
    assert re.search(r"mean acceptance length [\d.]+ is below the minimum", output), output
    assert "FAILED test_recipe_high.py::test_acceptance_length[tiny-cpu]" in output
    assert "more than 5% above the expected" in output
