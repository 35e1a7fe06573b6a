"""Helpers shared by the example suites."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from pytest_specdecode.prompts import Prompt, load_prompts

PROMPTS_DIR = Path(__file__).parent / "prompts"


def prompts(name: str) -> list[Prompt]:
    """The prompts of ``prompts/NAME.jsonl`` (validated against the shipped JSON Schema)."""
    return load_prompts(PROMPTS_DIR / f"{name}.jsonl")


def first_json_object(text: str) -> Any:
    """The first JSON value at the start of ``text`` (a model may go on after it)."""
    value, _ = json.JSONDecoder().raw_decode(text.lstrip())
    return value


def count_valid(texts: list[str], items: list[Prompt]) -> tuple[int, int]:
    """How many outputs parse as JSON, and how many of those follow the prompt's schema."""
    parsed = valid = 0
    for text, item in zip(texts, items, strict=True):
        try:
            value = first_json_object(text)
        except ValueError:
            continue
        parsed += 1
        if item.output_schema is None or jsonschema.Draft202012Validator(
            item.output_schema
        ).is_valid(value):
            valid += 1
    return parsed, valid
