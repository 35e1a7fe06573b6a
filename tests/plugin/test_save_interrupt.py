"""Ctrl-C while the session's end writes the report or the saved run (engines faked): pytest
exits at once and each file is whole, the new one or the one from before; no temporary file
is left beside it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_specdecode.baselines.files import atomic_write_text

from ..e2e_support import SLOW_RENAME, Proc
from ..fakes import CONFTEST as FAKE_CONFTEST

REPO = Path(__file__).resolve().parents[2]

SUITE = """
import pytest

SPEC = {"method": "ngram", "num_speculative_tokens": 4}

@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_run(specdecode):
    specdecode.run(["p1", "p2"], max_tokens=4, trials=2)
"""

BEFORE = '{"format_version": 1, "results": [], "environment": {}, "session": {}}\n'
#: How long the process may take to exit after the Ctrl-C.
EXIT_SECONDS = 20


def _interrupted(args: list[str], cwd: Path, slow: str) -> tuple[int, str]:
    """Run ``args``; Ctrl-C (to its process group) once the write of ``slow`` reaches its
    rename; its exit status and output."""
    p = Proc(args, cwd, {"SLOW_FILE": slow, "SLOW_SECONDS": "60", "GITHUB_STEP_SUMMARY": ""})
    try:
        p.wait_for(lambda: bool(p.count("[test] renaming")), "the rename", 120)
        p.ctrl_c()
        return p.exits(EXIT_SECONDS), p.output
    finally:
        p.kill_leftovers()


def _files(folder: Path) -> list[str]:
    """The folder's files (Python's bytecode cache aside: CI does not set
    PYTHONDONTWRITEBYTECODE)."""
    return sorted(f.name for f in folder.iterdir() if f.name != "__pycache__")


@pytest.mark.parametrize("slow", ["report.json", "saved.json"])
def test_ctrl_c_while_an_output_file_is_written(tmp_path: Path, slow: str) -> None:
    """The report is written first, then the saved run; a Ctrl-C inside either write."""
    (tmp_path / "conftest.py").write_text(FAKE_CONFTEST.format(repo=str(REPO)) + SLOW_RENAME)
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    for name in ("report.json", "saved.json"):
        (tmp_path / name).write_text(BEFORE)
    code, out = _interrupted(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s",
         "--specdecode-report", "report.json", "--specdecode-save", "saved.json"],
        tmp_path, slow,
    )  # fmt: skip
    assert code == 2, out  # pytest's "interrupted", not a death by signal
    assert f"save {slow} NOT written" in out or f"report {slow} NOT written" in out, out
    assert "Traceback" not in out, out  # the summary names the files; no raw traceback
    if slow == "report.json":  # the save, after it, is named as not written too
        assert "save saved.json NOT written: interrupted (KeyboardInterrupt)" in out, out
    # no temporary file, no lock file left beside the outputs
    assert _files(tmp_path) == [
        "conftest.py",
        "pytest.ini",
        "report.json",
        "saved.json",
        "test_suite.py",
    ], out
    assert (tmp_path / slow).read_text() == BEFORE  # the file from before, whole
    if slow == "saved.json":  # the report, written first, is the new one, whole
        report = json.loads((tmp_path / "report.json").read_text())
        assert [r["nodeid"] for r in report["results"]] == ["test_suite.py::test_run"]
    else:  # interrupted before the save began
        assert (tmp_path / "saved.json").read_text() == BEFORE


ATOMIC = """
import sys
from pytest_specdecode.baselines.files import atomic_write_text
atomic_write_text(sys.argv[1], "new\\n" * 100_000)
"""


@pytest.mark.parametrize("existed", [True, False])
def test_ctrl_c_inside_atomic_write_text(tmp_path: Path, existed: bool) -> None:
    """The write itself, outside pytest: the old file stays (or none appears), no temporary."""
    target = tmp_path / "out.json"
    if existed:
        atomic_write_text(target, BEFORE)
    (tmp_path / "slow.py").write_text(SLOW_RENAME)
    script = "import runpy; runpy.run_path('slow.py');" + "exec(open('atomic.py').read())"
    (tmp_path / "atomic.py").write_text(ATOMIC)
    code, out = _interrupted([sys.executable, "-c", script, str(target)], tmp_path, "out.json")
    assert code != 0, out
    assert out.rstrip().endswith("KeyboardInterrupt"), out
    assert _files(tmp_path) == ["atomic.py", *(["out.json"] if existed else []), "slow.py"], out
    if existed:
        assert target.read_text() == BEFORE
    else:
        assert not target.exists()
