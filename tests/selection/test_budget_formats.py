"""The budget, the reported tokens and the log count each tool in the format it is sent in."""

from __future__ import annotations

import json
import math
from typing import Any

import psycopg
import pytest

from tests.fixtures.factories import Caller, agent_key

OwnerConn = psycopg.Connection[tuple[Any, ...]]
QUERY = "export the ledger"
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


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "mcp"])
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
