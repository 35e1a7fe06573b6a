"""``python -m pytest_specdecode export``: a report's figures as Bencher Metric Format and as
github-action-benchmark's ``customBiggerIsBetter`` list, checked against their documented
shapes."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import jsonschema
import pytest

from pytest_specdecode.__main__ import main as cli_main
from pytest_specdecode.baselines.compare import result_key
from pytest_specdecode.baselines.report import Report, ReportEntry
from pytest_specdecode.measure.phases import PhaseSummary
from pytest_specdecode.reporting.export import (
    benchmark_name,
    bmf,
    github_action_benchmark,
    github_action_benchmark_smaller,
)

from ..fakes import FakeSource, use_fake
from ..helpers import fake_result

#: Bencher Metric Format as bencher.dev documents it (reference/bencher-metric-format), with
#: the measures this export writes named.
BMF_SCHEMA = {
    "type": "object",
    "minProperties": 1,
    "additionalProperties": {
        "type": "object",
        "minProperties": 1,
        "propertyNames": {
            "enum": [
                "speedup",
                "acceptance-rate",
                "mean-acceptance-length",
                "baseline-tokens-per-second",
                "speculative-tokens-per-second",
                "tpot-speedup",
                "baseline-tpot-p50-ms",
                "speculative-tpot-p50-ms",
                "baseline-goodput",
                "speculative-goodput",
                "scheduled-speedup",
                "fixed-speedup",
                "break-even-length",
                "draft-share",
                "verify-cost",
            ]
        },  # fmt: skip
        "additionalProperties": {
            "type": "object",
            "properties": {
                "value": {"type": "number"},
                "lower_value": {"type": "number"},
                "upper_value": {"type": "number"},
            },
            "required": ["value"],
            "additionalProperties": False,
        },
    },
}

#: github-action-benchmark's custom tools (customBiggerIsBetter): a list of
#: {"name", "unit", "value"} with optional "range" and "extra" strings.
GAB_SCHEMA = {
    "type": "array",
    "minItems": 1,
    "items": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "unit": {"type": "string"},
            "value": {"type": "number"},
            "range": {"type": "string"},
            "extra": {"type": "string"},
        },
        "required": ["name", "unit", "value"],
        "additionalProperties": False,
    },
}


def _result(nodeid: str, label: str = "", **figures: Any) -> ReportEntry:
    """A report entry with these figures (``phases`` as a dict), the rest a fake result's."""
    result = fake_result()
    phases = figures.pop("phases", None)
    figures = {
        "speedup": 2.0, "speedup_ci": (1.8, 2.2), "acceptance_rate": 0.75,
        "mean_acceptance_length": 3.5, **figures,
    }  # fmt: skip
    return ReportEntry(replace(
        result, nodeid=nodeid, label=label,
        baseline=replace(result.baseline, tokens_per_second=10.0),
        speculative=replace(result.speculative, tokens_per_second=20.0),
        phases=None if phases is None else PhaseSummary.from_dict(phases), **figures,
    ))  # fmt: skip


def _report(*results: ReportEntry, **products: Any) -> Report:
    return Report(results=results, environment={}, **products)


NAN = math.nan
REPORT = _report(
    _result("t.py::test_a"),
    _result("t.py::test_a", "batch 8", speedup_ci=(NAN, NAN), acceptance_rate=NAN),
    _result("t.py::test_b", speedup=NAN, mean_acceptance_length=NAN),
)


def test_bmf_has_every_measure_and_the_speedup_interval() -> None:
    out = bmf(REPORT)
    jsonschema.validate(out, BMF_SCHEMA)
    assert out["t.py::test_a"] == {
        "speedup": {"value": 2.0, "lower_value": 1.8, "upper_value": 2.2},
        "acceptance-rate": {"value": 0.75},
        "mean-acceptance-length": {"value": 3.5},
        "baseline-tokens-per-second": {"value": 10.0},
        "speculative-tokens-per-second": {"value": 20.0},
    }
    # no interval, no bounds; a figure not measured (null, NaN) is left out
    labelled = out["t.py::test_a[batch 8]"]
    assert labelled["speedup"] == {"value": 2.0} and "acceptance-rate" not in labelled
    assert set(out["t.py::test_b"]) == {
        "acceptance-rate", "baseline-tokens-per-second", "speculative-tokens-per-second"
    }  # fmt: skip
    json.dumps(out, allow_nan=False)


def test_github_action_benchmark_lists_each_speedup() -> None:
    out = github_action_benchmark(REPORT)
    jsonschema.validate(out, GAB_SCHEMA)
    assert out == [
        {
            "name": "t.py::test_a speedup",
            "unit": "x",
            "value": 2.0,
            "range": "95% CI 1.800-2.200",
            "extra": "acceptance rate 0.750; mean acceptance length 3.50; baseline tok/s 10.0; "
            "speculative tok/s 20.0",
        },
        {
            "name": "t.py::test_a[batch 8] speedup",
            "unit": "x",
            "value": 2.0,
            "extra": "mean acceptance length 3.50; baseline tok/s 10.0; speculative tok/s 20.0",
        },
    ]  # test_b has no speedup: no entry


def test_benchmark_names_are_the_result_keys() -> None:
    for result in REPORT.results:
        assert benchmark_name(result) == result_key(result) == benchmark_name(result.result)


SUITE = """
import pytest

SPEC = {"method": "ngram", "num_speculative_tokens": 4}

@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_a(specdecode):
    specdecode.run(["p1"], max_tokens=4)
    specdecode.run(["p1"], max_tokens=4, concurrency=2, label="batch 2")
"""


@pytest.fixture
def report(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> str:
    """A report written by the plugin (on the fake engines)."""
    use_fake(pytester, monkeypatch, FakeSource())
    pytester.makepyfile(test_suite=SUITE)
    pytester.runpytest_inprocess("--specdecode-report", "r.json").assert_outcomes(passed=1)
    return str(pytester.path / "r.json")


def _strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_cli_export_writes_both_formats(
    report: str, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["export", report, "--format", "bmf"]) == 0
    out = _strict_json(capsys.readouterr().out)  # stdout by default, nothing else on it
    jsonschema.validate(out, BMF_SCHEMA)
    assert sorted(out) == ["test_suite.py::test_a", "test_suite.py::test_a[batch 2]"]
    data = json.loads(open(report).read())
    speedup = out["test_suite.py::test_a"]["speedup"]
    assert speedup["value"] == data["results"][0]["speedup"]
    assert [speedup["lower_value"], speedup["upper_value"]] == data["results"][0]["speedup_ci"]
    target = pytester.path / "out" / "gab.json"
    code = cli_main(
        ["export", report, "--format", "github-action-benchmark", "--output", str(target)]
    )
    assert code == 0
    assert f"wrote {target}" in capsys.readouterr().out
    entries = _strict_json(target.read_text())
    jsonschema.validate(entries, GAB_SCHEMA)
    assert [e["name"] for e in entries] == [
        "test_suite.py::test_a speedup", "test_suite.py::test_a[batch 2] speedup"
    ]  # fmt: skip
    assert all(math.isfinite(e["value"]) and e["range"].startswith("95% CI ") for e in entries)


def test_csv_holds_the_bmf_figures_one_line_each(
    report: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import csv

    assert cli_main(["export", report, "--format", "bmf"]) == 0
    bmf = json.loads(capsys.readouterr().out)
    assert cli_main(["export", report, "--format", "csv"]) == 0
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert len(rows) == sum(len(m) for m in bmf.values())
    for row in rows:
        figures = bmf[row["benchmark"]][row["measure"]]
        assert float(row["value"]) == figures["value"]
        for end in ("lower_value", "upper_value"):
            assert row[end] == ("" if end not in figures else repr(figures[end]))
    speedups = [r for r in rows if r["measure"] == "speedup"]
    assert speedups and all(r["lower_value"] for r in speedups)


def test_cli_export_bad_input_exits_2_naming_it(
    report: str, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(pytester.path / "nope.json")
    assert cli_main(["export", missing, "--format", "bmf"]) == 2
    assert f"report file {missing}: cannot be read" in capsys.readouterr().err
    (pytester.path / "bad.json").write_text('{"format_version": 1, "results": [')
    assert cli_main(["export", str(pytester.path / "bad.json"), "--format", "bmf"]) == 2
    assert "bad.json: not valid JSON" in capsys.readouterr().err
    empty = pytester.path / "empty.json"
    empty.write_text('{"format_version": 1, "results": [], "environment": {}}')
    assert cli_main(["export", str(empty), "--format", "bmf"]) == 2
    assert "empty.json: holds no results to export" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli_main(["export", report, "--format", "yaml"])
    assert exit_.value.code == 2
    assert "invalid choice: 'yaml'" in capsys.readouterr().err
    blocked = str(pytester.path / "r.json" / "x.json")
    assert cli_main(["export", report, "--format", "bmf", "--output", blocked]) == 2
    assert "r.json/x.json: cannot be written" in capsys.readouterr().err


# --- load tests (specdecode.load) ------------------------------------------------------------


def test_bmf_has_a_benchmark_per_load_rate() -> None:
    from ..load_reports import CROSSING, PAYING, load_result

    report = _report(
        REPORT.results[0],
        loads=(load_result(CROSSING, slo={"tpot_ms": 30}), load_result(PAYING, label="n")),
    )
    out = bmf(report)
    jsonschema.validate(out, BMF_SCHEMA)
    key = "suite/test_load.py::test_traffic"
    assert list(out) == [
        "t.py::test_a", f"{key}@0.5req/s", f"{key}@2req/s", f"{key}@all-at-once",
        f"{key}[n]@1req/s", f"{key}[n]@10req/s", f"{key}[n]@100req/s",
    ]  # fmt: skip
    low, high = load_result(CROSSING).points[2].tpot_speedup_ci
    at_once = out[f"{key}@all-at-once"]
    assert at_once["tpot-speedup"] == {
        "value": pytest.approx(40 / 42), "lower_value": low, "upper_value": high
    }  # fmt: skip
    assert at_once["baseline-tpot-p50-ms"]["value"] == pytest.approx(40.0)
    assert at_once["speculative-tpot-p50-ms"]["value"] == pytest.approx(
        42.0, rel=1e-3
    )  # pooled rounds
    assert out[f"{key}@2req/s"]["baseline-goodput"]["value"] == pytest.approx(4 / 9)
    assert out[f"{key}@2req/s"]["speculative-goodput"]["value"] == pytest.approx(8 / 9)
    assert "baseline-goodput" not in out[f"{key}[n]@1req/s"]  # no SLO, no goodput
    json.dumps(out, allow_nan=False)


def test_a_load_rate_without_a_gain_is_left_out_of_github_action_benchmark() -> None:
    from ..load_reports import CROSSING, load_result

    crossing = load_result(CROSSING)
    first = replace(crossing.points[0], tpot_speedup=NAN, tpot_speedup_ci=(NAN, NAN))
    load = replace(crossing, points=(first, *crossing.points[1:]))
    entries = github_action_benchmark(_report(loads=(load,)))
    jsonschema.validate(entries, GAB_SCHEMA)
    key = "suite/test_load.py::test_traffic"
    assert [e["name"] for e in entries] == [
        f"{key}@2req/s tpot-speedup", f"{key}@all-at-once tpot-speedup"
    ]  # fmt: skip
    assert entries[0]["value"] == pytest.approx(1.5) and entries[0]["unit"] == "x"
    assert entries[0]["range"].startswith("95% CI 1.3")
    assert entries[0]["extra"] == "baseline p50 TPOT ms 30.0; speculative p50 TPOT ms 20.0"
    assert bmf(_report(loads=(load,)))[f"{key}@0.5req/s"] == {
        "baseline-tpot-p50-ms": {"value": pytest.approx(24.0)},
        "speculative-tpot-p50-ms": {"value": pytest.approx(12.0, rel=1e-3)},
    }  # fmt: skip


def test_cli_exports_a_report_with_only_load_tests(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    from ..load_reports import PAYING, load_dict

    saved = pytester.path / "load.json"
    report = {"format_version": 1, "results": [], "environment": {}, "loads": [load_dict(PAYING)]}
    saved.write_text(json.dumps(report))
    assert cli_main(["export", str(saved), "--format", "github-action-benchmark"]) == 0
    entries = _strict_json(capsys.readouterr().out)
    jsonschema.validate(entries, GAB_SCHEMA)
    assert len(entries) == 3 and entries[2]["name"].endswith("@100req/s tpot-speedup")


# --- schedule checks (check_schedule) -------------------------------------------------------


def test_bmf_has_a_benchmark_per_concurrency_a_schedule_check_ran() -> None:
    from ..schedule_reports import NODEID, check

    out = bmf(_report(schedule_checks=(check(concurrencies=(1, 8, 32, 64)),)))
    jsonschema.validate(out, BMF_SCHEMA)
    assert list(out) == [f"{NODEID}@c=1", f"{NODEID}@c=8", f"{NODEID}@c=32"]
    assert out[f"{NODEID}@c=8"] == {
        "scheduled-speedup": {"value": 1.75, "lower_value": 1.69, "upper_value": 1.81},
        "fixed-speedup": {"value": 1.82, "lower_value": 1.72, "upper_value": 1.92},
    }
    # off at batch 32: the scheduled engine did not run; the fixed k's figure is the sweep's
    assert out[f"{NODEID}@c=32"] == {
        "fixed-speedup": {"value": 0.89, "lower_value": 0.85, "upper_value": 0.93}
    }  # fmt: skip  # and nothing was measured at 64, past the sweep: no benchmark


def test_github_action_benchmark_lists_each_scheduled_speedup_with_the_fixed_k() -> None:
    from ..schedule_reports import NODEID, check

    entries = github_action_benchmark(_report(schedule_checks=(check(),)))
    jsonschema.validate(entries, GAB_SCHEMA)
    assert [e["name"] for e in entries] == [
        f"{NODEID}@c=1 scheduled-speedup", f"{NODEID}@c=8 scheduled-speedup"
    ]  # fmt: skip
    assert entries[1] == {
        "name": f"{NODEID}@c=8 scheduled-speedup", "unit": "x", "value": 1.75,
        "range": "95% CI 1.690-1.810",
        "extra": "scheduled k=2; best fixed k=4 1.820x (95% CI 1.720-1.920)",
    }  # fmt: skip


# --- phase figures (results[i]["phases"]) ----------------------------------------------------


def _with_phases() -> Report:
    from ..phase_reports import phases

    losing = phases(break_even=4.1, break_even_ci=[3.9, 4.3], acceptance=3.3)
    losing["break_even_ci"] = None  # a single round: no interval
    return _report(
        _result("t.py::test_a", phases=phases()),
        _result("t.py::test_a", "batch 32", phases=losing),
        _result("t.py::test_b", phases=None),  # a served engine
        _result("t.py::test_c"),  # a report from before phase timing
    )  # fmt: skip


def test_bmf_has_the_phase_figures_with_the_break_even_interval() -> None:
    out = bmf(_with_phases())
    jsonschema.validate(out, BMF_SCHEMA)
    first = out["t.py::test_a"]
    assert first["break-even-length"] == {"value": 2.1, "lower_value": 1.9, "upper_value": 2.3}
    assert first["draft-share"] == {"value": 0.37} and first["verify-cost"] == {"value": 1.21}
    assert out["t.py::test_a[batch 32]"]["break-even-length"] == {"value": 4.1}
    for key in ("t.py::test_b", "t.py::test_c"):
        assert not {"break-even-length", "draft-share", "verify-cost"} & set(out[key])
    json.dumps(out, allow_nan=False)


def test_github_action_benchmark_puts_the_phase_figures_in_the_speedup_entry() -> None:
    entries = github_action_benchmark(_with_phases())
    jsonschema.validate(entries, GAB_SCHEMA)
    assert entries[0]["extra"] == (
        "acceptance rate 0.750; mean acceptance length 3.50; baseline tok/s 10.0; speculative "
        "tok/s 20.0; break-even length 2.10 (95% CI 1.90-2.30); draft share 0.370; verify cost "
        "1.21"
    )
    assert entries[1]["extra"].endswith("; break-even length 4.10; draft share 0.370; "
                                        "verify cost 1.21")  # fmt: skip
    assert "break-even" not in entries[2]["extra"] + entries[3]["extra"]


def test_github_action_benchmark_smaller_lists_each_phase_figure() -> None:
    entries = github_action_benchmark_smaller(_with_phases())
    jsonschema.validate(entries, GAB_SCHEMA)
    assert entries[:3] == [
        {"name": "t.py::test_a break-even-length", "unit": "tokens/step", "value": 2.1,
         "range": "95% CI 1.900-2.300", "extra": "measured acceptance length 3.40"},
        {"name": "t.py::test_a draft-share", "unit": "share of a step", "value": 0.37},
        {"name": "t.py::test_a verify-cost", "unit": "baseline forward passes", "value": 1.21},
    ]  # fmt: skip
    assert [e["name"] for e in entries[3:]] == [
        "t.py::test_a[batch 32] break-even-length", "t.py::test_a[batch 32] draft-share",
        "t.py::test_a[batch 32] verify-cost",
    ]  # fmt: skip  # nothing for the served result or the older one
    assert "range" not in entries[3]


def test_cli_exports_the_phase_figures_or_says_there_are_none(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    from ..phase_reports import phases

    saved = pytester.path / "phases.json"
    saved.write_text(json.dumps(_report(_result("t.py::test_a", phases=phases())).to_dict()))
    assert cli_main(["export", str(saved), "--format", "github-action-benchmark-smaller"]) == 0
    entries = _strict_json(capsys.readouterr().out)
    jsonschema.validate(entries, GAB_SCHEMA)
    assert [e["value"] for e in entries] == [2.1, 0.37, 1.21]
    saved.write_text(json.dumps(_report(_result("t.py::test_a")).to_dict()))
    assert cli_main(["export", str(saved), "--format", "github-action-benchmark-smaller"]) == 2
    assert "phases.json: holds no phase figures to export" in capsys.readouterr().err


# --- issue 43: CSV text, spreadsheet formulas, one unit per entry -----------------------------


def test_csv_writes_a_lone_surrogate_as_its_escape(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Item 12: JSON carries a lone surrogate, UTF-8 cannot; the CSV writes it as its escape,
    as the HTML page does, instead of crashing (exit 3)."""
    import csv

    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(_report(_result("t.py::test_a", "s\ud800")).to_dict()))
    out = tmp_path / "figures.csv"
    assert cli_main(["export", str(saved), "--format", "csv", "--output", str(out)]) == 0
    rows = list(csv.reader(out.read_text(encoding="utf-8").splitlines()))
    assert {row[0] for row in rows[1:]} == {"t.py::test_a[s\\ud800]"}
    capsys.readouterr()
    assert cli_main(["export", str(saved), "--format", "csv"]) == 0
    assert capsys.readouterr().out == out.read_text(encoding="utf-8")


FORMULAS = ['=HYPERLINK("http://x.test","y")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx", "\t1"]


def test_csv_neutralises_text_a_spreadsheet_would_run_but_keeps_numbers() -> None:
    """Item 13: a text cell starting with = + - @, a tab or a carriage return (OWASP's CSV
    injection list) gets a leading single quote; a number, or text that is one, stays."""
    import csv
    import io

    from pytest_specdecode.reporting.export import csv_text

    names = [*FORMULAS, "-0.05", "t.py::test_a"]
    report = _report(*(_result(name, speedup_ci=(-0.05, 2.2)) for name in names))
    rows = list(csv.DictReader(io.StringIO(csv_text(report), newline="")))
    benchmarks = list(dict.fromkeys(row["benchmark"] for row in rows))
    assert benchmarks == [*(f"'{name}" for name in FORMULAS), "-0.05", "t.py::test_a"]
    speedups = [row for row in rows if row["measure"] == "speedup"]
    assert {(row["value"], row["lower_value"]) for row in speedups} == {("2.0", "-0.05")}


def test_github_action_benchmark_smaller_gives_each_detectable_drop_one_unit() -> None:
    """Item 18: the value, its unit and the designed drop on the extra line in one unit."""
    from pytest_specdecode.measure.detectable import Detectable

    relative = _result("t.py::test_a", detectable={"speedup": Detectable(0.0672, 0.1)})
    absolute = _result(
        "t.py::test_b", detectable={"speedup": Detectable(0.25, 0.2, relative=False)}
    )
    entries = github_action_benchmark_smaller(_report(relative, absolute))
    jsonschema.validate(entries, GAB_SCHEMA)
    assert entries == [
        {"name": "t.py::test_a speedup-detectable-drop", "unit": "%",
         "value": pytest.approx(6.72), "extra": "designed to catch 10%"},
        {"name": "t.py::test_b speedup-detectable-drop", "unit": "x", "value": 0.25,
         "extra": "designed to catch 0.2x"},
    ]  # fmt: skip
