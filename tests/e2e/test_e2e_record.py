"""``RunRecord`` on real vLLM, without pytest: ``examples/gate_tiny.py`` as a user runs it in
CI. The saving run writes a schema-valid report, an HTML page and a baseline; the comparing run
against a baseline whose stored speedup is higher (a faster past) exits 1 naming the
regression, and writes its report with the comparison."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pytest_specdecode.baselines import files

from ..e2e_support import needs_vllm, surviving_processes, tagged_env

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "gate_tiny.py"
#: How much faster the doctored past is than the saving run: far beyond what machine load moves
PAST = 10


def _run(tmp_path: Path, *args: str, tag: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=900,
        env=tagged_env(tag), cwd=tmp_path,
    )  # fmt: skip


@needs_vllm
@pytest.mark.slow
def test_a_script_saves_a_baseline_and_exits_1_on_a_regression(tmp_path: Path) -> None:
    tag = f"specdecode-record-{uuid.uuid4().hex}"
    saved = _run(tmp_path, "--save", "baseline.json", tag=tag)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    report = files.load(tmp_path / "run.json", "report")  # schema-checked
    (result,) = report["results"]
    assert result["nodeid"] == "tiny-draft" and result["label"] == "structured"
    assert result["trials"] >= 20 and report["checklist"]
    assert "<svg" in (tmp_path / "run.html").read_text()
    baseline = files.load(tmp_path / "baseline.json", "baseline")
    assert len(baseline["results"][0]["ratios"]) >= 20
    assert "wrote run.json" in saved.stderr

    # a far faster past: the stored rounds 10 times this run's (at 1.5 times, the compared
    # run passed on a busy runner, its rounds far faster than the saving run's: a speedup is
    # a measured figure; the rule's error rates are asserted on simulated engines,
    # tests/unit/test_sequential.py)
    stored = baseline["results"][0]
    stored["ratios"] = [r * PAST for r in stored["ratios"]]
    stored["speedup"] *= PAST
    stored["speedup_ci"] = [v * PAST for v in stored["speedup_ci"]]
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    compared = _run(tmp_path, "--compare", "baseline.json", tag=tag)
    out = compared.stdout + compared.stderr
    assert compared.returncode == 1, out
    assert "regression: tiny-draft[structured]: speedup regressed" in compared.stderr, out
    comparisons = files.load(tmp_path / "run.json", "report")["comparisons"]
    assert [c["decision"] for c in comparisons if c["figure"] == "speedup"] == ["regressed"]
    assert surviving_processes(tag) == []
