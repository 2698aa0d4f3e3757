"""`format=anthropic_tool_reference`: the same selection, as `tool_reference` blocks."""

from __future__ import annotations

from tests.fixtures.factories import Caller


class TestToolReferenceFormat:
    def test_names_only_in_the_same_order_as_full_definitions(self, support_agent: Caller) -> None:
        query = "where is my order and refund it"
        full = support_agent.ok(support_agent.select(query, format="anthropic"))
        refs = support_agent.ok(support_agent.select(query, format="anthropic_tool_reference"))
        assert full["tools"], "the query must select something"
        assert refs["format"] == "anthropic_tool_reference"
        assert refs["tools"] == [
            {"type": "tool_reference", "tool_name": t["name"]} for t in full["tools"]
        ]
        # The budget still counts full definitions: the client loads them when referenced.
        assert refs["tokens"] == full["tokens"]

    def test_permission_filter_holds(self, admin: Caller, support_agent: Caller) -> None:
        body = support_agent.ok(
            support_agent.select(
                "issue a refund and delete the account",
                roles=["support"],
                format="anthropic_tool_reference",
                k=50,
                budget_tokens=200_000,
            )
        )
        names = {t["tool_name"] for t in body["tools"]}
        assert "issue_refund" not in names
        assert "delete_account" not in names
