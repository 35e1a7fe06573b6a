"""Report and baseline files: bad bytes and non-finite numbers on reading, permissions on
writing, concurrent baseline updates, terminal escapes, and the offline CLI's exit codes."""

from __future__ import annotations

import math
import multiprocessing
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode.__main__ import main as cli_main
from pytest_specdecode.baselines import files as report
from pytest_specdecode.errors import ConfigError

from ..helpers import fake_result

ESCAPES = "\x1b[2J\x1b]0;owned\x07\r\u202e"


def entry(nodeid: str = "t.py::test_a", **changes: Any) -> dict[str, Any]:
    """A fake result's entry with 20 rounds, the fewest a baseline may store."""
    data = fake_result().to_dict(with_outputs=False)
    ratios = data["ratios"]
    data.update(nodeid=nodeid, ratios=[ratios[i % len(ratios)] for i in range(20)])
    data.update(changes)
    return data


def save(path: Path, *entries: dict[str, Any], environment: Any = None) -> Path:
    report.write(path, report.build(list(entries), environment or {}, {}))
    return path


NON_UTF8 = b'{"format_version": 1, "results": [], "environment": {"device": {"name": "\xe9"}}}'


# --- reading: bytes that are not UTF-8 ---------------------------------------------------------


def test_non_utf8_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "base.json"
    path.write_bytes(NON_UTF8)
    with pytest.raises(ConfigError, match="not UTF-8") as info:
        report.load(path, "baseline file")
    assert str(info.value).startswith(f"baseline file {path}: ")
    assert "0xe9" in str(info.value)


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = save(tmp_path / "base.json", entry())
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert report.load(path)["results"][0]["nodeid"] == "t.py::test_a"


def test_non_utf8_baseline_is_a_usage_error_under_pytest(pytester: pytest.Pytester) -> None:
    (pytester.path / "base.json").write_bytes(NON_UTF8)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess("--specdecode-compare", "base.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(["*baseline file*base.json*not UTF-8*"])


@pytest.mark.parametrize("which", ["old", "new", "html"])
def test_cli_non_utf8_file_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str
) -> None:
    good = save(tmp_path / "good.json", entry())
    bad = tmp_path / "bad.json"
    bad.write_bytes(NON_UTF8)
    argv = {
        "old": ["compare", str(bad), str(good)],
        "new": ["compare", str(good), str(bad)],
        "html": ["html", str(bad), str(tmp_path / "out.html")],
    }[which]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and f"{bad}: not UTF-8" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out.html").exists()


def test_cli_unwritable_html_output_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    good = save(tmp_path / "good.json", entry())
    (tmp_path / "file").write_text("")
    assert cli_main(["html", str(good), str(tmp_path / "file" / "out.html")]) == 2
    assert "error: " in capsys.readouterr().err


# --- reading and writing: NaN and Infinity ------------------------------------------------------


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_refused_with_where(tmp_path: Path, literal: str) -> None:
    path = save(tmp_path / "base.json", entry("t.py::a"), entry("t.py::b", speedup=1.25))
    text = path.read_text()
    spot = '"speedup": 1.25'
    assert text.count(spot) == 1
    path.write_text(text.replace(spot, f'"speedup": {literal}'))
    with pytest.raises(ConfigError) as info:
        report.load(path, "baseline file")
    assert str(info.value).startswith(f"baseline file {path}: invalid at results/1/speedup: ")
    assert f"{literal} is not a finite number" in str(info.value)


def test_cli_non_finite_baseline_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = save(tmp_path / "good.json", entry())
    bad = tmp_path / "bad.json"
    bad.write_text(good.read_text().replace('"acceptance_rate": 0.75', '"acceptance_rate": NaN'))
    assert bad.read_text() != good.read_text()
    assert cli_main(["compare", str(bad), str(good)]) == 2
    assert "invalid at results/0/acceptance_rate: NaN" in capsys.readouterr().err


def test_write_refuses_non_finite_numbers(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    with pytest.raises(ValueError, match="results/0/speedup") as info:
        report.write(path, report.build([entry(speedup=math.nan)], {}, {}))
    assert str(path) in str(info.value)
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_huge_integer_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"format_version": 1, "results": [], "environment": {}, "x": ' + "9" * 5000)
    with pytest.raises(ConfigError, match="cannot be parsed as JSON"):
        report.load(path)


def _nested(levels: int) -> str:
    """A schema-valid report whose environment holds objects ``levels`` deep in all."""
    inner = "{}"
    for _ in range(levels - 2):  # the report itself and the innermost object are two
        inner = '{"a": ' + inner + "}"
    return '{"format_version": 1, "results": [], "environment": ' + inner + "}"


@pytest.mark.parametrize("levels", [report.MAX_DEPTH + 1, 900, 5000])
def test_a_file_nested_too_deeply_is_refused_naming_the_limit(tmp_path: Path, levels: int) -> None:
    """Issue 43 item 12: the loader refuses nesting no report has (which drew, copied or
    walked, would end in a RecursionError), naming the file and the limit."""
    path = tmp_path / "deep.json"
    path.write_text(_nested(levels))
    with pytest.raises(ConfigError) as info:
        report.load(path, "report file")
    assert str(info.value) == (
        f"report file {path}: nested more than {report.MAX_DEPTH} levels deep; a report "
        "pytest-specdecode writes is about 10 deep: is it one of its report files?"
    )
    path.write_text(_nested(report.MAX_DEPTH))
    assert report.load(path)["format_version"] == 1


@pytest.mark.parametrize("command", [["html", "{deep}", "page.html"],
                                     ["export", "{deep}", "--format", "bmf"],
                                     ["compare", "{deep}", "{deep}"]])  # fmt: skip
def test_cli_on_a_file_nested_too_deeply_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text(_nested(900).replace('"results": []', '"results": [' + _entry_json() + "]"))
    args = [a.format(deep=deep).replace("page.html", str(tmp_path / "page.html")) for a in command]
    assert cli_main(args) == 2
    assert f"{deep}: nested more than {report.MAX_DEPTH} levels deep" in capsys.readouterr().err
    assert not (tmp_path / "page.html").exists()


def _entry_json() -> str:
    import json

    return json.dumps(entry())


# --- writing: permissions -----------------------------------------------------------------------


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_file_gets_the_usual_mode_less_the_umask(tmp_path: Path, umask: None) -> None:
    path = save(tmp_path / "new.json", entry())
    assert mode_of(path) == 0o640  # 0o666 & ~0o027, not mkstemp's 0o600
    os.umask(0o022)
    report.atomic_write_text(tmp_path / "page.html", "<p>")
    assert mode_of(tmp_path / "page.html") == 0o644


@pytest.mark.parametrize("mode", [0o600, 0o664, 0o444])
def test_existing_file_keeps_its_mode(tmp_path: Path, umask: None, mode: int) -> None:
    path = save(tmp_path / "base.json", entry())
    path.chmod(mode)
    save(path, entry("t.py::test_b"))
    assert mode_of(path) == mode
    assert report.load(path)["results"][0]["nodeid"] == "t.py::test_b"
    assert [p.name for p in tmp_path.iterdir()] == ["base.json"]  # no temporary file left


# --- updating a baseline ------------------------------------------------------------------------


def test_update_baseline_keeps_entries_that_did_not_run(tmp_path: Path) -> None:
    path = save(tmp_path / "base.json", entry("t.py::a"), entry("t.py::b", speedup=1.5))
    data = report.update_baseline(
        path, [entry("t.py::b", speedup=3.0), entry("t.py::c")], {"vllm": "9"}, {"n": 1}
    )
    stored = report.load(path, "baseline file")
    assert stored == data
    assert [(r["nodeid"], r["speedup"]) for r in stored["results"]] == [
        ("t.py::a", 2.0),
        ("t.py::b", 3.0),
        ("t.py::c", 2.0),
    ]
    assert stored["environment"] == {"vllm": "9"} and stored["session"] == {"n": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.json"]  # lock file removed


def test_update_baseline_creates_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "base.json"
    report.update_baseline(path, [entry()], {}, {})
    assert [r["nodeid"] for r in report.load(path)["results"]] == ["t.py::test_a"]


def test_update_baseline_leaves_a_broken_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "base.json"
    path.write_text('{"format_version": 1, "results": [')
    with pytest.raises(ConfigError, match="baseline file .*base.json: not valid JSON"):
        report.update_baseline(path, [entry()], {}, {})
    assert path.read_text() == '{"format_version": 1, "results": ['


UPDATES = 15


def _update_many(path: str, prefix: str, barrier: Any) -> None:
    barrier.wait()
    for i in range(UPDATES):
        report.update_baseline(path, [entry(f"t.py::{prefix}{i}")], {}, {"writer": prefix})


def _race(path: Path, writer: Any) -> set[str]:
    """Two spawned processes run ``writer(path, prefix, barrier)`` at once (prefixes a and
    b); both must exit 0. The keys the file then holds."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    writers = [ctx.Process(target=writer, args=(str(path), p, barrier)) for p in "ab"]
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
    assert [w.exitcode for w in writers] == [0, 0]
    return {r["nodeid"] for r in report.load(path)["results"]}


def test_concurrent_updates_lose_no_entry(tmp_path: Path) -> None:
    path = save(tmp_path / "base.json", entry("t.py::kept"))
    keys = _race(path, _update_many)
    expected = {f"t.py::{p}{i}" for p in "ab" for i in range(UPDATES)} | {"t.py::kept"}
    assert keys == expected


def test_lock_is_exclusive_and_removed_on_release(tmp_path: Path) -> None:
    """(A process that waited on a lock file its holder removed takes the lock again on a new
    one: the concurrent test above exercises that on every update.)"""
    import fcntl

    path = tmp_path / "base.json"
    with report.locked(path):
        lock = tmp_path / "base.json.lock"
        assert lock.exists()
        fd = os.open(lock, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    assert not lock.exists()


def test_update_baseline_keeps_each_entrys_environment(tmp_path: Path) -> None:
    """A file from before entries carried their own environment: the kept entries take the
    file's, not the updating run's."""
    path = save(
        tmp_path / "base.json", entry("t.py::a"), entry("t.py::b"), environment={"vllm": "1"}
    )
    report.update_baseline(path, [entry("t.py::b")], {"vllm": "2"}, {})
    stored = report.load(path)
    assert stored["environment"] == {"vllm": "2"}
    assert [(r["nodeid"], r["environment"]) for r in stored["results"]] == [
        ("t.py::a", {"vllm": "1"}),
        ("t.py::b", {"vllm": "2"}),
    ]
    report.update_baseline(path, [entry("t.py::c")], {"vllm": "3"}, {})
    assert [r["environment"]["vllm"] for r in report.load(path)["results"]] == ["1", "2", "3"]


# --- saving into a file: merged, never replaced -------------------------------------------------


def _ranking(nodeid: str, n: int) -> dict[str, Any]:
    """A ranking entry as the schema takes it (no candidates), marked ``n``."""
    return {"nodeid": nodeid, "candidates": [], "n": n}


def test_save_run_replaces_only_the_entries_this_run_produced(tmp_path: Path) -> None:
    path = tmp_path / "saved.json"
    first = report.build([entry("t.py::a"), entry("t.py::b", speedup=1.5)], {"vllm": "1"}, {})
    first["rankings"] = [_ranking("t.py::s", 1), _ranking("t.py::a", 1)]
    report.save_run(path, first)
    second = report.build([entry("t.py::b", speedup=3.0), entry("t.py::c")], {"vllm": "2"}, {})
    second["rankings"] = [_ranking("t.py::a", 2)]
    derived: list[list[str]] = []

    def derive(data: dict[str, Any]) -> dict[str, Any]:
        derived.append([r["nodeid"] for r in data["results"]])
        return {**data, "checklist": []}

    written = report.save_run(path, second, derive=derive)
    stored = report.load(path)
    assert stored == written and derived == [["t.py::a", "t.py::b", "t.py::c"]]
    assert [(r["nodeid"], r["speedup"], r["environment"]) for r in stored["results"]] == [
        ("t.py::a", 2.0, {"vllm": "1"}),
        ("t.py::b", 3.0, {"vllm": "2"}),
        ("t.py::c", 2.0, {"vllm": "2"}),
    ]
    assert stored["rankings"] == [_ranking("t.py::s", 1), _ranking("t.py::a", 2)]
    assert stored["environment"] == {"vllm": "2"} and stored["checklist"] == []


@pytest.mark.parametrize(
    "content",
    [
        '{"format_version": 1, "results": [',
        '{"format_version": 2, "results": [], "environment": {}}',
        "",
    ],
)
def test_save_run_refuses_a_file_it_cannot_read_and_keeps_it(tmp_path: Path, content: str) -> None:
    path = tmp_path / "saved.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=r"saved run .*saved.json: .* -- left as it is: .*Repair"):
        report.save_run(path, report.build([entry()], {}, {}))
    assert path.read_text() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved.json"]  # lock file removed


SAVES = 12


def _save_many(path: str, prefix: str, barrier: Any) -> None:
    barrier.wait()
    for i in range(SAVES):
        report.save_run(path, report.build([entry(f"t.py::{prefix}{i}")], {}, {}))


def test_concurrent_saves_lose_no_entry(tmp_path: Path) -> None:
    path = save(tmp_path / "saved.json", entry("t.py::kept"))
    keys = _race(path, _save_many)
    assert keys == {f"t.py::{p}{i}" for p in "ab" for i in range(SAVES)} | {"t.py::kept"}


# --- symbolic links: written through ------------------------------------------------------------


def test_writes_go_through_a_symbolic_link(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    target = tmp_path / "store" / "base.json"
    middle = tmp_path / "middle.json"
    middle.symlink_to(Path("store") / "base.json")  # dangling for now, relative
    link = tmp_path / "base.json"
    link.symlink_to(middle)  # a link to a link
    report.save_run(link, report.build([entry("t.py::a")], {}, {}))
    report.update_baseline(link, [entry("t.py::b")], {}, {})
    report.atomic_write_text(tmp_path / "page.html", "<p>")  # (a plain file stays one)
    assert link.is_symlink() and middle.is_symlink()
    assert [r["nodeid"] for r in report.load(target)["results"]] == ["t.py::a", "t.py::b"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["base.json"]


def test_the_lock_of_a_symbolic_link_is_beside_its_target(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    link = tmp_path / "base.json"
    link.symlink_to(tmp_path / "store" / "real.json")
    import fcntl

    with report.locked(link):
        assert not (tmp_path / "base.json.lock").exists()
        fd = os.open(tmp_path / "store" / "real.json.lock", os.O_RDWR)
        try:  # a run that names the target waits on the same lock
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == []


def test_a_loop_of_symbolic_links_is_an_error_not_a_replaced_link(tmp_path: Path) -> None:
    (tmp_path / "a.json").symlink_to("b.json")
    (tmp_path / "b.json").symlink_to("a.json")
    with pytest.raises(OSError, match="loop of symbolic links"):
        report.atomic_write_text(tmp_path / "a.json", "{}")
    assert (tmp_path / "a.json").is_symlink()


# --- terminal escapes ---------------------------------------------------------------------------


def test_cli_prints_no_control_characters_from_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = entry(f"t.py::test_{ESCAPES}", label=ESCAPES, category=ESCAPES, notes={"n": ESCAPES})
    old = save(tmp_path / "old.json", hostile, environment={"vllm": f"1{ESCAPES}"})
    new = save(tmp_path / "new.json", hostile, environment={"vllm": "2"})
    assert cli_main(["compare", str(old), str(new)]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\x07" not in out + err and "\u202e" not in out
    assert "\\x1b[2J" in out and "\\x07" in out and "\\u202e" in out
    assert "different environments: vllm 1\\x1b[2J" in out


# --- a comparison in which nothing matches ------------------------------------------------------


def test_cli_compare_with_no_matching_test_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = save(tmp_path / "old.json", entry("tests/t.py::test_a"), entry("tests/t.py::test_b"))
    new = save(tmp_path / "new.json", entry("other/t.py::test_c"), entry("other/t.py::test_b"))
    assert cli_main(["compare", str(old), str(new)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(
        f"error: no result of the results file {new} matches one in the baseline file {old}"
    )
    assert "stored 'tests/t.py::test_b', new 'other/t.py::test_b'" in err
    assert "rootdir" in err


def test_cli_compare_with_one_match_is_not_an_error(tmp_path: Path) -> None:
    old = save(tmp_path / "old.json", entry("t.py::test_a"), entry("t.py::test_b"))
    new = save(tmp_path / "new.json", entry("t.py::test_a"), entry("t.py::test_c"))
    assert cli_main(["compare", str(old), str(new)]) == 0
    empty = save(tmp_path / "empty.json")
    # an empty baseline compares nothing: refused, not a pass (issue 43, item 3)
    assert cli_main(["compare", str(empty), str(new)]) == 2


def test_cli_alpha_out_of_range_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = save(tmp_path / "good.json", entry())
    assert cli_main(["compare", str(good), str(good), "--alpha", "nan"]) == 2
    assert "--alpha" in capsys.readouterr().err
