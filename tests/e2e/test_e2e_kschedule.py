"""A user's script turning a sweep into vLLM's ``num_speculative_tokens_per_batch_size`` on real
engines (issue 24's done-when): ``sweep.schedule().speculative_config`` starts at batch 1, has
no gaps or overlaps, reaches the largest concurrency, gives k=4 at batch 1 for the random
pair's draft (which accepts nearly everything), is written as a plain ``num_speculative_tokens``
when it is one k everywhere, and a ``Bench`` on it runs, speculates with the
scheduled k and reports the speedup. A schedule of two k (``[[1, 2, 4], [3, 64, 1]]``) drafts
4 tokens per draft at batch 2 and 1 at batch 8: vLLM chooses k by batch size."""

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
config = {"method": "draft_model", "model": draft, "num_speculative_tokens": 4}
with Bench(target, config, engine, trials=3, cost_ratio="off") as bench:
    sweep = bench.sweep(prompts, max_tokens=32, num_speculative_tokens=[1, 4],
                        concurrency=[1, 16])
    schedule = sweep.schedule()
    print(schedule.summary(), file=sys.stderr)
    with Bench(target, schedule.speculative_config, engine, trials=3,
               cost_ratio="off") as scheduled:
        runs = {c: scheduled.run(prompts * (c // len(prompts) or 1), max_tokens=32,
                                 concurrency=c, label=f"c={c}")
                for c in (1, 16) if schedule.k_at(c)}
    ranges = {**config, "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 64, 1]]}
    with Bench(target, ranges, engine, trials=2, cost_ratio="off") as by_hand:
        ranged = {c: by_hand.run(prompts * (c // len(prompts) or 1), max_tokens=32,
                                 concurrency=c, label=f"c={c}") for c in (2, 8)}
for c, result in runs.items():
    print(f"c={c}: {result.speedup:.2f}x, {result.num_draft_tokens / result.num_drafts:.2f} "
          "draft tokens per draft", file=sys.stderr)
print(json.dumps({"schedule": schedule.to_dict(),
                  "runs": {c: r.to_dict(with_outputs=False) for c, r in runs.items()},
                  "ranged": {c: r.num_draft_tokens / r.num_drafts for c, r in ranged.items()}}))
"""


def test_a_sweep_gives_a_schedule_vllm_runs(tmp_path: Path) -> None:
    pair = build_pair()
    (tmp_path / "schedule.py").write_text(SCRIPT)
    tag = f"specdecode-kschedule-{uuid.uuid4().hex}"
    out = subprocess.run(
        [sys.executable, "schedule.py", pair["target"], pair["draft"], json.dumps(ENGINE_KWARGS)],
        cwd=tmp_path, env=tagged_env(tag), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.strip().splitlines()[-1])
    schedule = data["schedule"]
    entries = schedule["entries"]
    assert entries[0][0] == 1 and entries[-1][1] >= 16, entries
    assert all(b[0] == a[1] + 1 for a, b in zip(entries, entries[1:], strict=False)), entries
    assert all(start <= end for start, end, _ in entries), entries
    assert entries[0][2] == 4, schedule["choices"]  # the draft accepts nearly everything
    config = schedule["speculative_config"]
    if len(entries) == 1 and entries[0][2] > 0:  # one k everywhere: vLLM's plain fixed k
        assert "num_speculative_tokens_per_batch_size" not in config, config
    else:
        assert config["num_speculative_tokens_per_batch_size"] == entries
    assert config["num_speculative_tokens"] == max(k for _, _, k in entries)
    runs = data["runs"]
    assert "1" in runs, out.stderr
    for c, result in runs.items():
        k = next(k for start, end, k in entries if start <= int(c) <= end)
        assert result["speculative_config"] == config
        assert result["num_drafts"] > 0 and result["speedup"] > 0
        # vLLM's scheduler drafted the schedule's k at this batch size
        per_draft = result["num_draft_tokens"] / result["num_drafts"]
        assert per_draft == pytest.approx(k, abs=0.25), (c, per_draft, entries)
    low, high = runs["1"]["speedup_ci"]
    assert low <= runs["1"]["speedup"] <= high, out.stderr  # its size is a measured figure
    # a schedule with two k: vLLM drafts 4 tokens at batch 2 and 1 at batch 8
    assert data["ranged"]["2"] == pytest.approx(4, abs=0.25), data["ranged"]
    assert data["ranged"]["8"] == pytest.approx(1, abs=0.25), data["ranged"]
    assert surviving_processes(tag) == []
