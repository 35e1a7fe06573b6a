"""pytest-xdist: one GPU (or group of GPUs) per worker, results gathered on the controller.

The controller assigns ``CUDA_VISIBLE_DEVICES`` to each worker through ``workerinput``; the
worker sets it before any engine process starts (engines inherit it), and nothing in the
pytest processes initialises CUDA. Results (and each test's verdicts and ``choose_draft``
rankings) travel back on the test reports, as plain JSON types (:func:`to_wire`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ..engines.hardware import Gpu, nvml_gpus
from ..errors import ConfigError

WORKERINPUT_KEY = "specdecode_cuda_visible_devices"


def gpu_groups(gpus: tuple[Gpu, ...], per_worker: int) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` values, one per worker: consecutive groups of ``per_worker``."""
    indices = [g.index for g in gpus]
    return [
        ",".join(str(i) for i in indices[start : start + per_worker])
        for start in range(0, len(indices) - per_worker + 1, per_worker)
    ]


def check_worker_count(workers: int, groups: list[str], gpus: int, per_worker: int) -> None:
    """More workers than GPU groups is an error (on a GPU machine)."""
    if gpus and workers > len(groups):
        raise ConfigError(
            f"-n {workers}: each pytest-xdist worker needs {per_worker} GPU(s) of its own, and "
            f"NVML sees {gpus} (room for {len(groups)} worker(s)); use -n {len(groups) or 1}, "
            "-n auto, or a smaller --specdecode-gpus-per-worker"
        )


def to_wire(value: Any) -> Any:
    """``value`` as plain JSON types (dict, list, str, int, float, bool, None): what crosses
    from a worker to the controller. Subclasses of str and the like (``torch.__version__`` is
    a ``TorchVersion``) become their base type, which execnet can serialise; anything else
    becomes its ``str``."""
    return json.loads(json.dumps(value, default=str))


class XdistController:
    """Hooks for the pytest-xdist controller (registered only where xdist runs workers)."""

    def __init__(self, config: pytest.Config, per_worker: int) -> None:
        self.config = config
        self.gpus = nvml_gpus()
        self.groups = gpu_groups(self.gpus, per_worker)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if not self.gpus:
            return
        index = int(str(node.gateway.id).removeprefix("gw") or 0)
        node.workerinput[WORKERINPUT_KEY] = self.groups[index % len(self.groups)]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        results = getattr(report, "specdecode_results", None)
        if not results:
            return
        from .fixtures import SESSION_KEY

        state = self.config.stash.get(SESSION_KEY, None)
        if state is not None:
            state.receive(
                results,
                getattr(report, "specdecode_verdicts", []),
                getattr(report, "specdecode_engine_info", {}),
                getattr(report, "specdecode_rankings", []),
            )
