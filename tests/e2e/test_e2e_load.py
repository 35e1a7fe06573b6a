"""A user's script measuring speculation under traffic with ``Bench.load`` on real engines
(issue 23's done-when): two rates, every request completed on both engines, ordered
percentiles, goodput, a TPOT gain at the low rate, a JSON form, and nothing left running."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ..e2e_support import ENGINE_KWARGS, build_pair, needs_vllm, surviving_processes, tagged_env

pytestmark = [needs_vllm, pytest.mark.slow]

SCRIPT = """
import json, sys
from pytest_specdecode import Bench

target, draft, engine = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
prompts = ["the hot word is", "water and people", "we can see him now", "long time no see"]
with Bench(target, {"method": "draft_model", "model": draft, "num_speculative_tokens": 4},
           engine) as bench:
    # 8 requests at 4/s: each side's round at the low rate takes 2 s, not 8 s at 1/s
    result = bench.load(prompts, max_tokens=32, rates=[4.0, 16.0], requests=8,
                        slo={"ttft_ms": 5000, "tpot_ms": 500})
print(result.summary(), file=sys.stderr)
print(json.dumps(result.to_dict()))
"""


def test_a_load_script_on_local_engines(tmp_path: Path) -> None:
    pair = build_pair()
    (tmp_path / "load.py").write_text(SCRIPT)
    tag = f"specdecode-load-{uuid.uuid4().hex}"
    out = subprocess.run(
        [sys.executable, "load.py", pair["target"], pair["draft"], json.dumps(ENGINE_KWARGS)],
        cwd=tmp_path, env=tagged_env(tag), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.strip().splitlines()[-1])
    points = data["points"]
    assert [p["rate"] for p in points] == [4.0, 16.0]
    for p in points:
        for side in ("baseline", "speculative"):
            figures = p[side]
            assert figures["requests"] == 8, out.stderr
            for name in ("ttft", "tpot", "itl", "e2e"):
                pct = figures[name]
                assert pct["50"] <= pct["90"] <= pct["99"], (name, pct)
            assert figures["goodput"] is not None and figures["goodput"] > 0
        assert p["acceptance_rate"] > 0.9
    low = points[0]
    assert low["tpot_speedup_ci"][0] <= low["tpot_speedup"] <= low["tpot_speedup_ci"][1]
    assert "load 2/2: 16 req/s, 8 requests" in out.stderr
    last = max(i for i, line in enumerate(out.stderr.splitlines()) if "[specdecode]" in line)
    tail = out.stderr.splitlines()[last + 1 :]
    assert not [line for line in tail if "Warning" in line or "leaked" in line], out.stderr
    assert surviving_processes(tag) == []
