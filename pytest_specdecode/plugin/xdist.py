"""pytest-xdist: one GPU (or group of GPUs) per worker, results gathered on the controller.

The controller assigns ``CUDA_VISIBLE_DEVICES`` to each worker through ``workerinput``; the
worker sets it before any engine process starts (engines inherit it), and nothing in the
pytest processes initialises CUDA. What a worker makes reaches the controller in one format
(``SpecDecodeSession.worker_output``, as plain JSON types: :func:`to_wire`) under one key
(:data:`WORKEROUTPUT_KEY`): each test's results, verdicts, sweeps, rankings and distribution
checks on its report, the worker's time spent in its ``workeroutput`` when it finishes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

import pytest

from ..engines.hardware import Gpu, nvml_gpus
from ..errors import ConfigError

WORKERINPUT_KEY = "specdecode_cuda_visible_devices"
#: The folder where each worker writes its tests' engine groups (``<workerid>.json``).
GROUPS_KEY = "specdecode_groups_dir"
#: Where a worker's output travels: an attribute of each test's report (what the test made)
#: and a key of the worker's ``workeroutput`` (its time spent and how its engines started).
WORKEROUTPUT_KEY = "specdecode"


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


def write_groups(folder: str, worker: str, groups: dict[str, str]) -> None:
    """A worker's tests' engine groups, by node id, for the controller's scheduler."""
    path = os.path.join(folder, f"{worker}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(groups, fh)
    os.replace(path + ".tmp", path)  # whole, before the worker reports its collection


def read_groups(folder: str) -> dict[str, str]:
    """Every engine group the workers wrote (they collected the same tests)."""
    found: dict[str, str] = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                found.update(json.load(fh))
    return found


def engine_group_scheduling(config: pytest.Config, log: Any, folder: str) -> Any:
    """pytest-xdist's ``LoadScopeScheduling`` whose scope is a test's engine group: the tests
    sharing engines go to one worker, every other test is a scope of its own."""
    from xdist.scheduler import LoadScopeScheduling

    class EngineGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:  # read once the collections are in (schedule())
                self._groups = read_groups(folder)
            return self._groups.get(nodeid, nodeid)

    return EngineGroupScheduling(config, log)


class XdistController:
    """Hooks for the pytest-xdist controller (registered only where xdist runs workers)."""

    def __init__(self, config: pytest.Config, per_worker: int, *, by_engines: bool) -> None:
        """``by_engines``: schedule specdecode tests by engine group (under ``--dist load``)."""
        self.config = config
        self.gpus = nvml_gpus()
        self.groups = gpu_groups(self.gpus, per_worker)
        self.groups_dir = tempfile.mkdtemp(prefix="specdecode-groups-") if by_engines else None

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """Under ``--dist load`` (what ``-n`` alone means): whole engine groups per worker."""
        if self.groups_dir is None or config.getoption("dist") != "load":
            return None
        return engine_group_scheduling(config, log, self.groups_dir)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.groups_dir is not None:
            shutil.rmtree(self.groups_dir, ignore_errors=True)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.groups_dir is not None:
            node.workerinput[GROUPS_KEY] = self.groups_dir
        if not self.gpus:
            return
        index = int(str(node.gateway.id).removeprefix("gw") or 0)
        node.workerinput[WORKERINPUT_KEY] = self.groups[index % len(self.groups)]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {}).get(WORKEROUTPUT_KEY)
        state = self._state()
        if output and state is not None:
            state.receive_worker_output(output)

    def _state(self) -> Any:
        from .fixtures import SESSION_KEY

        return self.config.stash.get(SESSION_KEY, None)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        output = getattr(report, WORKEROUTPUT_KEY, None)
        state = self._state()
        if output and state is not None:
            state.receive_worker_output(output)
