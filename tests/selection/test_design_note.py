"""The design note's worked example, end to end through the HTTP API."""

from __future__ import annotations

from tests.fixtures.factories import Caller

REFUND = "refund the payment of this order"
SHIPPING = "where is my order shipping status"


class TestDesignNoteCatalog:
    def test_forbidden_best_match_is_never_returned(self, support_agent: Caller) -> None:
        names = support_agent.names(REFUND, roles=["support"])
        assert "issue_refund" not in names
        assert "refund_policy" in names

    def test_permitted_caller_gets_the_refund_tool(self, support_agent: Caller) -> None:
        assert "issue_refund" in support_agent.names(REFUND, roles=["billing"])

    def test_shipping_question_gets_exactly_core_and_order_status(
        self, support_agent: Caller
    ) -> None:
        first = support_agent.names(SHIPPING, roles=["support"])
        second = support_agent.names(SHIPPING, roles=["support"])
        assert first == ["search_help", "order_status"]
        assert second == first

    def test_budget_that_fits_only_the_core_tool(
        self, support_agent: Caller, admin: Caller
    ) -> None:
        tools = admin.ok(admin.get("/admin/v1/tools"))["items"]
        core_cost = next(t["token_cost"] for t in tools if t["name"] == "search_help")
        body = support_agent.ok(
            support_agent.select(SHIPPING, roles=["support"], budget_tokens=core_cost)
        )
        assert [t["name"] for t in body["tools"]] == ["search_help"]
        assert body["tokens"] == core_cost
