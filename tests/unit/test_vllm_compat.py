"""``benchmarks/vllm_compat.py`` on fake wheels built here (no network, no vLLM): which points
each runner has, the verdicts, and a clear exit status 2 when a wheel cannot be had."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from ..helpers import benchmark_script

bench = benchmark_script("vllm_compat")

V1 = (
    "class GPUModelRunner:\n"
    "    def execute_model(self, s): self._model_forward()\n"
    "    def _model_forward(self): pass\n"
    "    def sample_tokens(self, g): self._sample()\n"
    "    def _sample(self): pass\n"
    "    def propose_draft_token_ids(self): pass\n"
)
#: V2 as a future vLLM might have it: ``sample`` renamed
V2 = (
    "class GPUModelRunner:\n"
    "    def execute_model(self, s):\n        self.step_timing.forward_start()\n"
    "    def sample_tokens(self, g):\n        self.speculator.propose()\n"
    "    def sample_v3(self): pass\n"
)
COLLECTOR = "class StepTimingCollector:\n    def forward_start(self): pass\n"
CPU_V1 = (
    "from vllm.v1.worker.gpu_model_runner import GPUModelRunner as Base\n"
    "class CPUModelRunner(Base):\n    pass\n"
)


def wheel(directory: Path, version: str, files: dict[str, str]) -> Path:
    path = directory / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


def test_reports_each_runners_points_from_a_wheel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pip(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a wheel in --wheel-dir is read, not downloaded again")

    monkeypatch.setattr(bench.subprocess, "run", no_pip)
    wheel(tmp_path, "9.1.0", {
        "vllm/v1/worker/gpu_model_runner.py": V1,
        "vllm/v1/worker/gpu/model_runner.py": V2,
        "vllm/v1/worker/gpu/async_utils.py": COLLECTOR,
        "vllm/v1/worker/cpu_model_runner.py": CPU_V1,
    })  # fmt: skip
    wheel(tmp_path, "9.2.0", {"vllm/v1/worker/gpu/model_runner.py": V2})  # V1 and more gone
    assert bench.main(["9.1.0", "9.2.0", "--wheel-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| 9.1.0 | V1 | `_model_forward` | yes |" in out
    assert "| 9.1.0 | V2 | `sample` | **no** |" in out
    assert "| 9.1.0 | V2 | `speculator.propose` | yes |" in out
    cpu = "`cpu_model_runner.py: CPUModelRunner(GPUModelRunner)`"
    assert f"| 9.1.0 | CPU | {cpu} | yes (V1) |" in out
    assert "| 9.2.0 | V1 | `vllm/v1/worker/gpu_model_runner.py` | **no** |" in out
    assert "- vLLM 9.1.0 V1: timed" in out
    assert "- vLLM 9.1.0 V2: phase profile unavailable: no sample\n" in out
    assert "- vLLM 9.1.0 CPU: CPUModelRunner on model runner V1 " in out
    assert "- vLLM 9.2.0 V1: phase profile unavailable: no vllm.v1.worker.gpu_model_runner" in out
    # the collector's forward_start is V2's forward point: without it V2 is not timed
    assert "- vLLM 9.2.0 V2: phase profile unavailable: no sample, StepTimingCollector." in out
    assert "- vLLM 9.2.0 CPU: no CPUModelRunner subclassing a known runner" in out
    # a column per version
    assert bench.main(["9.1.0", "9.2.0", "--wheel-dir", str(tmp_path), "--layout", "wide"]) == 0
    out = capsys.readouterr().out
    assert "| V1 | `_sample` | yes | **no** |" in out
    assert "| V2 | `sample` | **no** | **no** |" in out


def test_a_failed_download_exits_2_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def pip(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        return subprocess.CompletedProcess(
            command, 1, "", "ERROR: No matching distribution found for vllm==9.9.9\n"
        )

    monkeypatch.setattr(bench.subprocess, "run", pip)
    assert bench.main(["9.9.9", "--wheel-dir", str(tmp_path / "wheels")]) == 2
    err = capsys.readouterr().err
    assert "could not download vllm==9.9.9 (exit status 1)" in err
    assert "No matching distribution found" in err and "vllm-9.9.9-*.whl" in err
    [command] = calls
    assert command[-1] == "vllm==9.9.9"
    assert {"--no-deps", "--only-binary=:all:", "manylinux_2_28_x86_64"} <= set(command)


def test_a_broken_wheel_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "vllm-9.1.0-cp38-abi3-manylinux_2_28_x86_64.whl").write_text("not a zip")
    assert bench.main(["9.1.0", "--wheel-dir", str(tmp_path)]) == 2
    assert "not a readable wheel" in capsys.readouterr().err


def test_the_cpu_runners_base_is_resolved_through_its_import() -> None:
    assert bench.subclassed(CPU_V1, "CPUModelRunner") == (
        "vllm.v1.worker.gpu_model_runner.GPUModelRunner"
    )
    assert bench.subclassed("class CPUModelRunner(Local): pass", "CPUModelRunner") == "Local"
    assert bench.subclassed("class Other(Local): pass", "CPUModelRunner") is None
    assert bench.runner_named("vllm.v1.worker.gpu.model_runner.GPUModelRunner") == "V2"
