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
from pytest_specdecode.run.record import (
    EXIT_BAD_INPUT,
    EXIT_CRASH,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REGRESSED,
)

from ..fakes import FakeSource

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
    assert any(
        "no result of this run matches one in the baseline" in s and "renamed" in s for s in said
    )


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


# --- issue 43 ----------------------------------------------------------------------------------


def test_two_benches_of_one_name_are_refused_before_they_measure() -> None:
    """Item 2: keys are claimed across the record's benches, as within one Bench."""
    record, source = RunRecord(progress=None), FakeSource()
    first = record.bench("org/target", NGRAM, source=source)
    first.run(["p1", "p2"], max_tokens=4)
    first.load(["p1", "p2"], max_tokens=8, rates=[4.0], requests=4)
    first.sweep(["p1"], max_tokens=4, num_speculative_tokens=[2])
    second = record.bench("org/target", DRAFT, source=source)
    rounds = source.rounds
    calls = {
        "run": lambda: second.run(["p1"], max_tokens=4),
        "run label": lambda: second.run(["p1"], max_tokens=4, label=""),
        "load": lambda: second.load(["p1"], max_tokens=8, rates=[4.0], requests=4),
        "sweep": lambda: second.sweep(["p1"], max_tokens=4, num_speculative_tokens=[2]),
    }
    for call in calls.values():
        with pytest.raises(ConfigError, match=r"another Bench named 'bench'.*name="):
            call()
    assert source.rounds == rounds
    assert (len(record.results), len(record.loads)) == (2, 1)
    # a label or a name of its own keeps them apart
    second.run(["p1"], max_tokens=4, label="draft")
    record.bench("org/target", DRAFT, name="draft", source=source).run(["p1"], max_tokens=4)
    assert len({r.key for r in record.results}) == len(record.results) == 4


def test_a_comparison_with_nothing_on_one_side_exits_2_and_writes_no_empty_baseline(
    tmp_path: Path,
) -> None:
    """Item 3: an empty baseline, a run that measured nothing, an update with nothing."""
    empty = tmp_path / "empty.json"
    files.write(empty, files.build([], {}, {}))
    said: list[str] = []
    record = RunRecord(compare=str(empty), progress=said.append)
    record.bench("org/target", NGRAM, source=FakeSource()).run(["p1", "p2"], max_tokens=4)
    assert record.finish() == EXIT_BAD_INPUT
    assert any(f"the baseline {empty} holds no results" in s for s in said), said
    base = tmp_path / "base.json"
    assert script(RunRecord(save=str(base), progress=None), FakeSource()) == EXIT_OK
    said.clear()
    assert RunRecord(compare=str(base), progress=said.append).finish() == EXIT_BAD_INPUT
    assert any("this run holds no results, so nothing was compared" in s for s in said), said
    before = base.read_bytes()
    said.clear()
    record = RunRecord(compare=str(base), update_baseline=True, progress=said.append)
    assert record.finish() == EXIT_BAD_INPUT
    assert base.read_bytes() == before and not any("baseline updated" in s for s in said)
    assert any(f"baseline {base} NOT updated: nothing was measured" in s for s in said), said
    new = tmp_path / "new.json"
    record = RunRecord(compare=str(new), update_baseline=True, progress=None)
    assert record.finish() == EXIT_BAD_INPUT and not new.exists()


def test_a_baseline_of_another_configuration_warns_and_one_of_another_method_is_refused(
    tmp_path: Path,
) -> None:
    """Item 4: the fields that differ are named; another target or method is not compared
    unless allow_config_change says the change is intended."""
    base = tmp_path / "base.json"
    saving = RunRecord(save=str(base), progress=None)
    with saving.bench("org/target", NGRAM, name="s", source=FakeSource()) as bench:
        bench.run(["p1", "p2"], max_tokens=4)
    assert saving.finish() == EXIT_OK

    def compare(config: dict[str, object], **keywords: object) -> tuple[int, list[str], RunRecord]:
        said: list[str] = []
        record = RunRecord(compare=str(base), progress=said.append, **keywords)  # type: ignore[arg-type]
        with record.bench("org/target", config, name="s", source=FakeSource()) as bench:
            bench.run(["p1", "p2", "p3"], max_tokens=4)
        return record.finish(), said, record

    status, said, record = compare({**NGRAM, "num_speculative_tokens": 2})
    assert status == EXIT_OK and record.verdicts
    assert any("another configuration: s: k 4 -> 2, prompts 2 -> 3" in s for s in said), said
    status, said, record = compare(DRAFT)
    assert status == EXIT_BAD_INPUT and not record.verdicts
    assert any(
        "s: not compared" in s and "method ngram -> draft_model" in s
        and "allow_config_change=True" in s
        for s in said
    ), said  # fmt: skip
    status, said, record = compare(DRAFT, allow_config_change=True)
    assert status == EXIT_OK and record.verdicts
    assert any("another configuration: s: method ngram -> draft_model" in s for s in said)


def test_finish_twice_saves_and_says_everything_once(tmp_path: Path) -> None:
    """Item 6: finish() is idempotent."""
    base = tmp_path / "base.json"
    said: list[str] = []
    record = RunRecord(save=str(base), progress=said.append)
    record.bench("org/target", NGRAM, source=FakeSource()).run(["p1", "p2"], max_tokens=4)
    assert record.finish() == EXIT_OK
    assert record.finish() == EXIT_OK == record.status
    assert len(files.load(base)["results"][0]["sessions"]) == 1
    assert said.count(f"wrote {base}") == 1


def test_a_script_that_raises_keeps_what_it_measured_and_exits_3(tmp_path: Path) -> None:
    """Item 7: the record as a context manager saves what was measured when the script fails
    (exit 3; Ctrl-C goes on as a KeyboardInterrupt, 130) and finishes when it ends."""
    report, saved = tmp_path / "run.json", tmp_path / "saved.json"
    said: list[str] = []
    with pytest.raises(SystemExit) as exited:
        with RunRecord(report=str(report), save=str(saved), progress=said.append) as record:
            record.bench("org/target", NGRAM, source=FakeSource()).run(["p1"], max_tokens=4)
            raise RuntimeError("the script's own bug")
    assert exited.value.code == EXIT_CRASH == record.status
    assert len(files.load(report)["results"]) == len(files.load(saved)["results"]) == 1
    assert any("crashed (RuntimeError: the script's own bug)" in s for s in said), said
    assert said.count(f"wrote {report}") == 1
    with pytest.raises(KeyboardInterrupt):
        with RunRecord(report=str(report), progress=None) as record:
            record.bench("org/target", NGRAM, source=FakeSource()).run(["a", "b"], max_tokens=4)
            raise KeyboardInterrupt
    assert record.status == EXIT_INTERRUPTED == 130
    assert files.load(report)["results"][0]["num_prompts"] == 2
    with RunRecord(report=str(report), progress=None) as record:
        record.bench("org/target", NGRAM, source=FakeSource()).run(["a"] * 3, max_tokens=4)
    assert record.status == EXIT_OK and record.finish() == EXIT_OK
    assert files.load(report)["results"][0]["num_prompts"] == 3


def test_a_run_that_measured_nothing_replaces_its_files_and_says_so(tmp_path: Path) -> None:
    """Item 9: the report says nothing was measured; no stale export stays behind."""
    report, bmf = tmp_path / "run.json", tmp_path / "bmf.json"
    report.write_text("from an earlier run")
    bmf.write_text("{}")
    said: list[str] = []
    record = RunRecord(report=str(report), export={"bmf": str(bmf)}, progress=said.append)
    assert record.finish() == EXIT_BAD_INPUT
    data = files.load(report)
    assert data["results"] == [] and "nothing was measured" in data["session"]["nothing_measured"]
    assert not bmf.exists()
    assert any("nothing was measured" in s for s in said) and f"wrote {report}" in said
    assert any(f"removed {bmf}" in s for s in said), said


def test_a_bench_of_a_record_takes_the_bench_keywords(tmp_path: Path) -> None:
    """Item 15: progress= is a Bench keyword like the others."""
    said: list[str] = []
    record = RunRecord(progress=said.append)
    record.bench("org/target", NGRAM, source=FakeSource(), progress=None).run(["p"], max_tokens=4)
    assert said == [] and len(record.results) == 1


def test_paths_may_be_path_objects(tmp_path: Path) -> None:
    """Item 16: every path keyword takes an os.PathLike."""
    record = RunRecord(
        report=tmp_path / "run.json", save=tmp_path / "saved.json", html=tmp_path / "run.html",
        export={"bmf": tmp_path / "bmf.json"}, progress=None,
    )  # fmt: skip
    record.bench(Path("org/target"), NGRAM, source=FakeSource()).run(["p1", "p2"], max_tokens=4)
    assert record.finish() == EXIT_OK and record.results[0].target == "org/target"
    assert all((tmp_path / n).exists() for n in ("run.json", "saved.json", "run.html", "bmf.json"))
    compared = RunRecord(compare=tmp_path / "saved.json", progress=None)
    compared.bench("org/target", NGRAM, source=FakeSource()).run(["p1", "p2"], max_tokens=4)
    assert compared.finish() == EXIT_OK and compared.verdicts


def test_a_baseline_holding_two_results_under_one_key_is_refused(tmp_path: Path) -> None:
    """Item 2: one saved before two benches of one name were refused."""
    base = tmp_path / "base.json"
    assert script(RunRecord(save=str(base), progress=None), FakeSource()) == EXIT_OK
    data = json.loads(base.read_text())
    data["results"].append(data["results"][0])
    base.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"holds 2 results under the key 'my-suite\[json\]'"):
        RunRecord(compare=str(base), progress=None)
