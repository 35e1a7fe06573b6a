"""Which of the phase timer's points each vLLM version's model runners have, read from the
vLLM wheel of each version (downloaded without dependencies, opened as a zip, not installed).

    python benchmarks/vllm_compat.py                           # 0.32.0 0.33.0 0.34.0
    python benchmarks/vllm_compat.py 0.35.0 --layout wide      # one column per version
    python benchmarks/vllm_compat.py --wheel-dir /tmp/w --delete-wheels

Per version and per model runner of ``engines/phases.py``'s ``RUNNERS`` (V1, V2) it reads the
runner's module from the wheel and tells, with ``points_in_source`` (the check the test of the
installed vLLM runs), which timing points exist; besides, whether V2's ``StepTimingCollector``
(``vllm/v1/worker/gpu/async_utils.py``) defines ``forward_start`` (the forward point) and which
runner vLLM's CPU model runner subclasses (``vllm/v1/worker/cpu_model_runner.py``, V1's, up to
0.33; ``vllm/v1/worker/cpu/model_runner.py`` from 0.34). It prints a Markdown table and one
verdict per version and runner: ``timed`` or ``phase profile unavailable: no X``.

Wheels are fetched with ``pip download --no-deps --only-binary=:all:`` for a manylinux x86_64
CPython (``--platform``, ``--python-version``; the runner sources are the same in every wheel
of a version), kept in ``--wheel-dir`` (reused on the next run). Exit status 0 when it ran
(missing points are findings), 2 when a wheel cannot be had.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdecode.engines.phases import (  # noqa: E402 (after the path fix; no vLLM)
    RUNNERS,
    RunnerPoints,
    points_in_source,
)

VERSIONS = ("0.32.0", "0.33.0", "0.34.0")
WHEEL_DIR = Path.home() / ".cache" / "pytest-specdecode" / "vllm-wheels"
#: pip does not widen a given manylinux tag to older ones: every tag a vLLM wheel has carried.
PLATFORMS = tuple(f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35, 39))
PYTHON = "3.12"
#: V2's step-timing collector, whose ``forward_start`` is V2's forward point.
COLLECTOR = RunnerPoints(
    "V2", "vllm.v1.worker.gpu.async_utils", "StepTimingCollector", {"forward": "forward_start"}
)
#: Where vLLM has defined its CPU model runner (``CPUModelRunner``), oldest first.
CPU_RUNNER_FILES = ("vllm/v1/worker/cpu_model_runner.py", "vllm/v1/worker/cpu/model_runner.py")
CPU_RUNNER = "CPUModelRunner"


class WheelError(Exception):
    """A version's wheel could not be downloaded or read."""


@dataclass(frozen=True)
class Row:
    """One finding: in ``version``, ``runner`` (V1, V2, CPU) has ``point`` or not."""

    version: str
    runner: str
    point: str
    present: bool
    note: str = ""  # shown beside "yes": for the CPU runner, the runner it subclasses

    def cell(self) -> str:
        if not self.present:
            return "**no**"
        return f"yes ({self.note})" if self.note else "yes"


def module_file(module: str) -> str:
    """The path of ``module``'s source inside a wheel."""
    return module.replace(".", "/") + ".py"


def wanted_files() -> list[str]:
    """Every file of a wheel the report reads."""
    modules = [p.module for p in RUNNERS] + [COLLECTOR.module]
    return [module_file(m) for m in modules] + list(CPU_RUNNER_FILES)


def read_sources(wheel: Path) -> dict[str, str | None]:
    """The text of each of :func:`wanted_files` in ``wheel`` (None: not in it)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = set(archive.namelist())
            return {
                name: archive.read(name).decode("utf-8") if name in names else None
                for name in wanted_files()
            }
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise WheelError(
            f"{wheel}: not a readable wheel ({exc}); delete it and run again to download it anew"
        ) from exc


def subclassed(source: str, cls: str) -> str | None:
    """The qualified name (``module.Class``) of the first base of class ``cls`` in ``source``,
    resolved through its ``from ... import`` lines (the bare name where none names it; None
    where the class is not there or has no base)."""
    tree = ast.parse(source)
    imported = {
        alias.asname or alias.name: f"{node.module}.{alias.name}"
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls and node.bases:
            base = ast.unparse(node.bases[0])
            return imported.get(base, base)
    return None


def runner_named(qualified: str | None) -> str | None:
    """The :data:`RUNNERS` name (V1, V2) of the class ``module.Class`` (None: no known one)."""
    for points in RUNNERS:
        if qualified == f"{points.module}.{points.cls}":
            return points.name
    return None


def check(version: str, sources: Mapping[str, str | None]) -> tuple[list[Row], dict[str, str]]:
    """The rows of ``version`` from its wheel's ``sources`` (:func:`read_sources`), and per
    runner (V1, V2, CPU) its verdict."""
    rows: list[Row] = []
    verdicts: dict[str, str] = {}
    collector = sources.get(module_file(COLLECTOR.module))
    for points in RUNNERS:
        source = sources.get(module_file(points.module))
        rows.append(Row(version, points.name, module_file(points.module), source is not None))
        if source is None:
            rows += [Row(version, points.name, path, False) for path in points.paths.values()]
            verdicts[points.name] = (
                f"phase profile unavailable: no {points.module} (the runner is gone)"
            )
            continue
        found = points_in_source(source, points)
        rows += [Row(version, points.name, path, ok) for path, ok in found.items()]
        missing = [path for path, ok in found.items() if not ok]
        if points.name == COLLECTOR.name:
            has = collector is not None and all(points_in_source(collector, COLLECTOR).values())
            name = f"{COLLECTOR.cls}.{COLLECTOR.paths['forward']}"
            rows.append(Row(version, points.name, f"{name} (gpu/async_utils.py)", has))
            missing += [] if has else [name]
        verdicts[points.name] = (
            "timed" if not missing else f"phase profile unavailable: no {', '.join(missing)}"
        )
    runs = []
    for name in CPU_RUNNER_FILES:
        source = sources.get(name)
        base = subclassed(source, CPU_RUNNER) if source is not None else None
        runner = runner_named(base)
        label = f"{name.removeprefix('vllm/v1/worker/')}: {CPU_RUNNER}(GPUModelRunner)"
        rows.append(Row(version, "CPU", label, runner is not None, runner or ""))
        if runner is not None:
            runs.append(f"{runner} ({name})")
    verdicts["CPU"] = (
        f"{CPU_RUNNER} on model runner {', '.join(runs)}"
        if runs
        else f"no {CPU_RUNNER} subclassing a known runner in {' or '.join(CPU_RUNNER_FILES)}"
    )
    return rows, verdicts


def download(
    version: str, wheel_dir: Path, platforms: Sequence[str], python: str
) -> tuple[Path, bool]:
    """``version``'s vLLM wheel in ``wheel_dir`` (downloaded by pip unless there), and whether
    it was downloaded now. A :class:`WheelError` saying why when pip fails."""
    found = sorted(wheel_dir.glob(f"vllm-{version}-*.whl"))
    if found:
        return found[0], False
    wheel_dir.mkdir(parents=True, exist_ok=True)
    print(f"downloading vllm=={version} (no dependencies) into {wheel_dir}", file=sys.stderr)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--implementation", "cp", "--python-version", python, "--disable-pip-version-check",
               "--quiet", "-d", str(wheel_dir), f"vllm=={version}"]  # fmt: skip
    for platform in platforms:
        command[-1:-1] = ["--platform", platform]
    proc = subprocess.run(command, capture_output=True, text=True)
    found = sorted(wheel_dir.glob(f"vllm-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        said = "\n".join([line for line in lines if line.startswith("ERROR")] or lines[-3:])
        raise WheelError(
            f"pip could not download vllm=={version} (exit status {proc.returncode}): {said}\n"
            "Check the version exists on PyPI and the index is reachable, or put its wheel "
            f"(vllm-{version}-*.whl) in {wheel_dir}"
        )
    return found[0], True


def long_table(rows: Sequence[Row]) -> list[str]:
    """One Markdown line per row: version | runner | point | present."""
    lines = ["| version | runner | point | present |", "|---|---|---|---|"]
    lines += [f"| {r.version} | {r.runner} | `{r.point}` | {r.cell()} |" for r in rows]
    return lines


def wide_table(rows: Sequence[Row], versions: Sequence[str]) -> list[str]:
    """One Markdown line per runner and point, one column per version (``-``: not checked)."""
    keys = list(dict.fromkeys((r.runner, r.point) for r in rows))
    cell = {(r.version, r.runner, r.point): r.cell() for r in rows}
    lines = [
        "| runner | point | " + " | ".join(versions) + " |",
        "|---|---|" + "---|" * len(versions),
    ]
    for runner, point in keys:
        shown = [cell.get((v, runner, point), "-") for v in versions]
        lines.append(f"| {runner} | `{point}` | " + " | ".join(shown) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", default=list(VERSIONS),
                        help=f"vLLM versions (default {' '.join(VERSIONS)})")  # fmt: skip
    parser.add_argument("--wheel-dir", type=Path, default=WHEEL_DIR,
                        help=f"where wheels are kept and reused (default {WHEEL_DIR})")  # fmt: skip
    parser.add_argument("--delete-wheels", action="store_true",
                        help="delete each wheel this run downloaded once it is read")  # fmt: skip
    parser.add_argument("--platform", action="append", dest="platforms",
                        help="a pip --platform tag to accept (repeatable; default every "
                        "manylinux_2_N_x86_64 vLLM has used)")  # fmt: skip
    parser.add_argument("--python-version", default=PYTHON,
                        help=f"the CPython the wheel is for (default {PYTHON})")  # fmt: skip
    parser.add_argument("--layout", choices=("long", "wide"), default="long",
                        help="long: a row per version, runner and point; wide: a column per "
                        "version")  # fmt: skip
    args = parser.parse_args(argv)

    rows: list[Row] = []
    verdicts: list[str] = []
    for version in args.versions:
        try:
            wheel, fresh = download(
                version, args.wheel_dir, args.platforms or PLATFORMS, args.python_version
            )
            sources = read_sources(wheel)
        except WheelError as exc:
            print(f"vllm_compat: {exc}", file=sys.stderr)
            return 2
        if fresh and args.delete_wheels:
            wheel.unlink()
        found, said = check(version, sources)
        rows += found
        verdicts += [f"- vLLM {version} {runner}: {verdict}" for runner, verdict in said.items()]
    table = long_table(rows) if args.layout == "long" else wide_table(rows, args.versions)
    print("\n".join([*table, "", *verdicts]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
