"""Issue 28's figures in every renderer: the JSON schema of ``results[i]["phases"]`` (and a
sweep point's), the terminal and Markdown phase lines, the HTML bar chart and break-even
chart, the checklist's "choice of draft" and "batch size" lines, the export and the JUnit
properties; each also without phase figures (an old report, a served engine), where it says
there are none instead of guessing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pytest_specdecode.baselines import files
from pytest_specdecode.engines.protocol import PHASES
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.reporting.phases import phase_line

from .phase_reports import empty_step, phases, report, result, step, sweep

# --- the schema -----------------------------------------------------------------------------


def _validate(data: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(files.results_schema()).validate(data)


def test_the_schema_describes_every_field_of_the_contract() -> None:
    defs = files.results_schema()["$defs"]
    written = phases()
    assert set(written) == set(defs["phases"]["properties"])
    assert set(written["baseline"]["decode"]) == set(defs["phase_step"]["properties"])
    assert {f"{p}_ms" for p in PHASES} < set(defs["phase_step"]["properties"])
    assert defs["phases"]["properties"]["clock"] == {"enum": ["wall", "cuda-events"]}
    assert defs["result"]["properties"]["phases"] == {"$ref": "#/$defs/phases"}
    points = defs["sweep"]["properties"]["points"]["items"]["properties"]
    assert points["phases"] == {"$ref": "#/$defs/phases"}


def test_phases_absent_null_or_whole_validate(tmp_path: Path) -> None:
    absent = result()
    del absent["phases"]
    served = result("test_b", phases=None)
    gpu = result("test_c", phases=phases(clock="cuda-events", break_even=None,
                                         break_even_ci=[None, None]))  # fmt: skip
    gpu["phases"]["speculative"]["prefill"] = empty_step()
    gpu["phases"]["break_even_ci"] = None
    data = report([result(), absent, served, gpu], sweeps=[sweep(), sweep(with_phases=False)])
    _validate(data)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    assert files.load(path, "report file")["results"][0]["phases"] == phases()


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        (("phases", "clock"), "cpu", "'cpu' is not one of ['wall', 'cuda-events']"),
        (("phases", "baseline", "decode", "steps"), -1, "less than the minimum of 0"),
        (("phases", "speculative", "decode", "draft_ms"), -0.5, "less than the minimum of 0"),
        (("phases", "speculative", "decode", "forward_ms"), "4.1", "'4.1' is not of type"),
        (("phases", "break_even_ci"), [1.9], "is too short"),
        (("phases", "acceptance_length_ci"), [3.2, 3.4, 3.6], "is too long"),
        (("phases", "break_even_length"), -2.1, "less than the minimum of 0"),
        (("phases", "draft_share"), 1.5, "greater than the maximum of 1"),
        (("phases", "speculative"), {"decode": step()}, "'prefill' is a required property"),
        (("phases",), "wall", "'wall' is not of type 'object', 'null'"),
    ],
)
def test_malformed_phases_are_refused_naming_where(
    tmp_path: Path, where: tuple[str, ...], value: Any, says: str
) -> None:
    data = report([result()])
    inner: Any = data["results"][0]
    for key in where[:-1]:
        inner = inner[key]
    inner[where[-1]] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as error:
        files.load(path, "report file")
    assert f"invalid at results/0/{'/'.join(where)}: " in str(error.value)
    assert says in str(error.value)


def test_a_malformed_sweep_points_phases_are_refused_naming_where(tmp_path: Path) -> None:
    data = report([], sweeps=[sweep()])
    data["sweeps"][0]["points"][2]["phases"]["clock"] = "device"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="invalid at sweeps/0/points/2/phases/clock: 'device'"):
        files.load(path, "report file")


# --- the terminal and Markdown lines ---------------------------------------------------------


def test_the_phase_line_is_the_contracts() -> None:
    assert phase_line(result()) == (
        "phases: spec step 7.9 ms = verify 4.1 + draft 2.9 + sample 0.5 + prepare 0.3 + "
        "other 0.1; base step 3.8 ms; break-even 2.1 tokens/step [1.9-2.3], measured 3.4 "
        "[3.2-3.6]"
    )


def test_the_phase_line_without_figures_says_so() -> None:
    absent = result()
    del absent["phases"]
    assert phase_line(absent) == "phases: no phase figures recorded"
    assert phase_line(result(phases=None), served=True) == (
        "phases: no phase figures: served engine"
    )
    gpu = phases(clock="cuda-events", break_even=None, break_even_ci=[None, None],
                 acceptance_ci=[None, None])  # fmt: skip
    gpu["speculative"]["decode"] = empty_step()
    assert phase_line(result(phases=gpu)) == (
        "phases: spec step - (no decode steps); base step 3.8 ms; break-even -, measured 3.4; "
        "clock cuda-events"
    )
    tiny = phases(spec=step(sample=0.004))
    assert "sample 0.004 +" in phase_line(result(phases=tiny))


def test_the_summary_puts_each_phase_line_under_its_row() -> None:
    from pytest_specdecode.reporting.table import PHASE_LEGEND, summary_lines

    rows = [result(), result("test_b", label="batch 8", phases=None)]
    lines = summary_lines(rows, [], [], [], {"time": {}})
    table = lines[0].splitlines()
    assert table[2].startswith("test_a ") and table[3] == f"  {phase_line(rows[0])}"
    assert table[4].startswith("test_b [batch 8] ")
    assert table[5] == "  phases: no phase figures recorded"
    assert PHASE_LEGEND in lines


def test_the_summary_says_once_when_no_result_has_phases() -> None:
    from pytest_specdecode.reporting.table import PHASE_LEGEND, render, summary_lines

    rows = [result(phases=None), result("test_b", phases=None)]
    served = summary_lines(rows, [], [], [], {"time": {}}, served=True)
    assert served[:2] == [render(rows), "phases: no phase figures: served engine"]
    assert PHASE_LEGEND not in served
    old = summary_lines(rows, [], [], [], {"time": {}})  # a report from before phase timing
    assert old[0] == render(rows) and not any("phase" in line for line in old)


def test_the_markdown_lists_the_phase_lines() -> None:
    from pytest_specdecode.reporting.table import phase_markdown

    rows = [result(label="a`b"), result("test_b", phases=None)]
    assert phase_markdown(rows) == [
        f"- `test_a [a'b]`: {phase_line(rows[0])}",
        "- `test_b`: phases: no phase figures recorded",
    ]
    assert phase_markdown(rows[1:], served=True) == ["Phases: no phase figures: served engine."]
    assert phase_markdown(rows[1:]) == []
