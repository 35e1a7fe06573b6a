"""Saved runs, baselines and CI outputs through pytester, with the engines faked.

The engines are a simulated backend (``tests.fakes.FakeSource``, through the
``pytest_specdecode_engine_source`` hook), so these tests exercise the plugin's whole measurement
and comparison path in a fraction of a second.
The same flow on real engines is in ``test_e2e_compare.py``.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import jsonschema
import pytest

from pytest_specdecode.__main__ import main as cli_main
from pytest_specdecode.baselines.files import load, results_schema

from ..fakes import FakeSource, use_fake

SUITE = """
import pytest
from pytest_specdecode import assert_speedup

SPEC = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}

@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_a(specdecode):
    specdecode.run(["p1", "p2"], max_tokens=4)

@pytest.mark.specdecode("creative", target="org/target", speculative_config=SPEC)
def test_b(specdecode):
    specdecode.run(["p1", "p2"], max_tokens=4, temperature=0.8)
"""


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester) -> FakeSource:
    engines = use_fake(pytester, monkeypatch)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makepyfile(test_suite=SUITE)
    return engines


def test_same_configuration_passes_against_its_saved_run(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    result = pytester.runpytest_inprocess("--specdecode-save", "base.json")
    result.assert_outcomes(passed=2)
    saved = json.loads((pytester.path / "base.json").read_text())
    assert [r["nodeid"] for r in saved["results"]] == [
        "test_suite.py::test_a",
        "test_suite.py::test_b",
    ]
    # a saving run sized by its noise (--specdecode-baseline-trials auto, the default): the
    # quiet fake's first look, after 20 rounds, sees a drop of twice the tolerance
    assert len(saved["results"][0]["samples"]["acceptance_rate"]) == 20
    assert saved["results"][0]["compared_rounds"] == 20
    detectable = saved["results"][0]["detectable"]["speedup"]
    assert 0.05 < detectable["drop"] < 0.10 and detectable["designed"] == 0.10
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "base.json", "--specdecode-report", "new.json"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*comparison with the baseline*"])
    assert "REGRESSED" not in result.stdout.str()
    # the regression rule decides when the compared run stops: an unchanged, calm run at once
    new = json.loads((pytester.path / "new.json").read_text())["results"]
    assert [r["trials"] for r in new] == [3, 3]


def test_a_baseline_with_too_few_rounds_is_refused(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    pytester.runpytest_inprocess("--specdecode-save", "base.json").assert_outcomes(passed=2)
    data = json.loads((pytester.path / "base.json").read_text())
    data["results"][1]["ratios"] = data["results"][1]["ratios"][:5]
    (pytester.path / "base.json").write_text(json.dumps(data))
    result = pytester.runpytest_inprocess("--specdecode-compare", "base.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*--specdecode-compare base.json: the regression rule needs at least 20 stored rounds "
        "per result*these have fewer: test_suite.py::test_b (5 rounds). Save the baseline "
        "again, with more rounds, on the reference commit: pytest --specdecode-save base.json*"
    ])  # fmt: skip
    result = pytester.runpytest_inprocess(
        "--specdecode-save", "b.json", "--specdecode-baseline-trials", "10"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--specdecode-baseline-trials: a baseline needs at least 20 rounds*"]
    )


def test_regression_fails_the_test_with_stored_and_new_figures(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    pytester.runpytest_inprocess("--specdecode-save", "base.json").assert_outcomes(passed=2)
    fake.speedup, fake.acceptance = 1.5, 0.5
    result = pytester.runpytest_inprocess("--specdecode-compare", "base.json")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*regression: test_suite.py::test_a: speedup regressed: stored [12].9*, now 1.[45]* "
        "(-2*%); tolerance speedup:5%, p=*",
        "*regression: test_suite.py::test_a: acceptance_rate regressed: stored 0.[78]*, "
        "now 0.[45]*",
        "*REGRESSED*",
    ])  # fmt: skip
    # the stored file is untouched by a comparison
    assert json.loads((pytester.path / "base.json").read_text())["results"][0]["speedup"] > 1.9


def test_tolerance_option_and_improvement_hint(pytester: pytest.Pytester, fake: FakeSource) -> None:
    pytester.runpytest_inprocess("--specdecode-save", "base.json")
    fake.speedup = 1.8
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "base.json", "--specdecode-compare-fail", "speedup:15%"
    )
    result.assert_outcomes(passed=2)
    fake.speedup = 3.0
    result = pytester.runpytest_inprocess("--specdecode-compare", "base.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*improved*", "*refresh the baseline with --specdecode-update-baseline*"]
    )


def test_new_and_missing_tests_are_reported(pytester: pytest.Pytester, fake: FakeSource) -> None:
    pytester.runpytest_inprocess("--specdecode-save", "base.json", "-k", "test_a")
    result = pytester.runpytest_inprocess("--specdecode-compare", "base.json", "-k", "test_b")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*test_b*new*", "*missing from this run: test_suite.py::test_a*"])


def test_compared_report_lists_every_comparison(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    pytester.runpytest_inprocess("--specdecode-save", "base.json").assert_outcomes(passed=2)
    stored = {
        r["nodeid"]: r for r in json.loads((pytester.path / "base.json").read_text())["results"]
    }
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "base.json", "--specdecode-report", "same.json"
    )
    result.assert_outcomes(passed=2)
    report = load(pytester.path / "same.json")  # validated against the schema
    assert [(c["key"], c["figure"], c["decision"]) for c in report["comparisons"]] == [
        ("test_suite.py::test_a", "speedup", "unchanged"),
        ("test_suite.py::test_a", "acceptance_rate", "unchanged"),
        ("test_suite.py::test_b", "speedup", "unchanged"),
        ("test_suite.py::test_b", "acceptance_rate", "unchanged"),
    ]
    first = report["comparisons"][0]
    assert first["stored"] == stored["test_suite.py::test_a"]["speedup"]
    assert first["new"] == report["results"][0]["speedup"]
    assert first["tolerance"] == "5%" and first["rounds"] == report["results"][0]["trials"]
    fake.speedup, fake.acceptance = 1.5, 0.5
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "base.json", "--specdecode-report", "worse.json", "-k", "test_a"
    )
    result.assert_outcomes(failed=1, deselected=1)
    comparisons = load(pytester.path / "worse.json")["comparisons"]
    assert [(c["key"], c["figure"], c["decision"]) for c in comparisons] == [
        ("test_suite.py::test_a", "speedup", "regressed"),
        ("test_suite.py::test_a", "acceptance_rate", "regressed"),
        ("test_suite.py::test_b", None, "missing"),
    ]
    assert comparisons[0]["change"] == pytest.approx(-0.25, abs=0.05)
    # a run that compares nothing has no comparisons
    pytester.runpytest_inprocess("--specdecode-report", "plain.json")
    assert "comparisons" not in load(pytester.path / "plain.json")


def test_update_baseline_rewrites_only_tests_that_ran(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "base.json", "--specdecode-update-baseline"
    )
    result.assert_outcomes(passed=2)
    before = json.loads((pytester.path / "base.json").read_text())["results"]
    fake.speedup = 1.2
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "base.json", "--specdecode-update-baseline", "-k", "test_b"
    )
    result.assert_outcomes(failed=1, deselected=1)
    after = {
        r["nodeid"]: r for r in json.loads((pytester.path / "base.json").read_text())["results"]
    }
    assert after["test_suite.py::test_a"]["speedup"] == before[0]["speedup"]
    assert after["test_suite.py::test_b"]["speedup"] < 1.3


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"format_version": 1, "results": [', "not valid JSON*looks truncated"),
        (
            '{"format_version": 7, "results": [], "environment": {}}',
            "format_version 7 is not supported",
        ),
        (
            '{"format_version": 1, "results": [{"nodeid": "x"}], "environment": {}}',
            "invalid at results/0*",
        ),
    ],
)
def test_bad_baseline_file_is_a_clear_error(
    pytester: pytest.Pytester, fake: FakeSource, content: str, message: str
) -> None:
    (pytester.path / "base.json").write_text(content)
    result = pytester.runpytest_inprocess("--specdecode-compare", "base.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*baseline file base.json: {message}*"])
    assert (pytester.path / "base.json").read_text() == content


def test_missing_baseline_file(pytester: pytest.Pytester, fake: FakeSource) -> None:
    result = pytester.runpytest_inprocess("--specdecode-compare", "nope.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*baseline file nope.json: cannot be read*"])


def test_environment_change_warns_or_errors(pytester: pytest.Pytester, fake: FakeSource) -> None:
    pytester.runpytest_inprocess("--specdecode-save", "base.json")
    data = json.loads((pytester.path / "base.json").read_text())
    for result in data["results"]:  # each entry holds the environment it was measured in
        result["environment"]["device"] = {"kind": "gpu", "name": "NVIDIA H100", "gpus": []}
    (pytester.path / "base.json").write_text(json.dumps(data))
    result = pytester.runpytest_inprocess("--specdecode-compare", "base.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*WARNING: *another environment: device NVIDIA H100 -> *"])
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "base.json", "--specdecode-strict-environment"
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["*not compared: its baseline entry was measured in another environment*"]
    )


def test_junit_properties_and_github_summary(
    pytester: pytest.Pytester, fake: FakeSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest_inprocess("--junitxml", "junit.xml")
    result.assert_outcomes(passed=2)
    tree = ET.parse(pytester.path / "junit.xml")
    props = {p.get("name"): p.get("value") for p in tree.iter("property")}
    assert float(props["specdecode.speedup"]) == pytest.approx(2.0, rel=0.1)
    assert props["specdecode.category"] in ("structured", "creative")
    text = summary.read_text()
    assert text.startswith("## Speculative decoding")
    assert "| test " in text and "test_a" in text


def test_cli_compare_prints_the_same_verdicts(
    pytester: pytest.Pytester, fake: FakeSource, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.runpytest_inprocess("--specdecode-save", "old.json")
    fake.speedup = 1.5
    pytester.runpytest_inprocess("--specdecode-save", "new.json")
    capsys.readouterr()
    code = cli_main(["compare", str(pytester.path / "old.json"), str(pytester.path / "new.json")])
    out = capsys.readouterr().out
    assert code == 1
    assert "REGRESSED" in out and "speedup" in out
    assert "2 regressed, 0 improved, 0 new, 0 missing" in out
    assert (
        cli_main(["compare", str(pytester.path / "old.json"), str(pytester.path / "old.json")]) == 0
    )
    out_json = pytester.path / "verdicts.json"
    args = ["compare", str(pytester.path / "old.json"), str(pytester.path / "new.json")]
    assert cli_main([*args, "--json", str(out_json)]) == 1
    entries = json.loads(out_json.read_text())
    assert [(e["figure"], e["decision"]) for e in entries] == [
        ("speedup", "regressed"), ("acceptance_rate", "unchanged")
    ] * 2  # fmt: skip
    schema = results_schema()
    for entry in entries:
        jsonschema.validate(entry, {**schema, **schema["$defs"]["comparison"]})
    capsys.readouterr()
    assert cli_main([*args, "--json", str(pytester.path / "old.json" / "v.json")]) == 2
    assert "old.json/v.json: cannot be written" in capsys.readouterr().err
    (pytester.path / "bad.json").write_text("{")
    assert (
        cli_main(["compare", str(pytester.path / "bad.json"), str(pytester.path / "old.json")]) == 2
    )
    assert "baseline file" in capsys.readouterr().err


def test_theory_figures_in_report(pytester: pytest.Pytester, fake: FakeSource) -> None:
    result = pytester.runpytest_inprocess("--specdecode-report", "r.json")
    result.assert_outcomes(passed=2)
    entry = json.loads((pytester.path / "r.json").read_text())["results"][0]
    assert entry["cost_ratio"] == pytest.approx(0.1, rel=0.05)  # from inside the engine
    assert 0.5 < entry["alpha"] <= 1.0
    assert entry["predicted_speedup"] > 1 and entry["efficiency"] > 0
    assert entry["phases"]["speculative"]["decode"]["draft_ms"] > 0
    assert fake.starts == 2  # the pair only: no draft model timed alone
    pytester.runpytest_inprocess("--specdecode-cost-ratio", "off", "--specdecode-report", "r.json")
    entry = json.loads((pytester.path / "r.json").read_text())["results"][0]
    assert entry["cost_ratio"] is None and entry["efficiency"] is None


ADAPTIVE = """
import pytest
from pytest_specdecode import assert_speedup

SPEC = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}

@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC,
                        min_speedup=1.5, trials="auto")
def test_gate_on_marker(specdecode):
    specdecode.run(["p1"], max_tokens=4)
"""


def test_adaptive_trials_stop_once_decisive(pytester: pytest.Pytester, fake: FakeSource) -> None:
    pytester.makepyfile(test_suite=ADAPTIVE)
    result = pytester.runpytest_inprocess("--specdecode-report", "r.json")
    result.assert_outcomes(passed=1)
    entry = json.loads((pytester.path / "r.json").read_text())["results"][0]
    assert entry["adaptive"] is True and entry["trials"] == 3  # 2.0x against 1.5x: clear at once
    assert entry["inconclusive"] == ""


def test_adaptive_trials_report_inconclusive_not_a_coin_flip(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    fake.speedup, fake.noise = 1.5, 0.3
    pytester.makepyfile(test_suite=ADAPTIVE)
    result = pytester.runpytest_inprocess(
        "--specdecode-max-trials", "6", "--specdecode-report", "r.json", "-rs"
    )
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*inconclusive: *cannot be told from the minimum 1.50x*"])
    entry = json.loads((pytester.path / "r.json").read_text())["results"][0]
    assert entry["trials"] == 6 and entry["passed"] is None
    assert "still contains 1.50x" in entry["inconclusive"]
    result.stdout.fnmatch_lines(["*test_gate_on_marker*inconclusive*"])


SWEEP = """
import pytest

SPEC = {"method": "ngram", "num_speculative_tokens": 4}

@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_sweep(specdecode):
    sweep = specdecode.sweep(["p1", "p2"], max_tokens=4, num_speculative_tokens=[1, 2, 4],
                             concurrency=[1, 8, 32])
    assert len(sweep.points) == 9
    assert sweep.best_k()[1][0] == 4 and sweep.best_k()[32][0] == 1
    assert sweep.crossover() == 32
"""


def test_sweep_names_best_k_and_crossover(pytester: pytest.Pytester, fake: FakeSource) -> None:
    # more k pays at low concurrency, costs at high concurrency; all slower at 32
    fake.speedup_fn = lambda k, c: {1: 1.2 + 0.2 * k, 8: 1.6 - 0.15 * k, 32: 0.9 - 0.1 * k}[c]
    pytester.makepyfile(test_suite=SWEEP)
    result = pytester.runpytest_inprocess(
        "--specdecode-report", "r.json", "--specdecode-trials", "3"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*test_sweep [[]k=1 c=1]*", "*test_sweep [[]k=4 c=32]*",
        "sweep *test_sweep: best k per concurrency: c=1: k=4 (2.0*x), c=8: k=1 (1.4*x), "
        "c=32: k=1 (0.[78]*x); speedup's interval drops below 1.0 at concurrency 32",
    ])  # fmt: skip
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["sweeps"][0]["crossover"] == 32
    assert len(report["results"]) == 9
    assert {r["verdict"] for r in report["results"]} == {"worth it", "not worth it"}


def test_saving_into_the_same_file_measures_the_variance_between_sessions(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    """Each save into one file adds a session per result; from three on, the regression rule
    adds their spread to its standard error. A new environment starts the history again."""
    for shift in (1.0, 1.1, 0.9):
        fake.speedup = 2.0 * shift
        pytester.runpytest_inprocess("--specdecode-save", "base.json").assert_outcomes(passed=2)
    saved = json.loads((pytester.path / "base.json").read_text())["results"]
    sessions = saved[0]["sessions"]
    assert len(sessions) == 3 and [s["rounds"] for s in sessions] == [20, 20, 20]
    assert [round(s["mean_log_ratio"], 1) for s in sessions] == [0.7, 0.8, 0.6]
    from pytest_specdecode.baselines.compare import reference_of
    from pytest_specdecode.baselines.report import ReportEntry

    reference = reference_of(ReportEntry.from_dict(saved[0]))
    assert reference.sessions == 3 and reference.session_var > 0.005
    # a wandering machine: an 11% drop is within what sessions differ by, so it passes
    fake.speedup = 1.6
    result = pytester.runpytest_inprocess("--specdecode-compare", "base.json")
    result.assert_outcomes(passed=2)


# --- issue 43 ----------------------------------------------------------------------------------

FAILS_BEFORE_MEASURING = """
import pytest

SPEC = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}

@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_a(specdecode):
    raise RuntimeError("the engine's counters restarted")
"""


def test_an_empty_baseline_or_a_run_that_measured_nothing_fails_the_comparison(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    """Item 3: nothing compared is not a pass."""
    (pytester.path / "empty.json").write_text(
        '{"format_version": 1, "results": [], "environment": {}}'
    )
    result = pytester.runpytest_inprocess("--specdecode-compare", "empty.json")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*ERROR: the baseline empty.json holds no results*"])
    assert pytester.runpytest_inprocess("--specdecode-save", "base.json").ret == 0
    pytester.makepyfile(test_suite=FAILS_BEFORE_MEASURING)
    result = pytester.runpytest_inprocess("--specdecode-compare", "base.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ERROR: this run holds no results, so nothing was compared*"])


def test_a_baseline_of_another_method_fails_unless_the_change_is_intended(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    """Item 4."""
    assert pytester.runpytest_inprocess("--specdecode-save", "base.json").ret == 0
    pytester.makepyfile(test_suite=SUITE.replace('"max_tokens=4"', "").replace(
        '{"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}',
        '{"method": "ngram", "num_speculative_tokens": 4}',
    ))  # fmt: skip
    result = pytester.runpytest_inprocess("--specdecode-compare", "base.json")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*test_a: not compared: its baseline entry is of another configuration (method "
        "draft_model -> ngram)*give --specdecode-allow-config-change if the change is intended",
    ])  # fmt: skip
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "base.json", "--specdecode-allow-config-change"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*another configuration*method draft_model -> ngram*"])


def test_a_run_that_measured_nothing_replaces_a_stale_report(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    """Item 9: the report says nothing was measured; the one from an earlier run is gone."""
    assert pytester.runpytest_inprocess("--specdecode-report", "rep.json").ret == 0
    pytester.makepyfile(test_suite=FAILS_BEFORE_MEASURING)
    result = pytester.runpytest_inprocess("--specdecode-report", "rep.json")
    result.assert_outcomes(failed=1)
    report = load(pytester.path / "rep.json")
    assert report["results"] == [] and report["session"]["nothing_measured"]
    result.stdout.fnmatch_lines(["*WARNING: nothing was measured*", "results written to rep.json"])
