"""The design note's worked example, end to end through the HTTP API, in every select mode."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.factories import Caller
from toolsift.db import Database

from .conftest import embedded

REFUND = "refund the payment of this order"
SHIPPING = "where is my order shipping status"


@pytest.fixture
def agent(support_agent: Caller, admin: Caller, database: Database, mode: str) -> Caller:
    embedded(database, mode, admin.tenant_id)
    return support_agent


class TestDesignNoteCatalog:
    def test_forbidden_best_match_is_never_returned(self, agent: Caller, mode: str) -> None:
        names = agent.names(REFUND, roles=["support"], mode=mode)
        assert "issue_refund" not in names
        assert "refund_policy" in names

    def test_permitted_caller_gets_the_refund_tool(self, agent: Caller, mode: str) -> None:
        assert "issue_refund" in agent.names(REFUND, roles=["billing"], mode=mode)

    def test_shipping_question_gets_exactly_core_and_order_status(
        self, agent: Caller, mode: str
    ) -> None:
        # BM25 ranks only tools sharing a word; dense ranks every visible tool, so there the
        # claim is about the best one.
        body: dict[str, Any] = {"roles": ["support"], "mode": mode, "k": 5 if mode == "bm25" else 1}
        first = agent.names(SHIPPING, **body)
        second = agent.names(SHIPPING, **body)
        assert first == ["search_help", "order_status"]
        assert second == first

    def test_budget_that_fits_only_the_core_tool(
        self, agent: Caller, admin: Caller, mode: str
    ) -> None:
        tools = admin.ok(admin.get("/admin/v1/tools"))["items"]
        core_cost = next(t["token_cost"] for t in tools if t["name"] == "search_help")
        body = agent.ok(
            agent.select(SHIPPING, roles=["support"], budget_tokens=core_cost, mode=mode)
        )
        assert [t["name"] for t in body["tools"]] == ["search_help"]
        assert body["tokens"] == core_cost
