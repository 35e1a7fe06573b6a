from __future__ import annotations

import importlib
import os

pytest_plugins = ["pytester"]

# In-process pytester runs drop every module first imported during the run (pytester's module
# snapshot), so the next run imports it again. Extension modules are not made to be imported
# twice in one process: two CI runs died by SIGSEGV in the garbage collector inside such runs.
# So the plugin's lazy dependencies that load extension modules (the HTML report's charts:
# matplotlib and Pillow; the report schema's validator: jsonschema with rpds) are imported here,
# before any run: every snapshot then holds them, and no private pytest name is needed.
# tests/test_pytester_modules.py fails when an inner run loads an extension module first.
PRELOADED = (
    "jsonschema",
    "matplotlib",
    "matplotlib.pyplot",
    "matplotlib.backends.backend_agg",  # pyplot loads its extension at the first figure
    "PIL.Image",
)


def _preload() -> None:
    for name in PRELOADED:
        try:
            module = importlib.import_module(name)
        except ImportError:  # an optional extra not installed: its tests skip
            continue
        if name == "matplotlib":
            module.use("Agg")  # as reporting/html.py does, before pyplot


_preload()


# The terminal summary fits the terminal's width (80 columns when pytest cannot tell, as in
# pytester runs and CI logs), wrapping lines and moving table columns to a line under each
# row. The tests of what the summary says read it at a width where nothing wraps; the tests of
# the fitting itself (tests/test_summary_width.py) set $COLUMNS to the width they check.
os.environ.setdefault("COLUMNS", "400")
