"""Fake measurement data for tests that need no engine, and the benchmark scripts' loader."""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

import pytest

from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.protocol import Counters, RequestFigures, Round, Sampling
from pytest_specdecode.measure.figures import build_result
from pytest_specdecode.measure.paired import PairedRounds
from pytest_specdecode.measure.result import Result


def fake_round(elapsed: float, outputs: list[list[int]]) -> Round:
    return Round(elapsed, tuple(RequestFigures(tuple(ids), "x", 0.01, 0.002) for ids in outputs))


def fake_result(
    base_times: tuple[float, ...] = (1.0, 1.1, 0.9),
    spec_times: tuple[float, ...] = (0.5, 0.55, 0.45),
    base_outputs: list[list[int]] | None = None,
    spec_outputs: list[list[int]] | None = None,
    counters: Counters | None = None,
    temperature: float = 0.0,
) -> Result:
    base_outputs = base_outputs or [[1, 2, 3], [4, 5, 6]]
    spec_outputs = spec_outputs or [list(o) for o in base_outputs]
    spec = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}
    raw = PairedRounds(
        baseline=tuple(fake_round(t, base_outputs) for t in base_times),
        speculative=tuple(fake_round(t, spec_outputs) for t in spec_times),
        counters=counters or Counters(10, 40, 30, (10, 8, 7, 5)),
        round_counters=(Counters(3, 12, 9, (3, 3, 2, 1)),) * len(spec_times),
        mode="interleaved",
        memory="test",
    )
    return build_result(
        raw,
        nodeid="tests/test_x.py::test_a",
        category="structured",
        speculative=EngineConfig.create("org/target", spec, {}),
        num_prompts=len(base_outputs),
        sampling=Sampling(max_tokens=3, temperature=temperature),
        concurrency=None,
    )


def benchmark_script(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` loaded as a module (the scripts are not a package), registered
    in ``sys.modules`` so that its dataclasses find their module."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def fake_find_spec(monkeypatch: pytest.MonkeyPatch, **found: bool) -> list[str]:
    """``importlib.util.find_spec`` answers for the modules named in ``found`` as told (a spec
    when True, None when False) and for any other as before; returns every name it is asked."""
    real = importlib.util.find_spec
    asked: list[str] = []

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        asked.append(name)
        if name in found:
            return ModuleSpec(name, None) if found[name] else None
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return asked
