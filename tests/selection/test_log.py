"""Every select writes one log row that analysts can query with plain SQL."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.fixtures.factories import ROLES, Caller

OwnerConn = psycopg.Connection[tuple[Any, ...]]


class TestSelectionLog:
    def test_one_row_per_select_with_what_was_chosen(
        self, support_agent: Caller, admin: Caller, owner_conn: OwnerConn
    ) -> None:
        body = support_agent.ok(
            support_agent.select(
                "where is my order shipping status", roles=["support"], mode="bm25"
            )
        )
        row = owner_conn.execute(
            "SELECT tool_names, roles, mode, tokens, catalog_tokens, candidate_count, details"
            " FROM selection_logs WHERE id = %s",
            (body["selection_id"],),
        ).fetchone()
        assert row is not None
        names, roles, mode, tokens, catalog_tokens, candidates, details = row
        assert names == ["search_help", "order_status"]
        assert (roles, mode, tokens, candidates) == (["support"], "bm25", body["tokens"], 1)
        assert [d["reason"] for d in details] == ["core", "ranked"]
        # The allowed catalog: public tools and those support's permissions unlock.
        allowed = {None, *ROLES["support"]}
        tools = admin.ok(admin.get("/admin/v1/tools"))["items"]
        assert catalog_tokens == sum(
            t["token_cost"] for t in tools if t["required_permission"] in allowed
        )

    def test_catalog_tokens_follow_deletes(
        self, support_agent: Caller, admin: Caller, catalog: dict[str, Any], owner_conn: OwnerConn
    ) -> None:
        def logged() -> int:
            body = support_agent.ok(support_agent.select("refund", roles=["billing"]))
            row = owner_conn.execute(
                "SELECT catalog_tokens FROM selection_logs WHERE id = %s", (body["selection_id"],)
            ).fetchone()
            assert row is not None
            return int(row[0])

        tools = {t["name"]: t for t in admin.ok(admin.get("/admin/v1/tools"))["items"]}
        before = logged()
        admin.ok(admin.delete(f"/admin/v1/tools/{catalog['issue_refund']}"), 204)
        assert logged() == before - tools["issue_refund"]["token_cost"]
