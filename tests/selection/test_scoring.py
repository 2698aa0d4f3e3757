"""BM25 as served against the formula, and the budget deep in the ranking."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg

from tests.fixtures.factories import PARAMETERS, Caller
from tests.selection.bm25_formula import bm25_scores

OwnerConn = psycopg.Connection[tuple[Any, ...]]


class TestFormula:
    def test_served_scores_are_bm25_over_the_allowed_catalog(
        self, support_agent: Caller, owner_conn: OwnerConn, catalog: dict[str, Any]
    ) -> None:
        allowed = {UUID(catalog["crm.read"]), UUID(catalog["orders.read"])}
        for query in (
            "refund the payment of this order",
            "look up the customer account and the shipping status of its order",
        ):
            body = support_agent.ok(
                support_agent.select(query, roles=["support"], mode="bm25", debug=True, k=50)
            )
            served = {c["name"]: c["score"] for c in body["candidates"]}
            expected = bm25_scores(owner_conn, support_agent.tenant_id, body["query"], allowed)
            assert served.keys() == expected.keys()
            for name, score in expected.items():
                # Each term's part is rounded to a multiple of 2^-32 before the sum.
                assert abs(served[name] - score) <= 4 * 2**-32, name


def _wide_schema(words: int) -> dict[str, Any]:
    properties = {
        f"field_{i}": {"type": "string", "description": f"Free text number {i} of the form."}
        for i in range(words)
    }
    return {"type": "object", "properties": properties}


class TestBudgetDeepInTheRanking:
    """The budget reads candidate rows a chunk of ranks at a time; many misfits come first."""

    def test_small_tools_after_many_that_do_not_fit(
        self, admin: Caller, support_agent: Caller
    ) -> None:
        large = [
            {
                "name": f"reconcile_invoices_{i}",
                "description": "Reconcile the invoice ledger: match each invoice to a payment.",
                "input_schema": _wide_schema(40),
            }
            for i in range(14)
        ]
        small = [
            {
                "name": f"invoice_note_{i}",
                "description": f"Attach note {i} to an invoice.",
                "input_schema": PARAMETERS,
            }
            for i in range(6)
        ]
        admin.ok(admin.put("/admin/v1/tools", {"tools": large + small}))
        costs = {
            t["name"]: t["token_cost"]
            for t in admin.ok(admin.get("/admin/v1/tools?limit=200"))["items"]
        }
        core = costs["search_help"]
        budget = core + 3 * max(costs[t["name"]] for t in small)
        assert budget < core + min(costs[t["name"]] for t in large)

        query = "reconcile the invoice with its payment"
        debug = support_agent.ok(
            support_agent.select(
                query, roles=["support"], k=3, budget_tokens=budget, debug=True, mode="bm25"
            )
        )
        ranks = {c["name"]: c["rank"] for c in debug["candidates"]}
        # The precondition: every large tool outranks every small one.
        assert max(ranks[t["name"]] for t in large) < min(ranks[t["name"]] for t in small)
        reasons = {c["name"]: c["reason"] for c in debug["candidates"]}
        assert {reasons[t["name"]] for t in large} == {"over_budget"}

        picked = [c["name"] for c in debug["candidates"] if c["reason"] == "selected"]
        assert len(picked) == 3
        assert all(name.startswith("invoice_note_") for name in picked)
        expected = sorted(["search_help", *picked], key=lambda n: (n != "search_help", n))
        plain = support_agent.ok(
            support_agent.select(query, roles=["support"], k=3, budget_tokens=budget, mode="bm25")
        )
        served = [t["name"] for t in plain["tools"]]
        assert served[0] == "search_help"
        assert set(served) == set(expected)
        assert plain["tools"] == debug["tools"]
        assert plain["tokens"] <= budget
