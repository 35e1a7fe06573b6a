from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from types import ModuleType

import pytest

from pytest_specdecode.engines.launch import START_METHOD_ENV
from pytest_specdecode.engines.placement import MULTIPROCESSING_ENV
from pytest_specdecode.engines.pool import STARTS_LOG_ENV

pytest_plugins = ["pytester"]

# In-process pytester runs drop every module first imported during the run (pytester's module
# snapshot), so the next run imports it again. Extension modules are not made to be loaded
# twice in one process: two CI runs died by SIGSEGV in the garbage collector inside such runs.
# Two public means keep them loaded, no private pytest name:
# - the plugin's lazy dependencies that load extension modules (the HTML report's charts:
#   matplotlib and Pillow; the report schema's validator: jsonschema with rpds) are imported
#   here, before any run, so every snapshot holds them with their Python parts;
# - any other extension module, once loaded, is handed back on its next import instead of
#   being loaded again (``ExtensionModuleCache``, first on ``sys.meta_path``).
# tests/plugin/test_pytester_modules.py checks both.
PRELOADED = (
    "jsonschema",
    "matplotlib",
    "matplotlib.pyplot",
    "matplotlib.backends.backend_agg",  # pyplot loads its extension at the first figure
    "PIL.Image",
)


class ExtensionModuleCache(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Loads each extension module once per process: a later import of one that was dropped
    from ``sys.modules`` gets the module object loaded the first time."""

    def __init__(self) -> None:
        self.loaded: dict[str, ModuleType] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in self.loaded:
            return importlib.util.spec_from_loader(fullname, self)
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
                spec.loader = _Recording(spec.loader, self.loaded)
            return spec  # the spec the next finders give: no second search for it
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self.loaded[spec.name]

    def exec_module(self, module: ModuleType) -> None:
        """Already run when it was first loaded."""


class _Recording(importlib.abc.Loader):
    """An extension module's own loader, keeping what it loads in ``loaded``."""

    def __init__(self, loader: importlib.machinery.ExtensionFileLoader, loaded: dict) -> None:
        self.loader, self.loaded = loader, loaded

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.loaded[module.__name__] = module


EXTENSION_CACHE = ExtensionModuleCache()
sys.meta_path.insert(0, EXTENSION_CACHE)


def _preload() -> None:
    for name in PRELOADED:
        try:
            module = importlib.import_module(name)
        except ImportError:  # an optional extra not installed: its tests skip
            continue
        if name == "matplotlib":
            module.use("Agg")  # as reporting/charts.py does, before pyplot


_preload()


# The terminal summary fits the terminal's width (80 columns when pytest cannot tell, as in
# pytester runs and CI logs), wrapping lines and moving table columns to a line under each
# row. The tests of what the summary says read it at a width where nothing wraps: the pytest
# runs they start (in process or not) see $COLUMNS 400; the tests of the fitting itself
# (tests/plugin/test_summary_width.py) set $COLUMNS to the width they check. This session's own
# output keeps the terminal's width.
_OWN_WIDTH = shutil.get_terminal_size(fallback=(80, 24)).columns
os.environ.setdefault("COLUMNS", "400")


# Engine layout. A real engine here runs vLLM's engine core and model in the plugin's engine
# worker (vLLM's own switch, VLLM_ENABLE_V1_MULTIPROCESSING=0: the plugin then keeps vLLM's
# choice), which starts in about 11 s instead of 26 s on these machines (benchmarks/startup.py
# modes). The tests of what happens to vLLM's own processes (its engine core killed, which
# also measures a whole suite in that layout; Ctrl-C with them running) start theirs with
# vLLM's layout: ``vllm_layout()`` in tests/e2e_support.py.
os.environ.setdefault(MULTIPROCESSING_ENV, "0")

# Such an engine's worker is forked from a fork server that imported torch and vLLM once per
# process (engines/launch.py, ``auto``: vLLM's own layout still spawns), so the real-engine
# tests run the fork server on real vLLM, and a process's later starts skip those imports.
# In a quiet clean-clone CI run the starts summed 934 s instead of 1264 s, but the real-engine
# part took as long as with spawned workers (1410 s and 1409 s; docs/validation.md "Engine
# start-up"). The default start method (spawn) is what the tests of vLLM's own layout use.
os.environ.setdefault(START_METHOD_ENV, "auto")

# Every engine start of the session, in this process and in every run it starts, is one line
# in this file (the plugin's PYTEST_SPECDECODE_STARTS_LOG); the count is printed at the end.
_STARTS_KEY = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.get_plugin("terminalreporter") is not None:
        config.get_terminal_writer().fullwidth = _OWN_WIDTH
    if not os.environ.get(STARTS_LOG_ENV) and not hasattr(config, "workerinput"):
        handle, path = tempfile.mkstemp(prefix="specdecode-starts-", suffix=".jsonl")
        os.close(handle)
        os.environ[STARTS_LOG_ENV] = path
        config.stash[_STARTS_KEY] = path


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The engine starts of the whole session (its own and its runs'), when there were any."""
    path = terminalreporter.config.stash.get(_STARTS_KEY, None)
    if path is None:
        return
    try:
        with open(path, encoding="utf-8") as fh:
            starts = [json.loads(line) for line in fh if line.strip()]
        os.remove(path)
    except (OSError, ValueError):
        return
    if not starts:
        return
    seconds = sum(s["seconds"] for s in starts)
    modes = Counter(str(s.get("mode") or "failed") for s in starts)
    processes = len({s["pid"] for s in starts})
    layout = ", ".join(f"{n} {mode}" for mode, n in sorted(modes.items()))
    terminalreporter.write_sep("=", "real engines")
    terminalreporter.write_line(
        f"engine starts: {len(starts)} ({layout}) in {processes} process(es), "
        f"{seconds:.0f} s from launch to ready (engines starting together each counted)"
    )
