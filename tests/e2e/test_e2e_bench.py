"""``Bench`` on real vLLM, without pytest: the README script, as a user runs it.

The script in the docs must be ``examples/bench_tiny.py`` word for word
(tests/unit/test_example_scripts.py); run on the built-in tiny models it prints a complete
result, and leaving its ``with`` block leaves no engine process.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ..e2e_support import needs_vllm, surviving_processes, tagged_env

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "bench_tiny.py"


@needs_vllm
@pytest.mark.slow
def test_script_prints_a_complete_result_and_leaves_no_engine() -> None:
    tag = f"specdecode-bench-{uuid.uuid4().hex}"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=900,
        env=tagged_env(tag), cwd=REPO,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert re.search(r"speedup \d+\.\d\dx \(95% CI \d+\.\d\d-\d+\.\d\dx\) over 5 rounds", out), out
    assert re.search(r"alpha 0\.\d\d, cost ratio 0\.\d{3}, predicted \d+\.\d\dx", out), out
    assert re.search(r"verdict: (worth it|not worth it|inconclusive) \(", out), out
    assert "[specdecode]" in out  # progress on stderr while engines start and rounds run
    assert surviving_processes(tag) == []
