"""The JSON Schema covers a report's ``loads`` (``LoadResult.to_dict()``): every field written
is described, the written form validates, and a malformed load is refused when read."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pytest_specdecode.baselines import files
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.measure.load import LoadResult

from ..load_reports import CROSSING, PAYING, load_dict, load_result


def _report(*loads: dict[str, Any]) -> dict[str, Any]:
    return {"format_version": 1, "results": [], "environment": {}, "loads": list(loads)}


def test_schema_covers_every_field_a_load_writes() -> None:
    defs = files.results_schema()["$defs"]
    data = load_dict(CROSSING, slo={"ttft_ms": 500, "tpot_ms": 30})
    assert set(data) <= set(defs["load"]["properties"])
    point = data["points"][0]
    assert set(point) <= set(defs["load_point"]["properties"])
    assert set(point["baseline"]) <= set(defs["load_summary"]["properties"])
    jsonschema.Draft202012Validator(files.results_schema()).validate(_report(data))


def test_a_saved_load_report_reads_back_as_the_same_load_results(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_report(load_dict(CROSSING), load_dict(PAYING, label="x"))))
    data = files.load(path, "report file")
    again = LoadResult.from_dict(data["loads"][0])
    assert again.rates == [0.5, 2.0, math.inf] and again.crossover_rate == math.inf
    assert again.to_dict() == load_result(CROSSING).to_dict()


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        (("points", 0, "rate"), "fast", "'fast' is not valid"),
        (("points", 0, "rate"), 0, "less than or equal to the minimum of 0"),
        (("points", 0, "baseline", "tpot"), {"50": 0.1}, "'90' is a required property"),
        (("points", 0, "tpot_speedup_ci"), [1.0], "is too short"),
        (("slo",), {"itl_ms": 5}, "'itl_ms' is not one of"),
        (("points",), [], "should be non-empty"),
    ],
)
def test_a_malformed_load_is_refused_naming_where(
    tmp_path: Path, where: tuple[Any, ...], value: Any, says: str
) -> None:
    data = load_dict(CROSSING)
    inner: Any = data
    for step in where[:-1]:
        inner = inner[step]
    inner[where[-1]] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_report(data)))
    with pytest.raises(ConfigError) as error:
        files.load(path, "report file")
    assert f"invalid at loads/0/{'/'.join(map(str, where))}: " in str(error.value)
    assert says in str(error.value)
