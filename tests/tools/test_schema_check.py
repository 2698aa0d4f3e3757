"""The input-schema check (jsonschema-rs against the 2020-12 meta-schema) gives the verdict
python-jsonschema's `check_schema` gives: the schemas it admits are the ones `/v1/authorize`
(python-jsonschema) can validate calls with, patterns included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from toolsift.tools.schemas import check_input_schema, schema_error

OBJECT: dict[str, Any] = {"type": "object"}

CASES: list[dict[str, Any]] = [
    {**OBJECT, "properties": {"ref": {"type": "string", "description": "x"}}},
    {**OBJECT, "properties": 5},
    {"type": "objekt"},
    {**OBJECT, "required": "order_id"},
    {**OBJECT, "required": ["a", "a"]},
    {**OBJECT, "minProperties": -1},
    {**OBJECT, "additionalProperties": {"type": "integer", "minimum": "0"}},
    {**OBJECT, "properties": {"x": {"type": ["string", "string"]}}},
    {**OBJECT, "properties": {"x": {"exclusiveMinimum": True}}},  # draft-4 style
    {**OBJECT, "properties": {"x": {"items": [{"type": "string"}]}}},  # draft-7 tuple
    {**OBJECT, "dependentRequired": {"a": [1]}},
    {**OBJECT, "enum": []},
    {**OBJECT, "properties": {"x": {"format": "nonsense"}}},
    # Patterns: Python's `re` decides, as it will when a call is validated.
    {**OBJECT, "properties": {"x": {"pattern": "(?<=a)b"}}},
    {**OBJECT, "properties": {"x": {"pattern": "(?P<n>a)"}}},  # Python only
    {**OBJECT, "properties": {"x": {"pattern": "\\p{L}+"}}},  # ECMA only
    {**OBJECT, "properties": {"x": {"pattern": "[a-"}}},
    {**OBJECT, "patternProperties": {"[": {}}},
    {**OBJECT, "patternProperties": {"^x_(?P<n>\\d+)$": {"type": "string"}}},
    {**OBJECT, "propertyNames": {"pattern": "^[a-z]+$"}},
    # Data that merely looks like a schema keyword is not a pattern.
    {**OBJECT, "enum": [{"pattern": "["}]},
    {**OBJECT, "properties": {"pattern": {"type": "string"}}},
    # URIs are not checked, by either.
    {**OBJECT, "$id": "not a uri ::"},
    {**OBJECT, "$schema": "not a uri"},
    {
        **OBJECT,
        "$defs": {"Foo Bar": {"type": "string"}},
        "properties": {"x": {"$ref": "#/$defs/Foo Bar"}},
    },
    # Whatever `$schema` says, the 2020-12 meta-schema judges.
    {"$schema": "http://json-schema.org/draft-07/schema#", **OBJECT, "definitions": {"a": 1}},
    {**OBJECT, "properties": {"x": {"anyOf": [{"type": "string"}, {"const": None}]}}},
    {**OBJECT, "properties": {"x": {"if": {"minimum": 1}, "then": {"multipleOf": 0}}}},
]


def _python_verdict(schema: dict[str, Any]) -> list[str | int] | None:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        return list(error.path)
    return None


@pytest.mark.parametrize("schema", CASES, ids=lambda s: json.dumps(s)[:60])
def test_the_verdict_is_python_jsonschemas(schema: dict[str, Any]) -> None:
    expected = _python_verdict(schema)
    got = schema_error(schema)
    assert (got is None) == (expected is None), (got, expected)
    if got is not None:
        assert got[0] == expected  # the same place is named


def test_the_error_names_the_place_and_the_reason() -> None:
    with pytest.raises(ValueError, match=r"^not a valid JSON Schema at properties/x/pattern: "):
        check_input_schema({**OBJECT, "properties": {"x": {"pattern": "[a-"}}})
    with pytest.raises(ValueError, match=r"^not a valid JSON Schema at \(root\): "):
        check_input_schema([])  # type: ignore[arg-type]


def test_every_schema_of_the_test_catalogs_gets_the_same_verdict() -> None:
    schemas = []
    for path in Path(__file__).parents[1].rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            for key in ("input_schema", "inputSchema", "parameters"):
                if isinstance(row, dict) and isinstance(row.get(key), dict):
                    schemas.append(row[key])
    assert len(schemas) >= 5, "no catalog found to compare on"
    for schema in schemas:
        assert (schema_error(schema) is None) == (_python_verdict(schema) is None), schema
