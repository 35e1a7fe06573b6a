from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from _pytest import pytester as _pytester

pytest_plugins = ["pytester"]

# In-process pytester runs import the plugin's lazy dependencies (matplotlib, Pillow, jsonschema
# with rpds, NVML through ctypes), and pytester then drops every module first imported during
# the run, so the next run imports them again. Extension modules are not made to be imported
# twice in one process: two CI runs died by SIGSEGV in the garbage collector inside such runs.
# The snapshot below keeps installed and standard-library modules loaded, and still drops the
# plugin's own modules and the files a test writes, as pytester does.
_INSTALLED = tuple(
    str(Path(p).resolve())
    for p in {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
)


def _installed(name: str) -> bool:
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None)
    if origin is None:
        return name.startswith(("zope", "readline"))  # pytester's own exceptions
    return str(Path(origin).resolve()).startswith(_INSTALLED)


def _snapshot(self: _pytester.Pytester) -> _pytester.SysModulesSnapshot:
    return _pytester.SysModulesSnapshot(preserve=_installed)


KEEPS_INSTALLED_MODULES = hasattr(_pytester.Pytester, "_Pytester__take_sys_modules_snapshot")
if KEEPS_INSTALLED_MODULES:
    _pytester.Pytester._Pytester__take_sys_modules_snapshot = _snapshot  # type: ignore[attr-defined]
