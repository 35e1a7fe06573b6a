"""One result form: ``Result.to_dict()`` / ``Result.from_dict()`` round-trip, the JSON Schema
covers what they write, and a result is never changed after it is built."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest

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
