"""POST /v1/tool-calls: the tool the model called, stored against its selection."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.analytics.seed import OwnerConn
from tests.fixtures.factories import Caller, agent_key, new_tenant, support_catalog
from toolsift.db import Database


def calls(owner_conn: OwnerConn) -> list[tuple[Any, ...]]:
    return owner_conn.execute(
        "SELECT tenant_id, selection_id, selection_created_at, tool_name, allowed, success"
        " FROM tool_calls ORDER BY created_at"
    ).fetchall()


@pytest.fixture
def selection(support_agent: Caller) -> dict[str, Any]:
    body: dict[str, Any] = support_agent.ok(
        support_agent.select("where is my order shipping status", roles=["support"], mode="bm25")
    )
    return body


class TestReportCall:
    def test_a_call_is_stored_against_its_selection(
        self, support_agent: Caller, selection: dict[str, Any], owner_conn: OwnerConn
    ) -> None:
        sid = selection["selection_id"]
        body = support_agent.ok(
            support_agent.post(
                "/v1/tool-calls",
                {"selection_id": sid, "tool": "order_status", "allowed": True, "success": True},
            ),
            201,
        )
        assert (body["selection_id"], body["tool"], body["selected"]) == (sid, "order_status", True)
        logged = owner_conn.execute(
            "SELECT created_at FROM selection_logs WHERE id = %s", (sid,)
        ).fetchone()
        assert logged is not None
        assert calls(owner_conn) == [
            (support_agent.tenant_id, uuid.UUID(sid), logged[0], "order_status", True, True)
        ]

    def test_a_tool_the_select_did_not_offer_is_a_miss(
        self, support_agent: Caller, selection: dict[str, Any], owner_conn: OwnerConn
    ) -> None:
        body = support_agent.ok(
            support_agent.post(
                "/v1/tool-calls",
                {
                    "selection_id": selection["selection_id"],
                    "tool": "issue_refund",
                    "allowed": False,
                },
            ),
            201,
        )
        assert (body["selected"], body["success"]) == (False, None)
        assert [c[3:] for c in calls(owner_conn)] == [("issue_refund", False, None)]

    def test_an_unknown_selection_is_404_and_stores_nothing(
        self, support_agent: Caller, owner_conn: OwnerConn
    ) -> None:
        response = support_agent.post(
            "/v1/tool-calls",
            {"selection_id": str(uuid.uuid4()), "tool": "order_status", "allowed": True},
        )
        assert response.status_code == 404, response.text
        assert response.json()["error"]["field"] == "selection_id"
        assert calls(owner_conn) == []

    def test_another_tenants_selection_is_404_and_stores_nothing(
        self,
        client: TestClient,
        database: Database,
        selection: dict[str, Any],
        owner_conn: OwnerConn,
    ) -> None:
        globex = new_tenant(client, database, "globex")
        support_catalog(globex)
        intruder = agent_key(globex, ["support"])
        response = intruder.post(
            "/v1/tool-calls",
            {"selection_id": selection["selection_id"], "tool": "order_status", "allowed": True},
        )
        assert response.status_code == 404, response.text
        # The same body as for an id that exists nowhere: nothing to probe.
        assert response.json() == {
            "error": {"code": "not_found", "message": "no such selection", "field": "selection_id"}
        }
        assert calls(owner_conn) == []

    def test_another_keys_selection_is_404_and_stores_nothing(
        self, admin: Caller, catalog: dict[str, str], owner_conn: OwnerConn
    ) -> None:
        """A supervisor's selection holds tools a support key may not see: reporting on it
        would confirm their names (`selected`) and write into the other key's figures."""
        supervisor = agent_key(admin, ["support", "billing"])
        support = agent_key(admin, ["support"])
        made = supervisor.ok(supervisor.select("refund the customer order payment"))
        assert "issue_refund" in [t["name"] for t in made["tools"]]
        for tool in ("issue_refund", "no_such_tool"):
            response = support.post(
                "/v1/tool-calls",
                {"selection_id": made["selection_id"], "tool": tool, "allowed": False},
            )
            assert response.status_code == 404, response.text
            assert response.json() == {
                "error": {
                    "code": "not_found", "message": "no such selection", "field": "selection_id",
                }
            }  # fmt: skip
        assert calls(owner_conn) == []
        own = {"selection_id": made["selection_id"], "tool": "issue_refund", "allowed": True}
        assert supervisor.ok(supervisor.post("/v1/tool-calls", own), 201)["selected"] is True

    @pytest.mark.parametrize(
        ("change", "field"),
        [
            ({"selection_id": "not-a-uuid"}, "selection_id"),
            ({"tool": "no spaces allowed"}, "tool"),
            ({"tool": "x" * 65}, "tool"),
            ({"allowed": "perhaps"}, "allowed"),
            ({"allowed": "yes"}, "allowed"),
            ({"allowed": 1}, "allowed"),
            ({"success": "sometimes"}, "success"),
            ({"success": "true"}, "success"),
            ({"extra": 1}, "extra"),
        ],
    )
    def test_bad_input_names_the_field_and_stores_nothing(
        self,
        support_agent: Caller,
        selection: dict[str, Any],
        owner_conn: OwnerConn,
        change: dict[str, Any],
        field: str,
    ) -> None:
        body = {"selection_id": selection["selection_id"], "tool": "order_status", "allowed": True}
        response = support_agent.post("/v1/tool-calls", {**body, **change})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == field
        assert calls(owner_conn) == []

    def test_missing_fields_are_named(self, support_agent: Caller, owner_conn: OwnerConn) -> None:
        response = support_agent.post("/v1/tool-calls", {"tool": "order_status"})
        assert response.status_code == 422
        fields = {e["field"] for e in response.json()["error"]["errors"]}
        assert fields == {"selection_id", "allowed"}
        assert calls(owner_conn) == []

    def test_an_admin_key_may_not_report(
        self, admin: Caller, selection: dict[str, Any], owner_conn: OwnerConn
    ) -> None:
        response = admin.post(
            "/v1/tool-calls",
            {"selection_id": selection["selection_id"], "tool": "order_status", "allowed": True},
        )
        assert response.status_code == 403
        assert calls(owner_conn) == []


def test_a_selection_deleted_while_its_call_is_stored_is_a_404(
    support_agent: Caller, selection: dict[str, Any], owner_conn: OwnerConn, database_url: str
) -> None:
    """Retention (or the tenant's delete) removes the selection after the call has read it:
    the insert's foreign key fails, and the answer is the 404 of a missing selection."""
    import threading

    import psycopg

    from tests.fixtures.db import wait_for_lock_waiters

    sid = selection["selection_id"]
    answer: dict[str, Any] = {}
    plain = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain) as deleting:
        deleting.execute("DELETE FROM selection_logs WHERE id = %s", (sid,))
        body = {"selection_id": sid, "tool": "order_status", "allowed": True}
        call = threading.Thread(
            target=lambda: answer.update(response=support_agent.post("/v1/tool-calls", body))
        )
        call.start()
        wait_for_lock_waiters(owner_conn, 1)
        deleting.commit()
        call.join(timeout=30)
    response = answer["response"]
    assert response.status_code == 404, response.text
    assert response.json()["error"]["field"] == "selection_id"
    assert calls(owner_conn) == []
