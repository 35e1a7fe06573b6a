"""One result form: ``Result.to_dict()`` / ``Result.from_dict()`` round-trip, the JSON Schema
covers what they write, and a result is never changed after it is built."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest

import pytest_specdecode
from pytest_specdecode.baselines.files import results_schema
from pytest_specdecode.measure.figures import with_notes, with_theory, with_verdict
from pytest_specdecode.measure.result import OUTCOME_FIELDS, Outcome, Result, entry

from ..helpers import fake_result


def complete() -> Result:
    result = with_verdict(with_theory(fake_result(), 0.1), 4.0)
    return with_notes(result, json="8/8 parse")


def test_round_trip_is_lossless() -> None:
    result = complete()
    data = json.loads(json.dumps(result.to_dict()))  # through JSON, as files hold it
    again = Result.from_dict(data)
    assert again == result
    assert again.to_dict() == result.to_dict()


def test_report_entries_read_back_as_results() -> None:
    data = entry(complete(), Outcome(passed=False, gate_failures=("too slow",)))
    assert {*OUTCOME_FIELDS} - {"worker"} <= set(data)
    assert Result.from_dict({**data, "worker": "gw0"}) == complete()


def test_schema_covers_every_field_written() -> None:
    schema = results_schema()
    result_props = schema["$defs"]["result"]["properties"]
    engine_props = schema["$defs"]["engine"]["properties"]
    data = entry(complete(), Outcome(passed=True))
    data["worker"] = "gw1"
    assert set(data) <= set(result_props), set(data) - set(result_props)
    assert set(data["baseline"]) <= set(engine_props), set(data["baseline"]) - set(engine_props)
    report = {"format_version": 1, "results": [data], "environment": {}}
    jsonschema.Draft202012Validator(schema).validate(report)
    jsonschema.Draft202012Validator(schema).validate(
        {"format_version": 1, "results": [complete().to_dict()], "environment": {}}
    )


def test_a_result_cannot_be_changed_after_it_is_built() -> None:
    result = complete()
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.speedup = 9.0  # type: ignore[misc]
    noted = with_notes(result, more="x")
    assert "more" not in result.notes and noted.notes["more"] == "x"


def test_the_committed_schema_is_the_one_the_model_generates() -> None:
    """``schemas/results.schema.json`` is generated from the records
    (``python scripts/render_schema.py``); editing the model without it fails here."""
    from pytest_specdecode.baselines.report import report_schema, schema_text

    assert results_schema() == report_schema()
    path = Path(pytest_specdecode.__file__).parent / "schemas" / "results.schema.json"
    assert path.read_text() == schema_text(), "run python scripts/render_schema.py"
