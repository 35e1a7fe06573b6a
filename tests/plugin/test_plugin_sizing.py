"""Baselines sized by their noise, through pytester and ``RunRecord`` on the simulated engines:
a quiet test saves 20 rounds and says what it can catch; a noisy one takes rounds up to its
cap and is flagged blind with the fix; compared runs take at most the rounds their baseline
planned, and every comparison says what it could catch (JSON, terminal, exports, CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specdecode import RunRecord
from pytest_specdecode.__main__ import main as cli_main
from pytest_specdecode.baselines import files

from ..fakes import FakeSource, use_fake

SUITE = """
import pytest

SPEC = {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}

@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_a(specdecode):
    specdecode.run(["p1", "p2"], max_tokens=4)
"""
NGRAM = {"method": "ngram", "num_speculative_tokens": 4}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester) -> FakeSource:
    engines = use_fake(pytester, monkeypatch)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makepyfile(test_suite=SUITE)
    return engines


def saved_entry(path: Path) -> dict[str, object]:
    entry: dict[str, object] = files.load(path, "baseline")["results"][0]
    return entry


def test_a_quiet_test_saves_20_rounds_and_says_what_it_catches(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    result = pytester.runpytest_inprocess("--specdecode-save", "base.json")
    result.assert_outcomes(passed=1)
    entry = saved_entry(pytester.path / "base.json")
    assert entry["trials"] == 20 and entry["compared_rounds"] == 20
    result.stdout.fnmatch_lines([
        "baseline test_suite.py::test_a: 20 rounds saved, compared runs take up to 20; "
        "catches drops from speedup *%, acceptance_rate *%"
    ])  # fmt: skip
    assert "WARNING" not in result.stdout.str()


def test_a_noisy_test_takes_rounds_to_its_cap_and_is_flagged_with_the_fix(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    fake.noise = 0.15  # per engine: a per-round log-ratio sd of about 0.21
    result = pytester.runpytest_inprocess(
        "--specdecode-save", "base.json", "--specdecode-baseline-max-trials", "35",
        "--specdecode-html", "page.html",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    page = (pytester.path / "page.html").read_text()
    assert "<b>Blind</b>: test_suite.py::test_a: speedup: only drops from" in page
    assert "<h2>What this baseline can see</h2>" in page and "35 rounds saved" in page
    entry = saved_entry(pytester.path / "base.json")
    assert entry["trials"] == 35 and entry["compared_rounds"] == 24
    speedup = entry["detectable"]["speedup"]  # type: ignore[index]
    assert speedup["drop"] == "none" or speedup["drop"] > 0.10
    result.stdout.fnmatch_lines([
        "WARNING: test_suite.py::test_a: speedup: only drops from * are caught (95% of the "
        "time), not the 10% its rule is designed to catch: lower the per-round noise (more "
        "prompts or max_tokens per round*--specdecode-baseline-max-trials when saving*"
    ])  # fmt: skip


def test_a_fixed_number_of_saved_rounds_is_still_honoured(
    pytester: pytest.Pytester, fake: FakeSource
) -> None:
    pytester.runpytest_inprocess(
        "--specdecode-save", "base.json", "--specdecode-baseline-trials", "26"
    ).assert_outcomes(passed=1)
    entry = saved_entry(pytester.path / "base.json")
    assert entry["trials"] == 26 and entry["compared_rounds"] == 20
    assert "speedup" in entry["detectable"]  # type: ignore[operator]


def test_comparisons_say_what_they_could_catch(pytester: pytest.Pytester, fake: FakeSource) -> None:
    pytester.runpytest_inprocess("--specdecode-save", "base.json").assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess(
        "--specdecode-compare", "base.json", "--specdecode-report", "new.json",
        "--specdecode-export", "bmf=bmf.json,github-action-benchmark-smaller=gab.json",
        "--specdecode-html", "page.html",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    page = (pytester.path / "page.html").read_text()
    assert "<h2>Comparison with the baseline</h2>" in page and "<th>catches</th>" in page
    assert "&gt;= " in page and "Blind</b>: test_suite.py::test_a: speedup" not in page
    comparisons = json.loads((pytester.path / "new.json").read_text())["comparisons"]
    drops = {c["figure"]: c["detectable"] for c in comparisons}
    assert set(drops) == {"speedup", "acceptance_rate"}
    assert drops["speedup"]["designed"] == 0.10 and 0.05 < drops["speedup"]["drop"] <= 0.10
    # the acceptance rate judged on the few rounds the speedup's rule took (its own noise,
    # 1.25% a round): a finite drop beyond the tolerance, blind or not
    assert drops["acceptance_rate"]["designed"] == 0.10
    assert 0.05 < drops["acceptance_rate"]["drop"] < 0.2
    bmf = json.loads((pytester.path / "bmf.json").read_text())["test_suite.py::test_a"]
    assert 0.05 < bmf["speedup-detectable-drop"]["value"] < 0.10
    names = [e["name"] for e in json.loads((pytester.path / "gab.json").read_text())]
    assert "test_suite.py::test_a speedup-detectable-drop" in names


def test_the_cli_compare_shows_what_each_comparison_could_catch(
    pytester: pytest.Pytester, fake: FakeSource, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.runpytest_inprocess("--specdecode-save", "base.json").assert_outcomes(passed=1)
    pytester.runpytest_inprocess("--specdecode-report", "new.json").assert_outcomes(passed=1)
    capsys.readouterr()
    base, new = pytester.path / "base.json", pytester.path / "new.json"
    assert cli_main(["compare", str(base), str(new)]) == 0
    out = capsys.readouterr().out
    assert "catches" in out and ">= " in out


def test_a_compared_run_takes_at_most_the_rounds_its_baseline_planned(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    saving = RunRecord(save=str(base), progress=None)
    with saving.bench("org/target", NGRAM, name="suite", source=FakeSource()) as bench:
        bench.run(["p"], max_tokens=4)
    assert saving.finish() == 0
    data = json.loads(base.read_text())
    data["results"][0]["compared_rounds"] = 30
    base.write_text(json.dumps(data))

    def limit(**keywords: object) -> int | None:
        record = RunRecord(compare=str(base), progress=None, **keywords)
        found = record.reference("suite", "")
        assert found is not None
        return found[0].compared

    assert limit() == 30  # what the baseline planned
    assert limit(compare_max_trials=25) == 25  # at most the cap
    del data["results"][0]["compared_rounds"]  # saved before plans: max_trials, as before
    base.write_text(json.dumps(data))
    assert limit() == 20

    # a run the rule cannot decide stops at the plan: slowed by exactly the tolerance
    data["results"][0]["compared_rounds"] = 7
    base.write_text(json.dumps(data))
    record = RunRecord(compare=str(base), progress=None)
    slower = FakeSource()
    slower.speedup, slower.noise = 2.0 * 0.95, 0.15
    with record.bench("org/target", NGRAM, name="suite", source=slower) as bench:
        result = bench.run(["p"], max_tokens=4)
    assert 3 <= result.trials <= 7
