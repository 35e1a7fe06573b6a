"""Saved runs and baselines are merged, never replaced (engines faked, real files): a subset
run, a test that crashed and 8 runs saving at once keep every other entry; an update of a
subset keeps each other entry's own environment, and comparisons read it; an unreadable or
newer file is refused and kept; a symbolic link is written through."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode.__main__ import main as cli_main
from pytest_specdecode.baselines.files import load

from ..fakes import CONFTEST as FAKE_CONFTEST
from ..fakes import FakeSource, use_fake

REPO = Path(__file__).resolve().parents[2]

SUITE = """
import os
import pytest

SPEC = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}

@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_a(specdecode):
    specdecode.run(["p1", "p2"], max_tokens=4)

@pytest.mark.specdecode("creative", target="org/target", speculative_config=SPEC)
def test_b(specdecode):
    if os.environ.get("CRASH_B"):
        raise RuntimeError("test_b crashed before it measured anything")
    specdecode.run(["p1", "p2"], max_tokens=4, temperature=0.8)
"""

A, B = "test_suite.py::test_a", "test_suite.py::test_b"
SAVE = ("--specdecode-baseline-trials", "20")  # the fewest a baseline may have
UPDATE = ("--specdecode-compare", "base.json", "--specdecode-update-baseline")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester) -> FakeSource:
    engines = use_fake(pytester, monkeypatch)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("CRASH_B", raising=False)
    pytester.makepyfile(test_suite=SUITE)
    return engines


def entries(path: Path) -> dict[str, dict[str, Any]]:
    return {r["nodeid"]: r for r in load(path)["results"]}


# --- --specdecode-save merges into the file -----------------------------------------------------


def test_a_subset_save_keeps_every_other_entry(
    pytester: pytest.Pytester, fake: FakeSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.runpytest_inprocess("--specdecode-save", "saved.json", *SAVE).assert_outcomes(passed=2)
    before = entries(pytester.path / "saved.json")
    assert sorted(before) == [A, B]
    fake.speedup, fake.vllm_version = 1.5, "0.99"
    result = pytester.runpytest_inprocess("--specdecode-save", "saved.json", *SAVE, "-k", "test_b")
    result.assert_outcomes(passed=1, deselected=1)
    after = entries(pytester.path / "saved.json")
    assert after[A] == before[A]  # untouched, its environment included
    assert after[A]["environment"]["vllm"] == "fake"
    assert after[B]["speedup"] < 1.7 and after[B]["environment"]["vllm"] == "0.99"
    # the saving sessions of the new entry restart: its environment changed
    assert len(after[B]["sessions"]) == 1
    # a test that crashes before measuring keeps the entry it had
    monkeypatch.setenv("CRASH_B", "1")
    fake.vllm_version = "fake"
    result = pytester.runpytest_inprocess("--specdecode-save", "saved.json", *SAVE)
    result.assert_outcomes(passed=1, failed=1)
    latest = entries(pytester.path / "saved.json")
    assert latest[B] == after[B]
    assert len(latest[A]["sessions"]) == 2  # same environment: a second session
    checklist = load(pytester.path / "saved.json")["checklist"]
    assert "creative" in json.dumps(checklist)  # made from the merged results, test_b's too


EIGHT = "".join(
    f"""
@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_{i}(specdecode):
    specdecode.run(["p1", "p2"], max_tokens=4, trials=2)
"""
    for i in ["kept", *range(8)]
)
#: the fake engines' vLLM version from the environment: each run saves its own
VERSIONED = 'source.vllm_version = os.environ.get("FAKE_VLLM", "fake")\n'


def test_eight_runs_saving_at_once_keep_every_entry(tmp_path: Path) -> None:
    """8 runs on 8 different vLLM versions save into one file at once: each entry is kept
    with the environment its own run measured it in, and so is an entry saved before."""
    (tmp_path / "conftest.py").write_text(FAKE_CONFTEST.format(repo=str(REPO)) + VERSIONED)
    (tmp_path / "test_suite.py").write_text(
        'import pytest\n\nSPEC = {"method": "ngram", "num_speculative_tokens": 4}\n' + EIGHT
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"

    def save(name: str, vllm: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
                "--specdecode-save", "saved.json", "-k", f"test_{name}",
            ],
            cwd=tmp_path, env={**env, "FAKE_VLLM": vllm},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    first = save("kept", "0.old")
    assert first.wait(timeout=300) == 0, first.communicate()[0]
    runs = [save(str(i), f"0.{i}") for i in range(8)]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    for run, out in zip(runs, outputs, strict=True):
        assert run.returncode == 0, out
        assert "results written to saved.json" in out, out
    saved = entries(tmp_path / "saved.json")
    assert {key: r["environment"]["vllm"] for key, r in saved.items()} == {
        "test_suite.py::test_kept": "0.old",
        **{f"test_suite.py::test_{i}": f"0.{i}" for i in range(8)},
    }
    assert not (tmp_path / "saved.json.lock").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"format_version": 1, "results": [{"nodeid": "t.py::kept"',
            "not valid JSON*(the file looks truncated)",
        ),
        (
            '{"format_version": 2, "results": [], "environment": {}}',
            "format_version 2 is not supported*upgrade pytest-specdecode",
        ),
    ],
)
def test_an_unreadable_or_newer_saved_file_is_refused_and_kept(
    pytester: pytest.Pytester, fake: FakeSource, content: str, message: str
) -> None:
    (pytester.path / "saved.json").write_text(content)
    result = pytester.runpytest_inprocess("--specdecode-save", "saved.json", *SAVE)
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # before any test ran
    result.stderr.fnmatch_lines(
        [f"ERROR: --specdecode-save saved.json: {message} -- left as it is*"
         "never replaces one it cannot read*Repair it, or move it away*"]
    )  # fmt: skip
    assert (pytester.path / "saved.json").read_text() == content
    assert fake.starts == 0


CORRUPT_LATER = """
def pytest_runtest_teardown(item):
    with open("saved.json", "w") as fh:  # another process breaks the file mid-run
        fh.write('{"format_version": 1, "results": [')
"""


def test_a_file_broken_during_the_run_is_refused_at_the_end_and_kept(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    pytester.runpytest_inprocess("--specdecode-save", "saved.json", *SAVE).assert_outcomes(passed=2)
    pytester.makeconftest(CORRUPT_LATER)
    result = pytester.runpytest_inprocess(
        "--specdecode-save", "saved.json", "--specdecode-report", "report.json", *SAVE
    )
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*ERROR: save saved.json could not be written: saved run saved.json: not valid JSON*"
         "left as it is*"]
    )  # fmt: skip
    assert (pytester.path / "saved.json").read_text() == '{"format_version": 1, "results": ['
    assert len(load(pytester.path / "report.json")["results"]) == 2  # the other output is written


# --- --specdecode-update-baseline keeps each entry's environment --------------------------------


def test_an_update_of_a_subset_keeps_each_entrys_environment(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    fake.vllm_version = "0.31"
    pytester.runpytest_inprocess(*UPDATE).assert_outcomes(passed=2)
    fake.vllm_version = "0.32"
    result = pytester.runpytest_inprocess(*UPDATE, "-k", "test_a")
    result.assert_outcomes(passed=1, deselected=1)
    # test_b's entry was measured on 0.31: comparing it warns, and is refused when strict
    result = pytester.runpytest_inprocess("--specdecode-compare", "base.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*WARNING: the baseline comes from another environment: vllm 0.31 -> 0.32 "
         f"({B})"]
    )  # fmt: skip
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "base.json", "--specdecode-strict-environment"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [f"*{B}: not compared: its baseline entry was measured in another environment "
         "(vllm 0.31 -> 0.32)*"]
    )  # fmt: skip
    assert f"{A}: not compared" not in result.stdout.str()
    base = load(pytester.path / "base.json")
    assert base["environment"]["vllm"] == "0.32"  # the newest saving run's
    assert {r["nodeid"]: r["environment"]["vllm"] for r in base["results"]} == {
        A: "0.32",
        B: "0.31",
    }


def test_a_file_with_one_environment_for_all_entries_still_loads(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    """Files written before entries carried their own environment: each entry takes the
    file's, and keeps it when an update of a subset stamps the file with a new one."""
    fake.vllm_version = "0.31"
    pytester.runpytest_inprocess(*UPDATE).assert_outcomes(passed=2)
    data = json.loads((pytester.path / "base.json").read_text())
    for result in data["results"]:
        del result["environment"]
    (pytester.path / "base.json").write_text(json.dumps(data))
    fake.vllm_version = "0.32"
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "base.json", "--specdecode-strict-environment"
    )
    result.assert_outcomes(failed=2)
    pytester.runpytest_inprocess(*UPDATE, "-k", "test_a").assert_outcomes(passed=1, deselected=1)
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "base.json", "--specdecode-strict-environment"
    )
    result.assert_outcomes(passed=1, failed=1)  # test_b's entry is still from 0.31
    assert {
        k: r["environment"]["vllm"] for k, r in entries(pytester.path / "base.json").items()
    } == {
        A: "0.32",
        B: "0.31",
    }


def test_offline_compare_reads_each_entrys_environment(
    pytester: pytest.Pytester, fake: FakeSource, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.vllm_version = "0.31"
    pytester.runpytest_inprocess(*UPDATE).assert_outcomes(passed=2)
    fake.vllm_version = "0.32"
    pytester.runpytest_inprocess(*UPDATE, "-k", "test_a").assert_outcomes(passed=1, deselected=1)
    pytester.runpytest_inprocess("--specdecode-report", "new.json").assert_outcomes(passed=2)
    capsys.readouterr()
    base, new = str(pytester.path / "base.json"), str(pytester.path / "new.json")
    assert cli_main(["compare", base, new]) == 0
    out = capsys.readouterr().out
    assert f"different environments: vllm 0.31 -> 0.32 ({B})" in out
    assert cli_main(["compare", base, new, "--strict-environment"]) == 2


# --- a symbolic link is written through ---------------------------------------------------------


@pytest.mark.parametrize("option", ["save", "update"])
def test_a_symlinked_file_is_written_through(
    pytester: pytest.Pytester, fake: FakeSource, option: str
) -> None:
    (pytester.path / "store").mkdir()
    target = pytester.path / "store" / "real.json"
    link = pytester.path / "base.json"
    link.symlink_to(Path("store") / "real.json")  # dangling: the first run creates the target
    args = ("--specdecode-save", "base.json", *SAVE) if option == "save" else UPDATE
    pytester.runpytest_inprocess(*args).assert_outcomes(passed=2)
    assert link.is_symlink() and sorted(entries(target)) == [A, B]
    fake.speedup = 1.5
    pytester.runpytest_inprocess(*args, "-k", "test_b").assert_outcomes(
        **({"passed": 1} if option == "save" else {"failed": 1}), deselected=1
    )
    assert link.is_symlink() and os.readlink(link) == os.path.join("store", "real.json")
    merged = entries(target)
    assert sorted(merged) == [A, B] and merged[B]["speedup"] < 1.7
    assert sorted(p.name for p in target.parent.iterdir()) == ["real.json"]  # no lock left
    assert not (pytester.path / "base.json.lock").exists()


def test_a_symlink_whose_target_cannot_be_written_is_refused_before_any_test(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    (pytester.path / "afile").write_text("")
    (pytester.path / "base.json").symlink_to(Path("afile") / "real.json")
    result = pytester.runpytest_inprocess("--specdecode-save", "base.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--specdecode-save*cannot write 'base.json'*is a file, not a folder"]
    )
    assert fake.starts == 0 and (pytester.path / "base.json").is_symlink()
