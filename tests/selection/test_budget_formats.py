"""The budget, the reported tokens and the log count each tool in the format it is sent in."""

from __future__ import annotations

import json
import math
from typing import Any

import psycopg
import pytest

from tests.fixtures.factories import Caller, agent_key
from tests.fixtures.jsontext import served_tools

OwnerConn = psycopg.Connection[tuple[Any, ...]]
QUERY = "export the ledger"
# Every format the budget counts (a tool reference is budgeted as its `anthropic` definition).
FORMATS = ["anthropic", "openai", "openai_responses", "mcp"]
# An MCP definition carries the title, the output schema and the annotations; the others not.
OUTPUT = {
    "type": "object",
    "properties": {f"column_{i}": {"type": "string", "description": "x" * 100} for i in range(20)},
}


def measured(definitions: list[dict[str, Any]]) -> int:
    """What the server says a definition costs: about 4 bytes of compact JSON a token."""
    return sum(
        math.ceil(len(json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode()) / 4)
        for d in definitions
    )


@pytest.fixture
def agent(admin: Caller) -> Caller:
    tools = [
        {
            "name": "export_ledger",
            "title": "Export the ledger",
            "description": "Export the ledger as rows.",
            "output_schema": OUTPUT,
            "annotations": {"readOnlyHint": True},
        },
        {"name": "ledger_total", "description": "The total of the ledger."},
        {"name": "ledger_export_status", "description": "Whether an export of the ledger ran."},
    ]
    admin.ok(admin.put("/admin/v1/tools", {"tools": tools}))
    return agent_key(admin, [])


@pytest.mark.parametrize("fmt", FORMATS)
def test_tokens_are_those_of_the_definitions_returned(
    agent: Caller, admin: Caller, owner_conn: OwnerConn, fmt: str
) -> None:
    body = agent.ok(agent.select(QUERY, mode="bm25", format=fmt, budget_tokens=200_000))
    assert len(body["tools"]) == 3
    assert body["tokens"] == measured(body["tools"])
    listed = admin.ok(admin.get("/admin/v1/tools"))["items"]
    assert body["tokens"] == sum(t["token_costs"][fmt] for t in listed)
    row = owner_conn.execute(
        "SELECT tokens, catalog_tokens FROM selection_logs WHERE id = %s", (body["selection_id"],)
    ).fetchone()
    assert row == (body["tokens"], body["tokens"])  # the whole catalog was sent


def test_an_mcp_budget_is_not_overrun_by_what_only_mcp_sends(agent: Caller, admin: Caller) -> None:
    costs = {t["name"]: t["token_costs"] for t in admin.ok(admin.get("/admin/v1/tools"))["items"]}
    rich = costs["export_ledger"]
    assert rich["mcp"] > 5 * rich["anthropic"]
    # Room for the tool as Anthropic sends it, not as MCP does.
    budget = rich["anthropic"] + 5
    anthropic = agent.ok(agent.select(QUERY, mode="bm25", k=1, budget_tokens=budget))
    assert [t["name"] for t in anthropic["tools"]] == ["export_ledger"]
    mcp = agent.ok(
        agent.select(QUERY, mode="bm25", k=1, budget_tokens=budget, format="mcp", debug=True)
    )
    assert "export_ledger" not in [t["name"] for t in mcp["tools"]]
    assert measured(mcp["tools"]) == mcp["tokens"] <= budget
    reasons = {c["name"]: c["reason"] for c in mcp["candidates"]}
    assert reasons["export_ledger"] == "over_budget"


def test_openai_counts_its_wrapper(agent: Caller) -> None:
    anthropic = agent.ok(agent.select(QUERY, mode="bm25", budget_tokens=200_000))
    openai = agent.ok(agent.select(QUERY, mode="bm25", budget_tokens=200_000, format="openai"))
    assert openai["tokens"] > anthropic["tokens"]
    # Exactly what the wrapper adds: `{"type":"function","function":...}`, and `parameters`
    # for `input_schema`: 29 bytes a tool.
    assert measured(openai["tools"]) == openai["tokens"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("rewritten", [False, True], ids=["as-written", "rewritten"])
def test_numbers_cost_what_the_server_writes_out(
    admin: Caller, owner_conn: OwnerConn, fmt: str, rewritten: bool
) -> None:
    """A schema is served as stored, Python's spelling of its numbers (`1e+308`). Where the
    model APIs' rules rewrite it (a top-level `anyOf`, in every format but `mcp`) jsonb
    builds it, and prints numbers without an exponent: `1e308` as 309 digits,
    `-1.5e-10` as `-0.00000000015`. The budget counts what is served, either way."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "amount": {"type": "number", "maximum": 1e308, "minimum": -1.5e-10},
            "step": {"type": "number", "multipleOf": 0.1, "default": 2.5, "enum": [1e20, 3]},
            # numeric has no negative zero: four of them are a token
            "offset": {"type": "number", "default": -0.0, "enum": [-0.0, -0.0, -0.0]},
        },
    }
    if rewritten:
        schema["anyOf"] = [{"required": ["amount"]}, {"required": ["step"]}]
    tool = {"name": "ledger_amount", "description": "An amount.", "input_schema": schema}
    admin.ok(admin.post("/admin/v1/tools", tool), 201)
    agent = agent_key(admin, [])
    response = agent.select(QUERY, mode="bm25", format=fmt, budget_tokens=200_000)
    body = response.json()
    assert len(body["tools"]) == 1
    wire = served_tools(response.text)
    if rewritten and fmt != "mcp":
        assert "1" + "0" * 308 in wire
        assert "-0.00000000015" in wire
    else:
        assert "1e+308" in wire
        assert "-1.5e-10" in wire
    assert json.loads(wire) == body["tools"]  # compacting changed nothing but blanks
    assert body["tokens"] == math.ceil(len(wire[1:-1].encode()) / 4)
    listed = admin.ok(admin.get("/admin/v1/tools"))["items"]
    assert body["tokens"] == listed[0]["token_costs"][fmt]


@pytest.mark.parametrize("fmt", FORMATS)
def test_text_beyond_ascii_costs_what_the_server_writes_out(admin: Caller, fmt: str) -> None:
    """Accents, curly quotes, CJK and emoji are served as UTF-8, not as `\\u` escapes (six
    or twelve bytes each), and counted as such; escapes that JSON requires stay escapes."""
    text = 'Résumé\u2019s \u201cétat\u201d 日本語の検索 😀 tab\there, quote " and line\u2028end'
    schema = {"type": "object", "properties": {"query": {"type": "string", "description": text}}}
    tool = {
        "name": "ledger_search",
        "title": "Recherche €",
        "description": f"Search. {text}",
        "input_schema": schema,
        "output_schema": {"type": "object", "description": text},
        "annotations": {"title": text},
    }
    admin.ok(admin.post("/admin/v1/tools", tool), 201)
    agent = agent_key(admin, [])
    response = agent.select(QUERY, mode="bm25", format=fmt, budget_tokens=200_000)
    body = response.json()
    wire = served_tools(response.text)
    assert "日本語" in wire
    assert "\\u65e5" not in wire
    assert json.loads(wire) == body["tools"]
    assert body["tokens"] == math.ceil(len(wire[1:-1].encode()) / 4)
    listed = admin.ok(admin.get("/admin/v1/tools"))["items"]
    assert body["tokens"] == listed[0]["token_costs"][fmt]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_budget_exactly_filled_takes_the_tool_that_fills_it(agent: Caller, fmt: str) -> None:
    """The budget is inclusive: a tool whose cost equals what is left is taken, one token
    less and it is not."""
    whole = agent.ok(agent.select(QUERY, mode="bm25", format=fmt, budget_tokens=200_000))
    exact = agent.ok(agent.select(QUERY, mode="bm25", format=fmt, budget_tokens=whole["tokens"]))
    assert exact["tools"] == whole["tools"]
    assert exact["tokens"] == whole["tokens"]
    short = agent.ok(
        agent.select(QUERY, mode="bm25", format=fmt, budget_tokens=whole["tokens"] - 1)
    )
    assert len(short["tools"]) == len(whole["tools"]) - 1
