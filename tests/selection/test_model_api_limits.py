"""Anthropic and OpenAI (Chat Completions and Responses) definitions hold to what those APIs
accept; MCP ones stay as written.

Both APIs refuse a whole request whose tools include an input schema with `oneOf`, `anyOf`
or `allOf` at the top (OpenAI also `enum` and `not`), and OpenAI refuses a function
description over 1,024 characters.
"""

from __future__ import annotations

import json
import math
from typing import Any

import psycopg
import pytest

from tests.fixtures.factories import Caller, agent_key
from toolsift.tools.definitions import OPENAI_DESCRIPTION_LIMIT, REFUSED_AT_TOP, model_schema

OwnerConn = psycopg.Connection[tuple[Any, ...]]

STRING = {"type": "string"}
SCHEMAS: list[dict[str, Any]] = [
    # "at least one of": required-only branches.
    {
        "type": "object",
        "properties": {"id": STRING, "name": STRING},
        "anyOf": [{"required": ["id"]}, {"required": ["name"]}],
    },
    # Arguments named only in the branches; the first branch to name one wins.
    {
        "type": "object",
        "oneOf": [
            {"properties": {"yaml": STRING, "dir": {"type": "integer"}}, "required": ["yaml"]},
            {"properties": {"dir": STRING}, "required": ["dir"]},
        ],
        "allOf": [{"properties": {"verbose": {"type": "boolean"}}}],
    },
    # The top level's own definition of a property wins over a branch's.
    {
        "type": "object",
        "properties": {"mode": {"type": "string", "enum": ["a", "b"]}},
        "required": ["mode"],
        "allOf": [{"properties": {"mode": {"type": "integer"}, "x": STRING}}, True],
        "not": {"required": ["forbidden"]},
    },
    # Nested combinators are accepted by both APIs and stay.
    {"type": "object", "properties": {"v": {"anyOf": [STRING, {"type": "null"}]}}},
]


def measured(definition: dict[str, Any]) -> int:
    return math.ceil(
        len(json.dumps(definition, separators=(",", ":"), ensure_ascii=False).encode()) / 4
    )


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_python_and_sql_rules_agree(schema: dict[str, Any], owner_conn: OwnerConn) -> None:
    served = owner_conn.execute(
        "SELECT toolsift_model_schema(%s::jsonb)", (json.dumps(schema),)
    ).fetchone()
    assert served is not None
    assert served[0] == model_schema(schema)
    assert not set(REFUSED_AT_TOP) & set(served[0])


def test_branch_properties_become_optional_arguments() -> None:
    assert model_schema(SCHEMAS[1]) == {
        "type": "object",
        "properties": {"yaml": STRING, "dir": {"type": "integer"}, "verbose": {"type": "boolean"}},
    }
    assert model_schema(SCHEMAS[2])["properties"] == {
        "mode": {"type": "string", "enum": ["a", "b"]},
        "x": STRING,
    }
    assert model_schema(SCHEMAS[3]) is SCHEMAS[3]


@pytest.fixture
def agent(admin: Caller) -> Caller:
    tools = [
        {"name": f"report_{i}", "description": "Export the report", "input_schema": schema}
        for i, schema in enumerate(SCHEMAS)
    ]
    tools.append({"name": "report_long", "description": "Export the report. " + "w" * 2000})
    admin.ok(admin.put("/admin/v1/tools", {"tools": tools}))
    return agent_key(admin, [])


def _select(agent: Caller, fmt: str) -> dict[str, Any]:
    body: dict[str, Any] = agent.ok(
        agent.select("export the report", mode="bm25", k=10, budget_tokens=100_000, format=fmt)
    )
    assert len(body["tools"]) == 5
    return body


def test_anthropic_and_openai_definitions_are_ones_those_apis_accept(
    agent: Caller, admin: Caller
) -> None:
    costs = {t["name"]: t["token_costs"] for t in admin.ok(admin.get("/admin/v1/tools"))["items"]}
    anthropic = _select(agent, "anthropic")
    for definition in anthropic["tools"]:
        assert definition["input_schema"]["type"] == "object"
        assert not set(REFUSED_AT_TOP) & set(definition["input_schema"])
        assert costs[definition["name"]]["anthropic"] == measured(definition)
    openai = _select(agent, "openai")
    for definition in openai["tools"]:
        function = definition["function"]
        assert not set(REFUSED_AT_TOP) & set(function["parameters"])
        assert len(function["description"]) <= OPENAI_DESCRIPTION_LIMIT
        assert costs[function["name"]]["openai"] == measured(definition)
    long = next(d["function"] for d in openai["tools"] if d["function"]["name"] == "report_long")
    assert long["description"] == ("Export the report. " + "w" * 2000)[:1023] + "\u2026"
    assert anthropic["tokens"] == sum(measured(d) for d in anthropic["tools"])
    assert openai["tokens"] == sum(measured(d) for d in openai["tools"])


def test_responses_api_definitions_are_the_chat_ones_at_the_top_and_not_strict(
    agent: Caller, admin: Caller
) -> None:
    """The Responses API takes the Chat Completions fields at the tool's top. Its `strict`
    defaults to true, which these schemas do not meet (not every property is required, no
    `additionalProperties: false`), so every definition says false, as Chat Completions
    assumes."""
    costs = {t["name"]: t["token_costs"] for t in admin.ok(admin.get("/admin/v1/tools"))["items"]}
    chat = {d["function"]["name"]: d["function"] for d in _select(agent, "openai")["tools"]}
    responses = _select(agent, "openai_responses")
    for definition in responses["tools"]:
        assert list(definition) == ["type", "name", "description", "parameters", "strict"]
        assert definition == {"type": "function", **chat[definition["name"]], "strict": False}
        assert costs[definition["name"]]["openai_responses"] == measured(definition)
    assert responses["tokens"] == sum(measured(d) for d in responses["tools"])


def test_mcp_definitions_are_the_tools_as_written(agent: Caller) -> None:
    mcp = _select(agent, "mcp")
    served = {d["name"]: d for d in mcp["tools"]}
    for i, schema in enumerate(SCHEMAS):
        assert served[f"report_{i}"]["inputSchema"] == schema
    assert len(served["report_long"]["description"]) > 2000
