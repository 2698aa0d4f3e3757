"""Tool definitions as each model API wants them, and what they cost in the prompt."""

from __future__ import annotations

import hashlib
import math
from decimal import Decimal
from typing import Any, Literal, NamedTuple, Protocol

from ..models import Tool
from ..models.base import json_text

# `anthropic_tool_reference`: names only, as `tool_reference` blocks for a custom tool-search
# tool's `tool_result` content; the client holds the (deferred) definitions. `openai` is the
# Chat Completions shape, `openai_responses` the Responses API's.
Format = Literal["anthropic", "openai", "openai_responses", "mcp", "anthropic_tool_reference"]


# What Anthropic's and OpenAI's APIs refuse at the top of an input schema ("input_schema does
# not support oneOf, allOf, or anyOf at the top level"; "schema must have type 'object' and
# not have 'oneOf'/'anyOf'/'allOf'/'enum'/'not' at the top level"). One such tool among those
# sent fails the agent's whole request, and MCP servers often express "one of these
# arguments" that way.
COMBINATORS = ("oneOf", "anyOf", "allOf")
REFUSED_AT_TOP = (*COMBINATORS, "enum", "not")
# OpenAI refuses a function description longer than this ("string_above_max_length").
OPENAI_DESCRIPTION_LIMIT = 1024


def model_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The input schema as the model APIs take it: the top-level keywords they refuse
    dropped, and the properties their branches named kept as optional properties.

    The constraint the keywords expressed ("`id` or `name`") is the tool's to enforce on the
    call; the model still sees every argument. The same rule runs in SQL
    (`toolsift_model_schema`, migration 0019), which serves the definitions.
    """
    if not any(key in schema for key in REFUSED_AT_TOP):
        return schema
    merged: dict[str, Any] = {}
    for key in COMBINATORS:
        branches = schema.get(key)
        for branch in branches if isinstance(branches, list) else []:
            properties = branch.get("properties") if isinstance(branch, dict) else None
            for name, value in (properties if isinstance(properties, dict) else {}).items():
                merged.setdefault(name, value)
    kept = {key: value for key, value in schema.items() if key not in REFUSED_AT_TOP}
    if merged:
        top = kept.get("properties")
        kept["properties"] = {**merged, **(top if isinstance(top, dict) else {})}
    return kept


def openai_description(description: str) -> str:
    if len(description) <= OPENAI_DESCRIPTION_LIMIT:
        return description
    return description[: OPENAI_DESCRIPTION_LIMIT - 1] + "\u2026"


def render(tool: Tool, fmt: Format) -> dict[str, Any]:
    """A tool as each model API wants it. The MCP definition is the tool as written; the
    Anthropic and OpenAI ones hold to what those APIs accept (`model_schema`)."""
    if fmt == "anthropic":
        return {
            "name": tool.name,
            "description": tool.description,
            "input_schema": model_schema(tool.input_schema),
        }
    if fmt == "anthropic_tool_reference":
        return {"type": "tool_reference", "tool_name": tool.name}
    if fmt == "openai":
        return {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": openai_description(tool.description),
                "parameters": model_schema(tool.input_schema),
            },
        }
    if fmt == "openai_responses":
        # `strict` defaults to true in the Responses API (false in Chat Completions), which
        # holds a schema to its strict subset (every property required, no additional
        # properties at any level): few tools meet it. Said explicitly, the definition is
        # called as the `openai` one is.
        return {
            "type": "function",
            "name": tool.name,
            "description": openai_description(tool.description),
            "parameters": model_schema(tool.input_schema),
            "strict": False,
        }
    definition: dict[str, Any] = {"name": tool.name}
    if tool.title:
        definition["title"] = tool.title
    definition["description"] = tool.description
    definition["inputSchema"] = tool.input_schema
    if tool.output_schema is not None:
        definition["outputSchema"] = tool.output_schema
    if tool.annotations is not None:
        definition["annotations"] = tool.annotations
    return definition


class TokenCosts(NamedTuple):
    """A definition's prompt tokens in each format the budget counts. A tool reference is
    budgeted as the `anthropic` definition it stands for."""

    anthropic: int
    openai: int
    mcp: int
    openai_responses: int


def token_costs(tool: Tool) -> TokenCosts:
    return TokenCosts(
        token_cost(tool, "anthropic"),
        token_cost(tool, "openai"),
        token_cost(tool, "mcp"),
        token_cost(tool, "openai_responses"),
    )


def token_cost(tool: Tool, fmt: Format = "anthropic") -> int:
    """About 4 bytes of compact JSON per token: close enough to budget with, no tokenizer."""
    body = json_text(render(tool, fmt))  # as the column stores it and serves it
    extra = 0
    if fmt in ("anthropic", "openai", "openai_responses"):
        schema = model_schema(tool.input_schema)
        if schema is not tool.input_schema:  # rewritten, in jsonb
            extra = _numbers_written_out(schema)
    return math.ceil((len(body.encode()) + extra) / 4)


def _numbers_written_out(value: Any) -> int:
    """Bytes the served schema's numbers take beyond Python's spelling of them.

    A schema is served as written (a `json` column: Python's `repr` of each float), except
    where the model APIs' rules rewrite it: `toolsift_model_schema` does that in jsonb, whose
    numbers are PostgreSQL numerics, printed without an exponent (`1e308` goes out as 309
    digits), so there a float's served text is the plain decimal of its spelling.
    """
    if isinstance(value, float):
        # A numeric has no sign of zero: -0.0 goes out as 0.0.
        written_out = format(Decimal(repr(value)) + 0 if value == 0 else Decimal(repr(value)), "f")
        return len(written_out) - len(repr(value))
    if isinstance(value, dict):
        return sum(_numbers_written_out(v) for v in value.values())
    if isinstance(value, list):
        return sum(_numbers_written_out(v) for v in value)
    return 0


class Definition(Protocol):
    """What a definition's hash covers: a stored `Tool`, or a `ToolCreate` about to be one."""

    name: str
    title: str | None
    description: str
    input_schema: dict[str, Any]
    examples: list[str]
    core: bool
    output_schema: dict[str, Any] | None
    annotations: dict[str, Any] | None


def content_hash(tool: Definition, permission: str | None) -> str:
    fields: dict[str, Any] = {
        "name": tool.name,
        "title": tool.title,
        "description": tool.description,
        "input_schema": tool.input_schema,
        "examples": tool.examples,
        "required_permission": permission,
        "core": tool.core,
    }
    # Only when set, so tools stored before these fields existed keep their hash (and so
    # their version on the next idempotent upsert).
    for name in ("output_schema", "annotations"):
        if getattr(tool, name) is not None:
            fields[name] = getattr(tool, name)
    # Keys in the order written, not sorted: the served definition keeps that order, so a
    # schema whose parameters were only reordered is a new version (migration 0020).
    canonical = json_text(fields)
    return hashlib.sha256(canonical.encode()).hexdigest()
