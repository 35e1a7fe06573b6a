"""The example suites stay loadable: prompt files validate, tests collect, gates parse.

Running them (real engines, minutes) is the main job, done with ``tox -e examples``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_specdecode.prompts import load_prompts

SUITES = Path(__file__).resolve().parents[2] / "example_suites"


@pytest.mark.parametrize("name", ["structured", "creative", "summarization", "long_context"])
def test_prompt_files_validate(name: str) -> None:
    prompts = load_prompts(SUITES / "prompts" / f"{name}.jsonl")
    assert len(prompts) >= 4
    if name in ("structured", "long_context"):
        assert all(p.output_schema for p in prompts)


def test_suites_collect_with_a_user_target() -> None:
    """With --specdecode-target the suites use the user's models (no tiny models needed)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         str(SUITES), "--specdecode-target", "org/target", "--specdecode-speculative-config",
         '{"method": "ngram", "num_speculative_tokens": 3}'],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "test_json_extraction" in out.stdout and "test_summary_ngram" in out.stdout


@pytest.mark.parametrize(
    ("gate", "message"),
    [
        ("structured=2", "expected CATEGORY.NAME=VALUE"),
        ("structured.min_speedup=fast", "expected CATEGORY.NAME=VALUE"),
        ("structed.min_speedup=2", "unknown category 'structed'; known: concurrency, creative"),
        ("structured.min_sped=2", "structured has no gate 'min_sped'; its gates: "),
    ],
)
def test_bad_gate_override_is_a_usage_error(gate: str, message: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(SUITES),
         "--specdecode-target", "org/target", "--specdecode-speculative-config",
         '{"method": "ngram", "num_speculative_tokens": 3}', "--gate", gate,
         "-k", "test_json_extraction"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == pytest.ExitCode.USAGE_ERROR, out.stdout + out.stderr
    assert message in out.stderr
