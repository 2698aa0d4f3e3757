from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any
from uuid import UUID

import jsonschema_rs
from jsonschema import Draft202012Validator
from pydantic import ConfigDict, Field, StrictBool, field_validator
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from ..access.schemas import NAME_PATTERN
from ..kit.schemas import ReadSchema, Schema, StoredSchema

# Valid as a tool name for Anthropic, OpenAI and MCP alike.
MAX_TOOL_NAME = 64
TOOL_NAME_PATTERN = rf"^[A-Za-z0-9_-]{{1,{MAX_TOOL_NAME}}}$"
MAX_SCHEMA_BYTES = 65_536
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}

EXAMPLE_TOOL: dict[str, Any] = {
    "name": "order_status",
    "title": "Order status",
    "description": "Get the shipping status of an order.",
    "input_schema": {
        "type": "object",
        "properties": {"order_id": {"type": "string", "description": "The order number."}},
        "required": ["order_id"],
    },
    "examples": ["where is my order", "has my package shipped"],
    "required_permission": "orders.read",
    "core": False,
}


def _python_regex(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def _any(_: str) -> bool:
    return True


# The 2020-12 meta-schema, whatever `$schema` a schema names: `/v1/authorize` validates
# calls with a 2020-12 validator. Checked by jsonschema-rs: python-jsonschema took 1.6-5 ms
# a schema, on the event loop (FastAPI validates a request body there), so a bulk upsert of
# 1,000 tools held every select of its API process for seconds; this takes microseconds.
# Its formats (regex, uri, uri-reference) are judged as python-jsonschema judges them: a
# pattern must compile with Python's `re`, and URIs are not checked (a `$ref` to
# "#/definitions/Foo Bar" is common in the wild). Calls are checked by jsonschema-rs
# (`selection.service.argument_errors`), whose engine compiles every schema of the public
# datasets this accepts; one it could not compile would refuse calls, not allow them.
_META_SCHEMA = jsonschema_rs.Draft202012Validator(
    Draft202012Validator.META_SCHEMA,
    validate_formats=True,
    formats={"regex": _python_regex, "uri": _any, "uri-reference": _any},
)


def schema_error(value: Any) -> tuple[list[str | int], str] | None:
    """Where and why `value` is not a valid JSON Schema (2020-12), or None if it is one."""
    for error in _META_SCHEMA.iter_errors(value):
        return list(error.instance_path), error.message
    return None


def check_input_schema(value: dict[str, Any]) -> dict[str, Any]:
    """A tool's input schema must be a valid JSON Schema describing an object."""
    if len(json.dumps(value)) > MAX_SCHEMA_BYTES:
        raise ValueError(f"must be at most {MAX_SCHEMA_BYTES} bytes of JSON")
    if (error := schema_error(value)) is not None:
        path, message = error
        where = "/".join(str(p) for p in path) or "(root)"
        raise ValueError(f"not a valid JSON Schema at {where}: {message}")
    if value.get("type") != "object":
        raise ValueError('must describe an object ("type": "object")')
    _check_refs(value)
    return value


def _check_refs(value: dict[str, Any]) -> None:
    """Every `$ref` must resolve inside the schema: nothing is ever fetched to validate a
    call, and a dangling reference would only fail later, at `/v1/authorize`."""
    uri = "urn:toolsift:input-schema"
    root = DRAFT202012.create_resource(value)
    pending = [(root, Registry().with_resource(uri, root).resolver(base_uri=uri))]
    while pending:
        resource, parent = pending.pop()
        resolver = parent.in_subresource(resource)
        if isinstance(resource.contents, dict):
            for keyword in ("$ref", "$dynamicRef"):
                ref = resource.contents.get(keyword)
                if not isinstance(ref, str):
                    continue
                try:
                    resolver.lookup(ref)
                except Unresolvable:
                    raise ValueError(
                        f"{keyword} {ref!r} does not resolve inside the schema"
                        " (references are never fetched)"
                    ) from None
        pending.extend((sub, resolver) for sub in resource.subresources())


def check_examples(value: list[str]) -> list[str]:
    if any(len(e) > 1000 for e in value):
        raise ValueError("each example must be at most 1000 characters")
    return value


# MCP's ToolAnnotations: hints typed as booleans (other keys pass as written).
ANNOTATION_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def check_annotations(value: dict[str, Any]) -> dict[str, Any]:
    """The `mcp` format serves them as MCP's ToolAnnotations, which clients validate."""
    if len(json.dumps(value)) > MAX_SCHEMA_BYTES:
        raise ValueError(f"must be at most {MAX_SCHEMA_BYTES} bytes of JSON")
    for hint in ANNOTATION_HINTS:
        if hint in value and not isinstance(value[hint], bool):
            raise ValueError(f"{hint} must be true or false")
    if "title" in value and not isinstance(value["title"], str):
        raise ValueError("title must be a string")
    return value


class ToolCreate(StoredSchema):
    model_config = ConfigDict(
        from_attributes=True, extra="forbid", json_schema_extra={"examples": [EXAMPLE_TOOL]}
    )

    name: str = Field(pattern=TOOL_NAME_PATTERN, description="Unique in the tenant.")
    title: str | None = Field(default=None, max_length=200)
    description: str = Field(default="", max_length=10_000)
    input_schema: dict[str, Any] = Field(default_factory=lambda: dict(EMPTY_SCHEMA))
    examples: list[str] = Field(
        default_factory=list, max_length=50, description="Queries a user might type for this tool."
    )
    required_permission: str | None = Field(
        default=None, pattern=NAME_PATTERN, description="Permission name; none means public."
    )
    core: StrictBool = Field(default=False, description="Always selected when allowed.")
    output_schema: dict[str, Any] | None = Field(
        default=None, description="MCP `outputSchema`: the shape of a structured result."
    )
    annotations: dict[str, Any] | None = Field(
        default=None,
        description="MCP tool annotations (readOnlyHint, destructiveHint, ...): hints from the"
        " tool's author, shown with the tool and never used to decide a permission.",
    )

    @field_validator("input_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_input_schema(value)

    @field_validator("output_schema")
    @classmethod
    def _output_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else check_input_schema(value)

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else check_annotations(value)

    @field_validator("examples")
    @classmethod
    def _examples(cls, value: list[str]) -> list[str]:
        return check_examples(value)


class ToolUpdate(StoredSchema):
    """Fields to change; a changed definition gets a new version at the same position.

    `null` clears what a tool may lack (title, permission, output schema, annotations) and
    is refused for the rest, which a PATCH keeps by leaving them out."""

    title: str | None = Field(default=None, max_length=200)
    description: str | None = Field(default=None, max_length=10_000)
    input_schema: dict[str, Any] | None = None
    examples: list[str] | None = Field(default=None, max_length=50)
    required_permission: str | None = Field(default=None, pattern=NAME_PATTERN)
    core: StrictBool | None = None
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None

    @field_validator("description", "input_schema", "examples", "core")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("cannot be null; leave it out to keep the tool's value")
        return value

    @field_validator("input_schema", "output_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else check_input_schema(value)

    @field_validator("examples")
    @classmethod
    def _examples(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else check_examples(value)

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else check_annotations(value)


# The fields of a tool that only toolsift knows (the public catalog formats and MCP servers
# have none of them): a tool written again without one keeps the catalog's value.
CATALOG_FIELDS = ("required_permission", "core", "examples")


class ToolBulkUpsert(Schema):
    # Names must be unique in the request: the service checks it, naming `tools[i].name`.
    tools: list[ToolCreate] = Field(min_length=1, max_length=1000)


class ToolRead(ReadSchema):
    id: UUID
    position: int
    name: str
    title: str | None
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, Any] | None
    examples: list[str]
    required_permission: str | None
    core: bool
    token_cost: int = Field(description="Prompt tokens of the `anthropic` definition.")
    token_costs: dict[str, int] = Field(
        description="Prompt tokens of the definition in each format (anthropic, openai, mcp,"
        " openai_responses):"
        " what a select in that format counts against its budget."
    )
    content_hash: str
    version: int
    source: str
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None


class UpsertItem(ReadSchema):
    id: UUID
    name: str
    position: int
    version: int
    status: str = Field(description="created, updated or unchanged")


class UpsertResult(ReadSchema):
    created: int
    updated: int
    unchanged: int
    tools: list[UpsertItem]
