"""Hostile labels, settings and CI environments through pytester, with the engines faked
(issue 34, items 6, 11, 12 and 13): every output is written and reads as given, whatever the
label holds, whichever other plugin fails, and wherever ``$GITHUB_STEP_SUMMARY`` points."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from ..fakes import FakeSource, use_fake

# imported here, before any in-process pytester run, so that its module snapshot keeps it
pytest.importorskip("matplotlib.pyplot")

#: Labels that broke an output: a lone surrogate (pytest's JUnit writer), ``|`` and HTML (the
#: GitHub step summary), ``$`` (matplotlib's math text).
LABELS = {"surrogate": "s\\udcff", "pipe": "a|b", "markup": "<b>bold</b>", "math": "$x$ and $$"}

SUITE = """
import pytest

SPEC = {{"method": "ngram", "num_speculative_tokens": 4}}

@pytest.mark.parametrize("which", {which!r})
@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_run(specdecode, which):
    specdecode.run(["p1", "p2"], max_tokens=4, label={labels}[which])
"""


def suite(*which: str) -> str:
    labels = "{" + ", ".join(f'"{k}": "{LABELS[k]}"' for k in which) + "}"
    return SUITE.format(which=list(which), labels=labels)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester) -> FakeSource:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return use_fake(pytester, monkeypatch)


# --- item 6: one output's failure does not stop the others ----------------------------------


def test_a_lone_surrogate_label_with_junitxml_writes_every_output(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    pytester.makepyfile(test_suite=suite("surrogate"))
    result = pytester.runpytest_inprocess(
        "--junitxml", "junit.xml", "--specdecode-report", "r.json", "--specdecode-html", "r.html"
    )
    assert result.ret == pytest.ExitCode.OK
    report = json.loads((pytester.path / "r.json").read_text())
    assert [r["label"] for r in report["results"]] == ["s\udcff"]  # kept as measured
    names = {p.get("name") for p in ET.parse(pytester.path / "junit.xml").iter("property")}
    assert "specdecode[s\\udcff].speedup" in names  # the escape, not the surrogate
    assert "s\\udcff" in (pytester.path / "r.html").read_text(encoding="utf-8")


FAILING_SESSIONFINISH = """
import pytest

class Failing:
    def pytest_sessionfinish(self, session):
        raise RuntimeError("another plugin's writer failed")

def pytest_configure(config):
    config.pluginmanager.register(Failing(), "failing-writer")  # registered last: runs first
"""


def test_another_plugins_failing_session_finish_costs_no_file(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    pytester.makepyfile(test_suite=suite("pipe"))
    pytester.makeconftest(FAILING_SESSIONFINISH)
    pytester.runpytest_inprocess("--specdecode-report", "r.json", "--specdecode-save", "s.json")
    for name in ("r.json", "s.json"):
        assert len(json.loads((pytester.path / name).read_text())["results"]) == 1, name


# --- item 11: the GitHub step summary -------------------------------------------------------


def test_the_step_summary_escapes_pipes_html_and_dollars(
    pytester: pytest.Pytester, fake: FakeSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(test_suite=suite("pipe", "markup", "math"))
    pytester.runpytest_inprocess().assert_outcomes(passed=3)
    lines = [line for line in summary.read_text().splitlines() if line.startswith("| test_run")]
    assert [line.split(" | ")[0].rstrip() for line in lines] == [
        "| test_run[pipe] [a\\|b]",
        "| test_run[markup] [&lt;b&gt;bold&lt;/b&gt;]",
        "| test_run[math] [\\$x\\$ and \\$\\$]",
    ]
    header = summary.read_text().splitlines()[2]
    speedup_column = [c.strip() for c in header.split("|")].index("speedup [95% CI]")
    for line in lines:  # every row has as many columns as the header, the speedup in place
        cells = [c.strip() for c in line.replace("\\|", "/").split("|")]
        assert len(cells) == len(header.split("|"))
        assert cells[speedup_column].endswith("]") and "x [" in cells[speedup_column]


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_an_unwritable_step_summary_is_a_warning_not_a_failure(
    pytester: pytest.Pytester, fake: FakeSource, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    path = pytester.path / ("no/such/folder/summary.md" if where == "missing folder" else "dir")
    if where == "a folder":
        path.mkdir()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    pytester.makepyfile(test_suite=suite("pipe"))
    result = pytester.runpytest_inprocess("--specdecode-report", "r.json")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [f"WARNING: the GitHub step summary was not written: $GITHUB_STEP_SUMMARY={path} "
         "cannot be appended to (*)"]
    )  # fmt: skip
    assert "Traceback" not in result.stdout.str()
    assert (pytester.path / "r.json").exists()


# --- item 12: chart labels are drawn as written ---------------------------------------------


def test_dollar_signs_in_labels_are_drawn_and_the_page_written(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    pytester.makepyfile(test_suite=suite("math", "markup"))
    result = pytester.runpytest_inprocess("--specdecode-html", "r.html")
    assert result.ret == pytest.ExitCode.OK
    page = (pytester.path / "r.html").read_text()
    assert "chart not drawn" not in page and page.count("<svg") == 2
    # matplotlib writes each text as a comment before its glyphs: the dollars are all there
    assert "<!-- test_run[math] [$x$ and $$] -->" in page


# --- item 13: impossible tolerances are refused before anything runs ------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--specdecode-compare-fail", "speedup:100%"],
         "*--specdecode-compare-fail: 'speedup:100%': a relative tolerance must be below 100%*"),
        (["-o", "specdecode_compare_fail=speedup:5%,match_rate:120%"],
         "*ini specdecode_compare_fail: 'match_rate:120%': a relative tolerance must be below*"),
        (["--specdecode-save", "base.json", "--specdecode-compare-fail", "speedup:0%"],
         "*--specdecode-compare-fail: 'speedup:0%': a tolerance must be above 0*"),
        (["--specdecode-compare", "base.json", "--specdecode-compare-fail", "speedup:2.5"],
         "*--specdecode-compare-fail (against the baseline base.json): speedup:2.5: an absolute "
         "speedup tolerance must be below every stored speedup, and these are not above 2.5: "
         "test_suite.py::test_run?pipe??a|b? (*x)*"),
    ],
)  # fmt: skip
def test_an_impossible_tolerance_is_a_usage_error_before_any_round(
    pytester: pytest.Pytester, fake: FakeSource, args: list[str], message: str
) -> None:
    pytester.makepyfile(test_suite=suite("pipe"))
    pytester.runpytest_inprocess("--specdecode-save", "base.json").assert_outcomes(passed=1)
    rounds = fake.rounds
    result = pytester.runpytest_inprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert fake.rounds == rounds  # nothing measured


def test_an_absolute_tolerance_below_the_stored_speedups_compares(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    pytester.makepyfile(test_suite=suite("pipe"))
    pytester.runpytest_inprocess("--specdecode-save", "base.json").assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "base.json", "--specdecode-compare-fail", "speedup:0.5"
    )
    result.assert_outcomes(passed=1)
    assert "math domain error" not in result.stdout.str()
