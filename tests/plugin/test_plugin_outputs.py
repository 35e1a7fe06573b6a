"""Output files, baselines and xdist transport through pytester, with the engines faked.

Each test reproduces a defect of issue 16 (output paths checked only at the end, a failed write
losing the other files, parametrized verdicts lost under pytest-xdist, a baseline outside the
rootdir never matching, non-plain values crossing to the xdist controller).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_specdecode.baselines.compare import ResultKey, StoredResults
from pytest_specdecode.plugin.xdist import to_wire

from ..fakes import CONFTEST as FAKE_CONFTEST
from ..fakes import FakeSource, use_fake

REPO = Path(__file__).resolve().parents[2]

SUITE = """
import pytest

SPEC = {"method": "ngram", "num_speculative_tokens": 4}

@pytest.mark.parametrize("i", range(3))
@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_run(specdecode, i):
    specdecode.run(["p1", "p2"], max_tokens=4)
"""


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester) -> FakeSource:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makepyfile(test_suite=SUITE)
    return use_fake(pytester, monkeypatch)


# -- output paths are checked before anything runs ------------------------------------------


def test_output_under_a_file_is_a_usage_error_before_any_test(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    (pytester.path / "afile").write_text("x")
    result = pytester.runpytest_inprocess(
        "--specdecode-report", "afile/r.json", "--specdecode-save", "ok.json"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--specdecode-report*afile/r.json*'afile' is a file, not a folder*"]
    )
    assert fake.rounds == 0


def test_export_option_writes_each_format_as_the_cli_would(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    from pytest_specdecode.__main__ import main as cli_main

    result = pytester.runpytest_inprocess(
        "--specdecode-export", "bmf=bmf.json,github-action-benchmark=gab.json",
        "--specdecode-report", "r.json",
    )  # fmt: skip
    assert result.ret == 0
    result.stdout.fnmatch_lines(["results written to bmf.json", "results written to gab.json"])
    bmf = json.loads((pytester.path / "bmf.json").read_text())
    assert sorted(bmf) == [f"test_suite.py::test_run[{i}]" for i in range(3)]
    assert cli_main(["export", str(pytester.path / "r.json"), "--format", "bmf",
                     "--output", str(pytester.path / "cli.json")]) == 0  # fmt: skip
    assert json.loads((pytester.path / "cli.json").read_text()) == bmf


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("yaml=x.yaml", "*--specdecode-export*unknown format 'yaml'; known: bmf, *"),
        ("bmf", "*--specdecode-export: expected FORMAT=PATH (e.g. bmf=bench.json), got 'bmf'*"),
        ("bmf=a.json,bmf=b.json", "*--specdecode-export: the format 'bmf' is given twice*"),
        ("bmf=out.json", "*--specdecode-report and --specdecode-export name the same file*"),
    ],
)
def test_a_bad_export_option_is_a_usage_error_before_any_test(
    pytester: pytest.Pytester, fake: FakeSource, value: str, message: str
) -> None:
    result = pytester.runpytest_inprocess(
        "--specdecode-export", value, "--specdecode-report", "out.json"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert fake.rounds == 0


def test_output_that_is_a_folder_is_a_usage_error(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    (pytester.path / "out").mkdir()
    result = pytester.runpytest_inprocess("--specdecode-save", "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--specdecode-save*'out' is a folder*"])


def test_saving_over_the_compared_baseline_is_refused(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    assert pytester.runpytest_inprocess("--specdecode-save", "b.json").ret == 0
    before = (pytester.path / "b.json").read_text()
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "b.json", "--specdecode-save", "./b.json"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*is the baseline given to --specdecode-compare*"])
    assert (pytester.path / "b.json").read_text() == before


def test_html_without_matplotlib_is_a_usage_error_at_start(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    pytester.makeconftest("import sys\nsys.modules['matplotlib'] = None\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--specdecode-html", "x.html",
        "--specdecode-compare", "b.json", "--specdecode-update-baseline",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--specdecode-html*needs matplotlib*pip install*"])


# -- at the end, one failed write does not stop the others ----------------------------------

BLOCKER = """
import os

def pytest_runtest_teardown(item):
    os.makedirs("r.json", exist_ok=True)  # the report path becomes a folder mid-run
"""


def test_a_failed_write_keeps_the_other_files_and_the_summary(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    pytester.makeconftest(BLOCKER)
    result = pytester.runpytest_inprocess(
        "--specdecode-report", "r.json", "--specdecode-save", "ok.json",
        "--specdecode-compare", "base.json", "--specdecode-update-baseline",
    )  # fmt: skip
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "speculative decoding summary" in out
    result.stdout.fnmatch_lines(["*ERROR: report r.json could not be written*"])
    assert len(json.loads((pytester.path / "ok.json").read_text())["results"]) == 3
    assert len(json.loads((pytester.path / "base.json").read_text())["results"]) == 3
    assert "results written to ok.json" in out


# -- keys that survive a moved rootdir; nothing matched is an error --------------------------

CONFTEST = FAKE_CONFTEST.format(repo=str(REPO))


def _pytest(cwd: Path, *args: str, speedup: float = 2.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FAKE_SPEEDUP": str(speedup)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


INTERRUPT = """
def pytest_runtest_teardown(item):
    if item.name.endswith("[1]"):
        raise KeyboardInterrupt
"""


def test_interrupted_run_does_not_update_the_baseline(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    args = ("--specdecode-compare", "base.json", "--specdecode-update-baseline")
    first = _pytest(tmp_path, *args)
    assert first.returncode == 0, first.stdout + first.stderr
    before = (tmp_path / "base.json").read_text()
    (tmp_path / "conftest.py").write_text(CONFTEST + INTERRUPT)
    result = _pytest(tmp_path, *args, "--specdecode-save", "partial.json", speedup=1.1)
    out = result.stdout + result.stderr
    assert result.returncode == pytest.ExitCode.INTERRUPTED, out
    assert (tmp_path / "base.json").read_text() == before
    assert "baseline base.json NOT updated: the run was interrupted" in out
    assert len(json.loads((tmp_path / "partial.json").read_text())["results"]) == 2


def test_baseline_outside_the_rootdir_still_matches(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "conftest.py").write_text(CONFTEST)
    (proj / "test_suite.py").write_text(SUITE)
    saved = _pytest(proj, "--specdecode-save", "../b.json")
    assert saved.returncode == 0, saved.stdout + saved.stderr
    # Now that ../b.json exists, pytest's rootdir moves up and every node id gains "proj/".
    compared = _pytest(proj, "--specdecode-compare", "../b.json", "-v", speedup=1.2)
    out = compared.stdout + compared.stderr
    assert "rootdir: " + str(tmp_path) in out, out
    assert compared.returncode == 1, out
    assert out.count("REGRESSED") == 3, out
    assert "missing from this run" not in out


def test_a_compare_where_nothing_matches_is_an_error(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    assert pytester.runpytest_inprocess("--specdecode-save", "b.json").ret == 0
    data = json.loads((pytester.path / "b.json").read_text())
    for r in data["results"]:
        r["nodeid"] = r["nodeid"].replace("test_run", "test_renamed")
    (pytester.path / "b.json").write_text(json.dumps(data))
    result = pytester.runpytest_inprocess("--specdecode-compare", "b.json")
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*ERROR: no result of this run matches one in the baseline b.json*"]
    )


def test_result_keys_match_across_a_moved_rootdir() -> None:
    stored = StoredResults(
        [
            {"nodeid": "tests/test_a.py::test_x[1]", "label": ""},
            {"nodeid": "tests/test_a.py::test_x[1]", "label": "second"},
            {"nodeid": "a/test_b.py::test_y"},
            {"nodeid": "b/test_b.py::test_y"},
        ]
    )
    found = stored.find(ResultKey("proj/tests/test_a.py::test_x[1]"))
    assert found is not None and not found["label"]
    assert stored.find(ResultKey("test_a.py::test_x[1]", "second")) is not None
    assert stored.find(ResultKey("other/test_a.py::test_x[1]")) is None
    assert stored.find(ResultKey("test_b.py::test_y")) is None  # two fit: no guess
    assert stored.find(ResultKey("a/test_b.py::test_y")) is not None


# -- pytest-xdist: plain values cross, parametrized verdicts reach the controller ------------

XDIST_CONFTEST = (
    CONFTEST
    + '''
class TorchVersion(str):
    """Like torch.torch_version.TorchVersion: a str subclass execnet refuses."""

_acquire = source.acquire
def acquire(config, **kwargs):
    engine = _acquire(config, **kwargs)
    engine.info = {"torch_version": TorchVersion("2.13.0"), "vllm_version": "0.32.0"}
    return engine
source.acquire = acquire
'''
)


def test_xdist_parametrized_verdicts_and_non_plain_engine_info(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    (tmp_path / "conftest.py").write_text(XDIST_CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    saved = _pytest(tmp_path, "-n", "2", "--specdecode-save", "b.json")
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert json.loads((tmp_path / "b.json").read_text())["environment"]["torch"] == "2.13.0"
    compared = _pytest(tmp_path, "-n", "2", "--specdecode-compare", "b.json", speedup=1.2)
    out = compared.stdout + compared.stderr
    assert compared.returncode == 1, out
    table = out.split("comparison with the baseline", 1)[1]
    for i in range(3):
        assert f"test_run[{i}]" in table and "REGRESSED" in table, out
    assert table.count("REGRESSED") == 3, out


def test_to_wire_gives_values_execnet_can_send() -> None:
    execnet = pytest.importorskip("execnet")

    class TorchVersion(str):
        pass

    value = {"torch_version": TorchVersion("2.13.0"), "ci": (0.9, 1.1), "n": [1, None]}
    with pytest.raises(execnet.DataFormatError):
        execnet.dumps(value)
    plain = to_wire(value)
    assert execnet.loads(execnet.dumps(plain)) == {
        "torch_version": "2.13.0", "ci": [0.9, 1.1], "n": [1, None],
    }  # fmt: skip
    assert type(plain["torch_version"]) is str
