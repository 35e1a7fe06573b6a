"""Ctrl-C in the middle of a run leaves no engine process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .e2e_support import (
    ENGINE_KWARGS,
    build_pair,
    needs_vllm,
    processes_with_tag,
    surviving_processes,
)

pytestmark = [needs_vllm, pytest.mark.slow]

SUITE = """
import pytest

@pytest.mark.specdecode("structured", speculative_config={{
    "method": "draft_model", "model": {draft!r}, "num_speculative_tokens": 4}})
def test_long(specdecode):
    specdecode.run(["the hot word is"] * 4, max_tokens=256, trials=50)
"""


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_kills_every_engine_process(tmp_path: Path) -> None:
    pair = build_pair(tmp_path / "pair")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_suite.py").write_text(SUITE.format(draft=pair["draft"]))
    tag = f"specdecode-int-{uuid.uuid4().hex}"
    env = {**os.environ, "SPECDECODE_E2E_TAG": tag}
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s",
            "test_suite.py", "--specdecode-target", pair["target"],
            "--specdecode-engine-kwargs", json.dumps(ENGINE_KWARGS),
        ],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        # A shell without job control starts background jobs with SIGINT ignored, and Python
        # then installs no KeyboardInterrupt handler: give the run a terminal's Ctrl-C.
        preexec_fn=_default_sigint,
    )  # fmt: skip
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        lines.append(line)
        if "round 1/" in line or time.monotonic() > deadline:
            break
    assert any("round 1/" in line for line in lines), "".join(lines)
    assert len(processes_with_tag(tag)) >= 3  # pytest, two workers and their engine cores
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    assert "KeyboardInterrupt" in rest, "".join(lines) + rest
    assert surviving_processes(tag) == []
