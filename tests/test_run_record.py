"""``RunRecord`` without pytest, on the simulated engines: a script writes the same report,
HTML page, exports and saved baseline as a pytest run, compares against the baseline on its
next run, and exits 1 on a regression."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specdecode import ConfigError, RunRecord
from pytest_specdecode.baselines import files
from pytest_specdecode.run.outputs import EXPORTS
from pytest_specdecode.run.record import EXIT_BAD_INPUT, EXIT_OK, EXIT_REGRESSED

from .fakes import FakeSource

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
DRAFT = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}


def script(record: RunRecord, source: FakeSource) -> int:
    """What a user's script does: one bench, two labelled runs, a sweep, then finish()."""
    said: list[str] = []
    with record.bench("org/target", NGRAM, name="my-suite", source=source) as bench:
        bench.run(["p1", "p2"], max_tokens=4, label="json")
        bench.run(["p3", "p4"], max_tokens=4, label="chat")
        bench.sweep(["p1", "p2"], max_tokens=4, num_speculative_tokens=[2, 4])
    record.progress = said.append
    status = record.finish()
    script.said = said  # type: ignore[attr-defined]
    return status


def test_a_script_writes_report_html_exports_and_a_baseline_then_catches_a_regression(
    tmp_path: Path,
) -> None:
    base, report, page = tmp_path / "base.json", tmp_path / "run.json", tmp_path / "run.html"
    bmf = tmp_path / "bmf.json"
    first = RunRecord(
        save=str(base), report=str(report), html=str(page), export={"bmf": str(bmf)},
        progress=None,
    )  # fmt: skip
    assert script(first, FakeSource()) == EXIT_OK
    data = files.load(report, "report")  # schema-checked
    assert [r["label"] for r in data["results"]][:2] == ["json", "chat"]
    assert data["sweeps"] and data["checklist"]
    assert data["session"]["engine_starts"] >= 2 and data["session"]["time"]["round_seconds"] > 0
    saved = files.load(base, "baseline")
    # sized by its noise: the quiet fake's first look (20 rounds) already sees a 10% drop
    # (twice the default speedup:5%), and the acceptance rate's rule one too
    assert all(len(r["ratios"]) == 20 for r in saved["results"])
    assert all(r["compared_rounds"] == 20 for r in saved["results"])
    assert all(0.05 < r["detectable"]["speedup"]["drop"] < 0.1 for r in saved["results"])
    assert all(0.05 < r["detectable"]["acceptance_rate"]["drop"] < 0.1 for r in saved["results"])
    assert "<svg" in page.read_text() and "my-suite" in page.read_text()
    assert "my-suite[json]" in json.loads(bmf.read_text())
    assert any(line == f"wrote {report}" for line in script.said)  # type: ignore[attr-defined]

    # the next run: unchanged, then slower
    same = RunRecord(compare=str(base), compare_fail="speedup:10%", progress=None)
    assert script(same, FakeSource()) == EXIT_OK
    assert same.verdicts and not same.regressed
    slower = FakeSource()
    slower.speedup = 1.5
    out = tmp_path / "now.json"
    worse = RunRecord(compare=str(base), compare_fail="speedup:10%", report=str(out), progress=None)
    assert script(worse, slower) == EXIT_REGRESSED
    assert worse.regressed
    said = script.said  # type: ignore[attr-defined]
    assert any(line.startswith("regression: my-suite[json]: speedup") for line in said), said
    comparisons = files.load(out, "report")["comparisons"]
    assert {c["decision"] for c in comparisons if c["figure"] == "speedup"} == {"regressed"}


def test_runs_compared_against_a_baseline_go_on_until_the_rule_decides(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    assert script(RunRecord(save=str(base), progress=None), FakeSource()) == EXIT_OK
    record = RunRecord(compare=str(base), compare_fail="speedup:10%", progress=None)
    bench = record.bench("org/target", NGRAM, name="my-suite", source=FakeSource())
    assert record.reference("my-suite", "json") is not None
    result = bench.run(["p1", "p2"], max_tokens=4, label="json")
    assert record.finish() == EXIT_OK
    (speedup,) = [v for v in record.verdicts if v.figure == "speedup"]
    assert speedup.status == "unchanged" and speedup.rounds == result.trials


def test_a_baseline_that_matches_nothing_exits_2_naming_an_example(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    assert script(RunRecord(save=str(base), progress=None), FakeSource()) == EXIT_OK
    said: list[str] = []
    record = RunRecord(compare=str(base), progress=said.append)
    with record.bench("org/target", NGRAM, name="renamed", source=FakeSource()) as bench:
        bench.run(["p1", "p2"], max_tokens=4, label="json")
    assert record.finish() == EXIT_BAD_INPUT
    assert any("no result of this run matched the baseline" in s and "renamed" in s for s in said)


def test_every_product_reaches_the_record_through_the_one_sink() -> None:
    record = RunRecord(progress=None)
    bench = record.bench("org/target", DRAFT, name="s", source=FakeSource())
    result = bench.run(["p1", "p2"], max_tokens=4)
    load = bench.load(["p1", "p2"], max_tokens=8, rates=[4.0], requests=4)
    ranking = bench.choose_draft(["p1"], {"a": NGRAM, "b": DRAFT}, max_tokens=4)
    check = bench.sample_equivalence(["p1"], samples=20, tokens=2)
    assert record.results[0] is result and len(record.results) == 3  # choose_draft's two
    assert record.loads == [load] and record.rankings == [ranking]
    assert record.distribution_checks == [check]
    report = record.report()
    assert {"loads", "rankings", "distribution_checks"} <= set(report)


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"trials": 5}, "RunRecord(trials=...): unknown setting"),
        ({"export": {"yaml": "x.yaml"}}, "unknown format 'yaml'; known: bmf"),
        ({"export": "bmf"}, "RunRecord(export=...): expected FORMAT=PATH"),
        ({"compare_fail": "speed:5%"}, "RunRecord(compare_fail=...)"),
        ({"compare_fail": "speedup:0%"}, "RunRecord(compare_fail=...): 'speedup:0%': a tol"),
        ({"update_baseline": True}, "needs --specdecode-compare"),
        ({"compare": "/nonexistent/base.json"}, "baseline file"),
        ({"report": "/"}, "RunRecord(report=...)"),
    ],
)
def test_bad_keywords_are_refused_before_anything_runs(
    keywords: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=None) as caught:
        RunRecord(progress=None, **keywords)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_every_export_format_can_be_asked_for(tmp_path: Path) -> None:
    paths = {f.name: str(tmp_path / f"{f.name}.out") for f in EXPORTS}
    record = RunRecord(export=paths, progress=None)
    bench = record.bench("org/target", DRAFT, name="s", source=FakeSource())
    bench.run(["p1", "p2"], max_tokens=4)
    assert record.finish() == EXIT_OK
    assert all(Path(p).read_text() for p in paths.values())
