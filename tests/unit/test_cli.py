"""The offline CLI (``python -m pytest_specdecode``): it never writes over its own inputs, its
exit status tells a regression (1) from bad input (2) and a crash (3), it refuses impossible
tolerances, and hostile but schema-valid files render (issue 34, items 3 and 13)."""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode.__main__ import EXIT_BAD_INPUT, EXIT_CRASH, EXIT_OK, EXIT_REGRESSED
from pytest_specdecode.__main__ import main as cli_main
from pytest_specdecode.baselines import files as report

from ..helpers import fake_result

REPO = Path(__file__).resolve().parents[2]


def entry(nodeid: str = "t.py::test_a", speedup: float = 2.0, **changes: Any) -> dict[str, Any]:
    """A report entry whose 30 rounds all have the speedup ``speedup``."""
    data = fake_result().to_dict(with_outputs=False)
    ratios = [speedup * (1 + 0.01 * ((i % 5) - 2)) for i in range(30)]
    data.update(nodeid=nodeid, speedup=speedup, speedup_ci=[speedup * 0.98, speedup * 1.02],
                ratios=ratios)  # fmt: skip
    data.update(changes)
    return data


def save(path: Path, *entries: dict[str, Any], **extra: Any) -> Path:
    report.write(path, {**report.build(list(entries), {}, {}), **extra})
    return path


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process, as CI runs it."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "pytest_specdecode", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


# --- item 3: the CLI never writes over its own input ----------------------------------------


def _spellings(tmp_path: Path, name: str) -> dict[str, str]:
    """Ways to name ``tmp_path / name`` again: the same path, ./, sub/.., a symlink to it."""
    (tmp_path / "sub").mkdir(exist_ok=True)
    link = tmp_path / f"link-{name}"
    if not link.exists():
        link.symlink_to(name)
    return {"same": name, "dot": f"./{name}", "parent": f"sub/../{name}", "symlink": link.name}


COMMANDS = {
    "compare --json OLD": (["compare", "b.json", "n.json", "--json", "{out}"], "b.json", "--json"),
    "compare --json NEW": (["compare", "b.json", "n.json", "--json", "{out}"], "n.json", "--json"),
    "export --output": (["export", "b.json", "--format", "bmf", "--output", "{out}"], "b.json",
                        "--output"),
    "html OUTPUT": (["html", "b.json", "{out}"], "b.json", "OUTPUT"),
}  # fmt: skip


@pytest.mark.parametrize("spelling", ["same", "dot", "parent", "symlink"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(
    tmp_path: Path, command: str, spelling: str
) -> None:
    save(tmp_path / "b.json", entry())
    save(tmp_path / "n.json", entry(speedup=1.5))
    args, victim, option = COMMANDS[command]
    out = _spellings(tmp_path, victim)[spelling]
    before = {name: (tmp_path / name).read_bytes() for name in ("b.json", "n.json")}
    done = cli(*[a.format(out=out) for a in args], cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    assert f"error: {option} '{out}' is the " in done.stderr
    assert f"'{victim}'" in done.stderr and f"Give {option} another path" in done.stderr
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert (tmp_path / out).resolve() == (tmp_path / victim).resolve()  # still the input
    assert not (tmp_path / victim).is_symlink()


def test_an_output_beside_the_input_is_still_written(tmp_path: Path) -> None:
    save(tmp_path / "b.json", entry())
    done = cli("export", "b.json", "--format", "bmf", "--output", "sub/b.json", cwd=tmp_path)
    assert done.returncode == EXIT_OK, done.stderr
    assert json.loads((tmp_path / "sub" / "b.json").read_text())


# --- item 13: exit statuses and impossible tolerances ----------------------------------------


def test_regression_bad_input_and_crash_have_their_own_status(tmp_path: Path) -> None:
    save(tmp_path / "b.json", entry())
    save(tmp_path / "n.json", entry(speedup=1.5))
    assert cli("compare", "b.json", "b.json", cwd=tmp_path).returncode == EXIT_OK
    assert cli("compare", "b.json", "n.json", cwd=tmp_path).returncode == EXIT_REGRESSED
    assert cli("compare", "b.json", "none.json", cwd=tmp_path).returncode == EXIT_BAD_INPUT
    assert cli("compare", "b.json", cwd=tmp_path).returncode == EXIT_BAD_INPUT  # argparse
    assert (EXIT_OK, EXIT_REGRESSED, EXIT_BAD_INPUT, EXIT_CRASH) == (0, 1, 2, 3)


@pytest.mark.parametrize("command", ["compare", "html", "export"])
def test_a_crash_exits_3_naming_it_with_the_traceback(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    from pytest_specdecode.reporting import html, table
    from pytest_specdecode.run import outputs

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(table, "render_comparison", broken)
    monkeypatch.setattr(html, "render_html", broken)
    bmf = outputs.EXPORT_BY_NAME["bmf"]
    monkeypatch.setitem(outputs.EXPORT_BY_NAME, "bmf", dataclasses.replace(bmf, render=broken))
    save(tmp_path / "b.json", entry())
    args = {
        "compare": ["compare", str(tmp_path / "b.json"), str(tmp_path / "b.json")],
        "html": ["html", str(tmp_path / "b.json"), str(tmp_path / "b.html")],
        "export": ["export", str(tmp_path / "b.json"), "--format", "bmf"],
    }[command]
    assert cli_main(args) == EXIT_CRASH
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "RuntimeError: boom" in err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(
            f"internal error: {command} crashed (RuntimeError: boom); this is a bug in "
            "pytest-specdecode, not a regression (exit status 3)"
        )
    )


@pytest.mark.parametrize(
    ("fail", "message"),
    [
        ("speedup:100%", "--fail: 'speedup:100%': a relative tolerance must be below 100%"),
        ("speedup:150%", "--fail: 'speedup:150%': a relative tolerance must be below 100%"),
        ("acceptance_rate:100%", "'acceptance_rate:100%': a relative tolerance must be below"),
        ("speedup:0%", "--fail: 'speedup:0%': a tolerance must be above 0"),
        ("acceptance_rate:0%", "--fail: 'acceptance_rate:0%': a tolerance must be above 0"),
        ("speedup:2", "--fail (against b.json): speedup:2: an absolute speedup tolerance must "
                      "be below every stored speedup, and these are not above 2: t.py::test_a "
                      "(2x)"),
    ],
)  # fmt: skip
def test_an_impossible_tolerance_is_bad_input_before_comparing(
    tmp_path: Path, fail: str, message: str
) -> None:
    save(tmp_path / "b.json", entry())
    done = cli("compare", "b.json", "b.json", "--fail", fail, cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr and "speculative" not in done.stdout  # no table yet


def test_an_absolute_tolerance_below_every_stored_speedup_is_taken(tmp_path: Path) -> None:
    save(tmp_path / "b.json", entry())
    done = cli("compare", "b.json", "b.json", "--fail", "speedup:1.9", cwd=tmp_path)
    assert done.returncode == EXIT_OK, done.stderr
    assert "tolerances speedup:1.9" in done.stdout


def test_a_tiny_stored_speedup_compares_without_a_crash(tmp_path: Path) -> None:
    save(tmp_path / "tiny.json", entry(speedup=5e-324, ratios=[5e-324] * 30))
    save(tmp_path / "n.json", entry())
    done = cli("compare", "tiny.json", "n.json", cwd=tmp_path)
    assert done.returncode == EXIT_OK, done.stderr  # a rise from ~0: improved, not a crash
    assert "improved" in done.stdout and "+inf%" in done.stdout
    assert cli("compare", "n.json", "tiny.json", cwd=tmp_path).returncode == EXIT_REGRESSED


# --- item 13: html on schema-valid files that crashed it -------------------------------------


def _page(tmp_path: Path, data_file: Path) -> str:
    done = cli("html", data_file.name, "page.html", cwd=tmp_path)
    assert done.returncode == EXIT_OK, done.stderr
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "chart not drawn" not in page
    return page


def test_html_draws_a_speedup_outside_its_interval(tmp_path: Path) -> None:
    outside = entry(speedup=5.0, speedup_ci=[1.8, 2.2])
    page = _page(tmp_path, save(tmp_path / "b.json", outside))
    assert page.count("<svg") == 2 and "5.00x [1.80-2.20]" in page


def test_html_draws_labels_with_a_lone_surrogate_and_dollar_signs(tmp_path: Path) -> None:
    labels = ["s\udcff", "$x$ and $$", "costs $5 $"]
    entries = [entry(f"t.py::test_{i}", label=text) for i, text in enumerate(labels)]
    page = _page(tmp_path, save(tmp_path / "b.json", *entries))
    assert page.count("<svg") == 2
    speedup_chart = page.split("id='speedup'>", 1)[1].split("</div>", 1)[0]
    for i, text in enumerate(["s\\udcff", "$x$ and $$", "costs $5 $"]):
        # drawn as written: matplotlib puts each text in a comment before its glyphs
        assert f"<!-- test_{i} [{html.escape(text, quote=False)}] -->" in (speedup_chart), text
    assert "s\\udcff" in page.split("id='results'", 1)[1]


#: What a hostile report appends to each text below: a lone surrogate, markup, and ``$$`` (empty
#: math text, which makes matplotlib raise unless math text is off).
HOSTILE = " s\udcff<i>x</i>&'$$"
#: The texts made hostile: test ids, labels, categories, names, reasons, models, notes.
HOSTILE_KEYS = {"nodeid", "label", "category", "name", "best", "tied", "reason", "key", "model",
                "verdict_reasons", "gate_failures", "notes", "target", "draft"}  # fmt: skip


def _hostile(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _hostile(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_hostile(v, key) for v in value]
    if isinstance(value, str) and value and key in HOSTILE_KEYS:
        return value + HOSTILE
    return value


def test_html_escapes_every_text_of_a_hostile_report_where_it_is_written() -> None:
    """Issue 48 item 4: each text is escaped where its element is made (no walk over the report
    first). The recorded report, with a lone surrogate, markup and ``$`` added to its texts,
    renders every section and chart as UTF-8: the surrogate as its escape, no markup of its own,
    the config to paste with the escape too."""
    from pytest_specdecode.baselines.report import Report
    from pytest_specdecode.reporting.html import render_html

    recorded = json.loads((REPO / "docs/data/example-suites.json").read_text(encoding="utf-8"))
    page = render_html(Report.from_dict(_hostile(recorded), "hostile.json"))
    page.encode("utf-8")  # no lone surrogate anywhere, the charts' SVG included
    assert "<i>" not in page and "chart not drawn" not in page and page.count("<svg") == 8
    written = "s\\udcff&lt;i&gt;x&lt;/i&gt;&amp;&#x27;"
    for heading in ("Sweep", "Schedule check", "Under load", "Draft ranking"):
        assert re.search(f"<h2>{heading}: [^<]*{re.escape(written)}\\$\\$</h2>", page), heading
    assert re.search(f"<pre class='config'>[^<]*{re.escape('tiny-draft s' + chr(92) * 2)}", page)
    speedup_chart = page.split("id='speedup'>", 1)[1].split("</div>", 1)[0]
    assert "s\\udcff&lt;i&gt;x&lt;/i&gt;&amp;'$$] -->" in speedup_chart  # a label as drawn


def test_a_schedule_with_a_gap_says_so_in_its_table() -> None:
    """A report's sweep schedule is made again from its points (it has no gap); a schedule
    given to the table by hand may have one, and its row says so."""
    from pytest_specdecode.measure.kschedule import KSchedule
    from pytest_specdecode.reporting import table

    from ..schedule_reports import sweep_dict

    stored = sweep_dict()["schedule"]
    stored["entries"] = [[1, 1, 4], [9, 32, 0]]  # c=8 falls in no range
    rows = table.schedule_rows(KSchedule.from_dict(stored))
    assert ["in a gap", "c=8"] == rows[1][:2]


def test_a_chart_that_cannot_be_drawn_leaves_the_rest_of_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_specdecode.reporting import charts

    def broken(*args: Any) -> str:
        raise RuntimeError("no fonts")

    monkeypatch.setattr(charts, "speedup_chart", broken)
    save(tmp_path / "b.json", entry())
    assert cli_main(["html", str(tmp_path / "b.json"), str(tmp_path / "b.html")]) == EXIT_OK
    page = (tmp_path / "b.html").read_text()
    assert "<div class='chart' id='speedup'><p class='chart-error'>chart not drawn: " in page
    assert "RuntimeError: no fonts" in page
    assert page.count("<svg") == 1 and "<h2>Verdicts</h2>" in page  # acceptance still drawn


# --- issue 30: a description, one line per written file -------------------------------------


def test_help_describes_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main(["--help"])
    text = capsys.readouterr().out
    assert "without running anything: compare two runs" in text and "Exit status" in text


def test_html_and_export_say_in_one_line_what_they_wrote(tmp_path: Path) -> None:
    data = save(tmp_path / "b.json", entry())
    done = cli("html", data.name, "page.html", cwd=tmp_path)
    assert done.stdout.splitlines() == ["wrote page.html (HTML report of 1 result)"]
    done = cli("export", data.name, "--format", "bmf", "--output", "bmf.json", cwd=tmp_path)
    assert done.stdout.splitlines() == ["wrote bmf.json (bmf, 1 result)"]
    done = cli("export", data.name, "--format", "bmf", "--output", "b2.json", "-v", cwd=tmp_path)
    assert done.stdout.splitlines()[0] == "wrote b2.json (bmf, 1 result)"
    assert done.stdout.splitlines()[1].startswith("  t.py::test_a")


def test_the_page_top_names_date_models_and_flags_a_failed_check(tmp_path: Path) -> None:
    session = {"started": "2026-12-04T10:15:00+00:00"}
    from pytest_specdecode.measure.equivalence import DistributionCheck, PositionTest

    test = PositionTest(0, 1, 60.0, 1, 1e-9, [(1, 0.9)], [(2, 0.9)])
    check = DistributionCheck("t.py::test_sampling", 0.8, 20, 2, 0.01, [test]).to_dict()
    assert check["passed"] is False
    environment = {"vllm": "0.32.0", "torch": "2.13.0", "device": {"kind": "cpu", "name": "X"}}
    data = save(
        tmp_path / "b.json",
        entry(target="/home/u/models/my-target", passed=False, gate_failures=["too slow"]),
        session=session, distribution_checks=[check], environment=environment,
    )  # fmt: skip
    page = _page(tmp_path, data)
    top = page.split("<section id='summary'>", 1)[1].split("</section>", 1)[0]
    assert "<dt>run started</dt><dd>2026-12-04 10:15 UTC</dd>" in top
    assert "target my-target" in top and "/home/u" not in top
    assert "<dt>vLLM</dt><dd>0.32.0</dd>" in top and "<dt>hardware</dt><dd>X</dd>" in top
    assert "Sampling equivalence failed" in top and "expected to fail" in top
    assert "too slow" in top
    assert "<td class='yes'>worth it</td>" in page or "<td class='unknown'>" in page


def test_a_report_without_a_start_time_says_so() -> None:
    from pytest_specdecode.reporting.html import started_text

    assert started_text({}).startswith("not recorded")
    assert started_text({"started": "2026-12-04"}) == "2026-12-04"


# --- issue 43 item 17: "-" (and /dev/stdout) is standard output --------------------------------


@pytest.mark.parametrize("stdout", ["-", "/dev/stdout"])
def test_an_output_on_stdout_is_written_there_and_nothing_else(tmp_path: Path, stdout: str) -> None:
    """Each output option takes ``-`` (or /dev/stdout) for standard output, which then holds
    the document alone: what the command says goes to stderr; no file named ``-``."""
    save(tmp_path / "b.json", entry())
    save(tmp_path / "n.json", entry(speedup=1.5))
    done = cli("export", "b.json", "--format", "bmf", "--output", stdout, "-v", cwd=tmp_path)
    assert done.returncode == EXIT_OK, done.stderr
    cli("export", "b.json", "--format", "bmf", "--output", "bmf.json", cwd=tmp_path)
    assert done.stdout == (tmp_path / "bmf.json").read_text()
    done = cli("compare", "b.json", "n.json", "--json", stdout, cwd=tmp_path)
    assert done.returncode == EXIT_REGRESSED, done.stderr
    assert json.loads(done.stdout)[0]["decision"] == "regressed"
    assert "1 regressed" in done.stderr  # the tables and the summary
    done = cli("html", "b.json", stdout, "-v", cwd=tmp_path)
    assert done.returncode == EXIT_OK, done.stderr
    assert done.stdout.startswith("<!DOCTYPE html>") and done.stdout.rstrip().endswith("</html>")
    assert "wrote standard output (HTML report of 1 result)" in done.stderr
    assert not (tmp_path / "-").exists()


def test_a_pipe_or_device_is_written_into_not_replaced(tmp_path: Path) -> None:
    """A path naming a FIFO or a device (/dev/null, /dev/stderr) is written through: a
    rename would put a plain file in its place (and as root, replace /dev/null)."""
    import stat

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so that the write end opens at once
    try:
        report.atomic_write_text(fifo, "text\n")
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
        assert os.read(reader, 100) == b"text\n"
    finally:
        os.close(reader)


# --- issue 43, items 3 and 4: nothing to compare, another configuration ------------------------


def test_compare_with_no_results_on_one_side_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    save(Path("b.json"), entry())
    save(Path("empty.json"))
    for old, new, why in (
        ("empty.json", "b.json", "the baseline file empty.json holds no results"),
        ("b.json", "empty.json", "the results file empty.json holds no results"),
        ("empty.json", "empty.json", "neither the baseline file empty.json nor the results"),
    ):
        assert cli_main(["compare", old, new]) == EXIT_BAD_INPUT
        out, err = capsys.readouterr()
        assert why in err and "nothing was compared" in err and out == ""


def test_compare_names_another_configuration_and_refuses_another_method(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    save(Path("b.json"), entry())
    save(Path("k.json"), entry(num_speculative_tokens=2, max_tokens=64))
    assert cli_main(["compare", "b.json", "k.json"]) == EXIT_OK
    out = capsys.readouterr().out
    assert (
        "WARNING: the two runs are of different configurations: k 4 -> 2 (t.py::test_a); "
        "max_tokens 3 -> 64 (t.py::test_a)"
    ) in out
    save(Path("m.json"), entry(method="ngram", draft=None))
    assert cli_main(["compare", "b.json", "m.json"]) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert "t.py::test_a: method draft_model -> ngram" in err and "--allow-config-change" in err
    assert cli_main(["compare", "b.json", "m.json", "--allow-config-change"]) == EXIT_OK
    assert "method draft_model -> ngram (t.py::test_a)" in capsys.readouterr().out


def test_compare_refuses_a_baseline_of_too_few_rounds_as_the_plugin_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49: ``compare run.json run.json`` on a report of 5 rounds per result is refused
    (exit 2), as ``--specdecode-compare`` refuses it, naming the file, the result, its rounds,
    the minimum and the command that saves it again; nothing is compared."""
    monkeypatch.chdir(tmp_path)
    save(Path("run.json"), entry(), entry("t.py::test_b", ratios=[2.0] * 5))
    assert cli_main(["compare", "run.json", "run.json"]) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        "baseline file run.json: the regression rule needs at least 20 stored rounds per "
        "result (it pools the baseline's rounds); these have fewer: t.py::test_b (5 rounds). "
        "Save the baseline again, with more rounds, on the reference commit: pytest "
        "--specdecode-save run.json"
    ) in err
    assert "t.py::test_a" not in err
    # the rule pools stored rounds for the speedup only, as in the plugin
    assert cli_main(["compare", "run.json", "run.json", "--fail", "acceptance_rate:5%"]) == 0
    capsys.readouterr()
    # a results file (NEW) of few rounds is compared: the rule decides when a run may stop
    save(Path("b.json"), entry(), entry("t.py::test_b"))
    assert cli_main(["compare", "b.json", "run.json"]) == EXIT_OK


def test_compare_refuses_a_file_holding_two_results_under_one_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 2: an older baseline that two benches of one name saved into cannot be compared
    (each new result would match the last of the two)."""
    monkeypatch.chdir(tmp_path)
    save(Path("twice.json"), entry(), entry(speedup=3.0))
    save(Path("n.json"), entry(speedup=2.2))
    assert cli_main(["compare", "twice.json", "n.json"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "baseline file twice.json: holds 2 results under the key 't.py::test_a'" in err
    assert cli_main(["compare", "n.json", "twice.json"]) == EXIT_BAD_INPUT
    assert "results file twice.json: holds 2 results" in capsys.readouterr().err
