"""DELETE /admin/v1/tenants/{id}: a tenant and everything it owns go, nothing of another."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql

from tests.fixtures.db import wait_for_lock_waiters
from tests.fixtures.factories import (
    PEPPER,
    Caller,
    agent_key,
    embed_pending,
    new_tenant,
    tool_body,
)
from tests.fixtures.factories import support_catalog as load_support_catalog
from tests.fixtures.mcp import OPERATOR_KEY
from tests.mcp.servers.live import LiveServer, tool
from toolsift.config import Settings
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.tenants.service import tenant as tenant_service

OPERATOR = {"Authorization": f"Bearer {OPERATOR_KEY}"}
OwnerConn = psycopg.Connection[tuple[Any, ...]]


def tenant_tables(conn: OwnerConn) -> list[str]:
    """Every table of the schema with a tenant_id column, partitions' parents included."""
    rows = conn.execute(
        """
        SELECT c.relname FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
        ORDER BY 1
        """
    ).fetchall()
    return [str(r[0]) for r in rows]


def rows_by_table(conn: OwnerConn, tenant_id: str) -> dict[str, int]:
    counts = {}
    for table in tenant_tables(conn):
        query = sql.SQL("SELECT count(*) FROM {} WHERE tenant_id = %s").format(
            sql.Identifier(table)
        )
        row = conn.execute(query, (tenant_id,)).fetchone()
        assert row is not None
        counts[table] = int(row[0])
    return {table: count for table, count in counts.items() if count}


def delete(client: TestClient, tenant_id: object, headers: dict[str, str] = OPERATOR) -> Any:
    return client.delete(f"/admin/v1/tenants/{tenant_id}", headers=headers)


def debug_scores(agent: Caller) -> list[tuple[str, Any]]:
    answer = agent.ok(
        agent.select("refund the payment of this order", roles=["billing"], mode="bm25", debug=True)
    )
    return [(c["name"], c["score"]) for c in answer["candidates"]]


@pytest.fixture
def world(
    admin: Caller, support_agent: Caller, server: LiveServer, database: Database
) -> dict[str, Any]:
    """A tenant with something in every kind of table: tools and their index and vectors,
    roles, keys, an MCP source whose permission is in use, logs, a tool call, an analyst."""
    server.tools = [tool("lookup", "Look up a parcel by its tracking number.")]
    source = admin.ok(
        admin.post(
            "/admin/v1/mcp/sources",
            {
                "name": "srv",
                "transport": "http",
                "url": server.url,
                "default_permission": "crm.read",
            },
        ),
        201,
    )
    admin.ok(admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync"))
    assert embed_pending(database, admin.tenant_id) > 0
    selection = support_agent.ok(support_agent.select("where is my order", roles=["support"]))
    support_agent.ok(
        support_agent.post(
            "/v1/tool-calls",
            {"selection_id": selection["selection_id"], "tool": "order_status", "allowed": True},
        ),
        201,
    )
    analyst = admin.ok(admin.post("/admin/v1/analytics/analyst"), 201)
    return {"analyst": analyst["login"]}


class TestDeleteTenant:
    def test_removes_every_row_of_the_tenant_and_nothing_of_another(
        self,
        client: TestClient,
        admin: Caller,
        support_agent: Caller,
        world: dict[str, Any],
        database: Database,
        owner_conn: OwnerConn,
    ) -> None:
        other = new_tenant(client, database, "globex")
        load_support_catalog(other)
        other_agent = agent_key(other, ["support", "billing"])
        scores_before = debug_scores(other_agent)
        other_rows = rows_by_table(owner_conn, str(other.tenant_id))
        held = rows_by_table(owner_conn, str(admin.tenant_id))
        for table in ("tools", "tool_terms", "tool_embeddings", "mcp_sources", "mcp_tools"):
            assert held.get(table), f"the world has no {table} rows: the test proves nothing"
        for table in ("roles", "api_keys", "selection_logs", "tool_calls", "audit_log"):
            assert held.get(table), f"the world has no {table} rows: the test proves nothing"

        assert delete(client, admin.tenant_id).status_code == 204

        assert rows_by_table(owner_conn, str(admin.tenant_id)).keys() == {"audit_log"}
        analyst = owner_conn.execute(
            "SELECT 1 FROM pg_roles WHERE rolname = %s", (world["analyst"],)
        ).fetchone()
        assert analyst is None
        assert rows_by_table(owner_conn, str(other.tenant_id)) == other_rows
        assert debug_scores(other_agent) == scores_before

    def test_its_keys_stop_working_at_the_next_request(
        self, client: TestClient, admin: Caller, support_agent: Caller, catalog: dict[str, str]
    ) -> None:
        assert support_agent.names("where is my order", roles=["support"])
        assert delete(client, admin.tenant_id).status_code == 204
        for caller, path in ((admin, "/admin/v1/tools"), (support_agent, None)):
            response = (
                caller.get(path) if path else caller.select("where is my order", roles=["support"])
            )
            assert response.status_code == 401, response.text

    def test_the_audit_log_keeps_the_delete(
        self, client: TestClient, admin: Caller, catalog: dict[str, str], owner_conn: OwnerConn
    ) -> None:
        assert delete(client, admin.tenant_id).status_code == 204
        last = owner_conn.execute(
            "SELECT actor, action, table_name FROM audit_log WHERE tenant_id = %s"
            " ORDER BY seq DESC LIMIT 1",
            (admin.tenant_id,),
        ).fetchone()
        assert last == ("operator", "delete", "tenants")

    def test_a_second_delete_is_404(self, client: TestClient, admin: Caller) -> None:
        assert delete(client, admin.tenant_id).status_code == 204
        error = delete(client, admin.tenant_id).json()["error"]
        assert (error["code"], error["field"]) == ("not_found", "tenant_id")


def create_keys_until(caller: Caller, stop: threading.Event, statuses: list[int]) -> None:
    while not stop.is_set():
        body = {"name": "k", "scope": "agent", "roles": []}
        statuses.append(caller.post("/admin/v1/keys", body).status_code)


class TestRequestsDuringTheDelete:
    def test_requests_waiting_on_the_tenant_get_401_and_write_nothing(
        self,
        admin: Caller,
        support_agent: Caller,
        database: Database,
        owner_conn: OwnerConn,
    ) -> None:
        """Requests authenticated before the delete committed, and blocked by its row locks
        when they write, end as a 401 (not a 500 of a foreign key or a missing row)."""
        requests = {
            "select": lambda: support_agent.select("where is my order", roles=["support"]),
            "create tool": lambda: admin.post("/admin/v1/tools", tool_body("x_tool", "d")),
            "upsert tools": lambda: admin.put("/admin/v1/tools", {"tools": [tool_body("y", "d")]}),
            "create permission": lambda: admin.post("/admin/v1/permissions", {"name": "z.read"}),
        }
        answers: dict[str, Any] = {}

        def run(name: str) -> None:
            answers[name] = requests[name]()

        audited = rows_by_table(owner_conn, str(admin.tenant_id))["audit_log"]
        threads = [threading.Thread(target=run, args=(name,)) for name in requests]
        with database.unit_of_work(admin.tenant_id, permissions=ALL_PERMISSIONS) as session:
            tenant_service.delete(session)
            for thread in threads:
                thread.start()
            wait_for_lock_waiters(owner_conn, len(threads))
        for thread in threads:
            thread.join(timeout=30)
        for name, response in answers.items():
            assert response.status_code == 401, (name, response.text)
            assert response.json()["error"]["message"] == "this key's tenant was deleted"
        assert answers.keys() == requests.keys()
        assert rows_by_table(owner_conn, str(admin.tenant_id)) == {"audit_log": audited}

    def test_a_delete_among_concurrent_admin_writes_succeeds(
        self, client: TestClient, database: Database
    ) -> None:
        """The delete and the writes take the audit chain's lock and the tenant row in one
        order: no deadlock (the other order failed the delete with a 503 most rounds)."""
        for round_ in range(4):
            busy = new_tenant(client, database, f"busy{round_}")
            stop = threading.Event()
            statuses: list[int] = []

            writers = [
                threading.Thread(target=create_keys_until, args=(busy, stop, statuses))
                for _ in range(4)
            ]
            for writer in writers:
                writer.start()
            while len(statuses) < 8:
                time.sleep(0.01)
            response = delete(client, busy.tenant_id)
            seen = len(statuses)
            while len(statuses) < seen + 4:
                time.sleep(0.01)
            stop.set()
            for writer in writers:
                writer.join(timeout=30)
            assert response.status_code == 204, (round_, response.text)
            assert set(statuses) <= {201, 401}, statuses
            assert statuses[-1] == 401


class TestRefused:
    @pytest.mark.parametrize(
        ("tenant", "status", "field"),
        [(uuid.uuid4(), 404, "tenant_id"), ("not-a-uuid", 422, "tenant_id")],
    )
    def test_an_unknown_or_malformed_id_names_the_field(
        self, client: TestClient, admin: Caller, tenant: object, status: int, field: str
    ) -> None:
        response = delete(client, tenant)
        assert response.status_code == status, response.text
        assert response.json()["error"]["field"] == field
        assert admin.ok(admin.get("/admin/v1/tenant"))["id"] == str(admin.tenant_id)

    def test_without_the_operator_key_nothing_is_deleted(
        self, client: TestClient, admin: Caller, catalog: dict[str, str], owner_conn: OwnerConn
    ) -> None:
        before = rows_by_table(owner_conn, str(admin.tenant_id))
        for headers, status in (
            ({}, 401),
            (admin.headers, 401),
            ({"Authorization": "Bearer wrong-operator-key"}, 401),
        ):
            assert delete(client, admin.tenant_id, headers).status_code == status
        assert rows_by_table(owner_conn, str(admin.tenant_id)) == before


class TestList:
    def test_every_tenant_oldest_first_with_live_tools(
        self, client: TestClient, admin: Caller, catalog: dict[str, str], database: Database
    ) -> None:
        other = new_tenant(client, database, "globex")
        other.ok(other.post("/admin/v1/tools", tool_body("one", "d")), 201)
        gone = other.ok(other.post("/admin/v1/tools", tool_body("two", "d")), 201)
        assert other.delete(f"/admin/v1/tools/{gone['id']}").status_code == 204
        page = client.get("/admin/v1/tenants", headers=OPERATOR).json()
        listed = [(t["id"], t["name"], t["tools"]) for t in page["items"]]
        assert listed == [(str(admin.tenant_id), "acme", 6), (str(other.tenant_id), "globex", 1)]
        assert page["next_cursor"] is None

    def test_pages_follow_the_cursor(self, client: TestClient, database: Database) -> None:
        made = [new_tenant(client, database, f"t{i}").tenant_id for i in range(5)]
        seen: list[str] = []
        after = None
        while True:
            params: dict[str, Any] = {"limit": 2, **({"after": after} if after else {})}
            page = client.get("/admin/v1/tenants", params=params, headers=OPERATOR).json()
            seen += [t["id"] for t in page["items"]]
            assert len(page["items"]) <= 2
            if (after := page["next_cursor"]) is None:
                break
        assert seen == [str(t) for t in made]

    def test_a_full_last_page_has_a_null_cursor(
        self, client: TestClient, database: Database
    ) -> None:
        made = [str(new_tenant(client, database, f"t{i}").tenant_id) for i in range(4)]
        first = client.get("/admin/v1/tenants", params={"limit": 2}, headers=OPERATOR).json()
        params = {"limit": 2, "after": first["next_cursor"]}
        last = client.get("/admin/v1/tenants", params=params, headers=OPERATOR).json()
        assert [t["id"] for t in first["items"] + last["items"]] == made
        assert last["next_cursor"] is None

    def test_a_page_ending_on_a_deleted_tenant_still_leads_on(
        self, client: TestClient, database: Database
    ) -> None:
        made = [new_tenant(client, database, f"t{i}").tenant_id for i in range(3)]
        page = client.get("/admin/v1/tenants", params={"limit": 1}, headers=OPERATOR).json()
        assert delete(client, made[0]).status_code == 204
        params = {"limit": 5, "after": page["next_cursor"]}
        rest = client.get("/admin/v1/tenants", params=params, headers=OPERATOR).json()
        assert [t["id"] for t in rest["items"]] == [str(t) for t in made[1:]]

    def test_refused_without_the_operator_key_or_with_a_bad_cursor(
        self, client: TestClient, admin: Caller
    ) -> None:
        assert client.get("/admin/v1/tenants").status_code == 401
        assert client.get("/admin/v1/tenants", headers=admin.headers).status_code == 401
        for params, status in (({"after": str(uuid.uuid4())}, 422), ({"limit": 0}, 422)):
            response = client.get("/admin/v1/tenants", params=params, headers=OPERATOR)
            assert response.status_code == status, response.text
            assert response.json()["error"]["field"] == next(iter(params))

    def test_a_login_outside_the_observer_role_gets_a_clear_503(
        self, database_url: str, admin: Caller
    ) -> None:
        """Deployments whose API logs in as the app role itself cannot list tenants: the
        observer role is not the app role's to take."""
        from sqlalchemy.engine import make_url

        from toolsift.app import create_app

        as_app = make_url(database_url).set(username="toolsift_app")
        database = Database(as_app.render_as_string(hide_password=False), pool_size=1)
        settings = Settings(
            env="testing", database_url=database.url, key_pepper=PEPPER, operator_key=OPERATOR_KEY
        )
        try:
            with TestClient(create_app(settings, database)) as app_client:
                response = app_client.get("/admin/v1/tenants", headers=OPERATOR)
                assert response.status_code == 503, response.text
                assert "member of toolsift_observer" in response.json()["error"]["message"]
                tenant = app_client.get("/admin/v1/tenant", headers=admin.headers)
                assert tenant.status_code == 200, tenant.text
        finally:
            database.dispose()
