"""The JSON Schema covers a report's sweeps with their k schedule (``Sweep.to_dict()``) and its
``schedule_checks`` (``ScheduleCheck.to_dict()``): every field written is described, the written
form validates, and a malformed one is refused when read, naming where."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pytest_specdecode.baselines import files
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.measure.kschedule import KSchedule, ScheduleCheck

from ..schedule_reports import (
    FELL_SHORT,
    SCHEDULE_SUITE,
    check,
    check_dict,
    sweep,
    sweep_dict,
)


def _report(sweeps: list[dict[str, Any]], checks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format_version": 1, "results": [], "environment": {}, "sweeps": sweeps,
        "schedule_checks": checks,
    }  # fmt: skip


def test_schema_covers_every_field_a_sweep_and_a_schedule_check_write() -> None:
    defs = files.results_schema()["$defs"]
    swept, checked = sweep_dict(), check_dict(concurrencies=(1, 8, 32, 64))
    assert set(swept) <= set(defs["sweep"]["properties"])
    assert set(swept["points"][0]) <= set(
        defs["sweep"]["properties"]["points"]["items"]["properties"]
    )
    assert set(swept["schedule"]) <= set(defs["k_schedule"]["properties"])
    assert set(swept["schedule"]["choices"][0]) <= set(defs["k_choice"]["properties"])
    assert set(checked) <= set(defs["schedule_check"]["properties"])
    assert set(checked["rows"][0]) <= set(defs["schedule_row"]["properties"])
    validator = jsonschema.Draft202012Validator(files.results_schema())
    validator.validate(_report([swept, {**swept, "schedule": None}], [checked]))
    validator.validate(_report([], [check_dict(FELL_SHORT)]))


def test_a_saved_report_reads_back_as_the_same_schedule_and_check(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_report([sweep_dict()], [check_dict(FELL_SHORT)])))
    data = files.load(path, "report file")
    assert KSchedule.from_dict(data["sweeps"][0]["schedule"]) == sweep().schedule()
    assert ScheduleCheck.from_dict(data["schedule_checks"][0]) == check(FELL_SHORT)


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        (("sweeps", 0, "schedule", "entries", 0), [1, 1], "is too short"),
        (("sweeps", 0, "schedule", "entries", 0), [1, 1, 4, 5], "Expected at most 3 items"),
        (("sweeps", 0, "schedule", "entries", 2, 2), -1, "less than the minimum of 0"),
        (("sweeps", 0, "schedule", "choices"), [], "should be non-empty"),
        (("sweeps", 0, "schedule", "tolerance"), 1.5, "greater than or equal to the maximum"),
        (("sweeps", 0, "points", 0, "concurrency"), 0, "less than the minimum of 1"),
        (("schedule_checks", 0, "rows", 0, "holds"), "yes", "'yes' is not of type 'boolean'"),
        (("schedule_checks", 0, "rows", 0, "scheduled_speedup_ci"), [2.0], "is too short"),
        (("schedule_checks", 0, "rows"), [], "should be non-empty"),
        (("schedule_checks", 0, "schedule"), None, "None is not of type 'object'"),
    ],
)
def test_a_malformed_schedule_or_check_is_refused_naming_where(
    tmp_path: Path, where: tuple[Any, ...], value: Any, says: str
) -> None:
    data = _report([sweep_dict()], [check_dict()])
    inner: Any = data
    for step in where[:-1]:
        inner = inner[step]
    inner[where[-1]] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as error:
        files.load(path, "report file")
    assert f"invalid at {'/'.join(map(str, where))}: " in str(error.value)
    assert says in str(error.value)


def test_the_plugins_report_validates_and_its_checklist_and_page_show_the_schedule(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib.pyplot")
    from ..fakes import use_fake

    source = use_fake(pytester, monkeypatch)
    source.speedup_fn = lambda k, c: {1: 1.5, 4: 2.0}[k] if c == 1 else {1: 1.3, 4: 1.1}[k]
    pytester.makepyfile(test_suite=SCHEDULE_SUITE)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--specdecode-report", "report.json",
        "--specdecode-html", "report.html",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    out = result.stdout.str().splitlines()
    assert (
        "schedule test_suite.py::test_schedule: k=4 at batch 1, k=1 above 1 (measured up to "
        "batch 16; larger batches keep k=1, as vLLM carries the last range forward)"
    ) in out
    assert (
        '--speculative-config \'{"method": "draft_model", "model": "org/draft", '
        '"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": '
        "[[1, 1, 4], [2, 16, 1]]}'"
    ) in out
    report = files.load(pytester.path / "report.json", "report file")  # validates
    (checklist,) = report["checklist"]
    (batch,) = [line for line in checklist["lines"] if line["question"] == "batch size"]
    assert batch["figure"].startswith("k=4 at batch 1, k=1 above 1 (measured up to batch 16;")
    assert "in test_schedule; check_schedule held at c=1, c=16 (within 5% of" in batch["figure"]
    page = (pytester.path / "report.html").read_text()
    assert "<h2>Schedule check: test_suite.py::test_schedule</h2>" in page
    assert "id='schedule-check-0'" in page and "<pre class='config'>" in page
