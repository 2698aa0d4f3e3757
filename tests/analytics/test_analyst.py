"""The analyst login: its tenant's analytics only, read-only, whatever it sets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.engine import make_url

from tests.analytics.seed import OwnerConn, Seeded, seed_tenant
from tests.fixtures.factories import Caller, new_tenant, tool_body
from toolsift.analytics.service import VIEWS
from toolsift.db import ALL_PERMISSIONS, Database

Conn = psycopg.Connection[tuple[Any, ...]]


@pytest.fixture
def logins(owner_conn: OwnerConn) -> Iterator[list[str]]:
    """Roles are cluster-wide: whatever a test creates is dropped after it."""
    made: list[str] = []
    yield made
    for login in made:
        owner_conn.execute(f'DROP ROLE IF EXISTS "{login}"')


def connect(database_url: str, login: dict[str, Any]) -> Conn:
    url = make_url(database_url).set(
        drivername="postgresql", username=login["login"], password=login["password"]
    )
    return psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)


def create_login(admin: Caller, logins: list[str]) -> dict[str, Any]:
    login: dict[str, Any] = admin.ok(admin.post("/admin/v1/analytics/analyst"), 201)
    logins.append(login["login"])
    return login


def as_app(database: Database, tenant: Seeded, view: str) -> list[tuple[Any, ...]]:
    with database.unit_of_work(tenant.tenant_id, permissions=ALL_PERMISSIONS) as session:
        return sorted(tuple(r) for r in session.execute(text(f"SELECT * FROM analytics.{view}")))


def as_analyst(conn: Conn, view: str) -> list[tuple[Any, ...]]:
    return sorted(conn.execute(f"SELECT * FROM analytics.{view}").fetchall())


@pytest.fixture
def two(
    admin: Caller, client: TestClient, database: Database, owner_conn: OwnerConn
) -> tuple[Seeded, Seeded, Caller]:
    a = seed_tenant(admin, database, owner_conn)
    other = new_tenant(client, database, "globex")
    b = seed_tenant(other, database, owner_conn)
    other.ok(other.post("/admin/v1/tools", tool_body("globex_only", "Only at globex")), 201)
    return a, b, other


class TestAnalystLogin:
    def test_sees_its_tenant_in_every_view_whatever_it_sets(
        self,
        admin: Caller,
        two: tuple[Seeded, Seeded, Caller],
        database: Database,
        database_url: str,
        logins: list[str],
    ) -> None:
        a, b, other = two
        login = create_login(admin, logins)
        assert login["login"] == f"toolsift_analyst_{a.tenant_id.hex}"
        assert set(login["views"]) == set(VIEWS)
        with connect(database_url, login) as conn:
            for view in VIEWS:
                expected = as_app(database, a, view)
                assert expected, f"{view}: the seed gives rows"
                assert expected != as_app(database, b, view) or view in {
                    "called_tool_recall", "tokens_per_turn", "latency_percentiles",
                    "zero_result_queries", "tool_usage_daily",
                }  # fmt: skip
                assert as_analyst(conn, view) == expected, view
                # The app's own tenant setting, the group role: still tenant A only.
                conn.execute("SELECT set_config('app.tenant_id', %s, false)", (str(b.tenant_id),))
                conn.execute("SET ROLE toolsift_analyst")
                assert as_analyst(conn, view) == expected, view
                conn.execute("RESET ROLE")
                conn.execute("RESET app.tenant_id")
            # Ids of the other tenant's tools never show.
            names = {r[0] for r in conn.execute("SELECT name FROM analytics.tools_never_selected")}
            assert "globex_only" not in names
            tenants = {r[0] for r in conn.execute("SELECT DISTINCT tenant_id FROM tools")}
            assert tenants == {a.tenant_id}
        other_login = create_login(other, logins)
        with connect(database_url, other_login) as conn:
            names = {r[0] for r in conn.execute("SELECT name FROM analytics.tools_never_selected")}
            assert "globex_only" in names
            for view in VIEWS:
                assert as_analyst(conn, view) == as_app(database, b, view), view

    @pytest.mark.parametrize(
        "statement",
        [
            "SELECT * FROM api_keys",
            "SELECT * FROM tenants",
            "SELECT * FROM audit_log",
            "SELECT * FROM outbox",
            "SELECT description FROM tools",
            "SELECT input_schema FROM tools",
            "SELECT key_id FROM selection_logs",
            "SELECT * FROM selection_logs_default",
            "SELECT * FROM tool_calls_default",
            "SELECT * FROM tool_terms",
            "SELECT * FROM analytics.maintain_partitions(1, 1)",
            "SELECT analytics.set_analyst_login('SCRAM-SHA-256$x')",
            "SELECT analytics.drop_analyst_login()",
        ],
    )
    def test_reads_nothing_else(
        self,
        admin: Caller,
        two: tuple[Seeded, Seeded, Caller],
        database_url: str,
        logins: list[str],
        statement: str,
    ) -> None:
        with (
            connect(database_url, create_login(admin, logins)) as conn,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            conn.execute(statement)

    def test_its_statements_stop_after_a_minute_also_after_a_new_password(
        self, admin: Caller, database_url: str, owner_conn: OwnerConn, logins: list[str]
    ) -> None:
        login = create_login(admin, logins)
        with connect(database_url, login) as conn:
            assert conn.execute("SHOW statement_timeout").fetchone() == ("1min",)
        owner_conn.execute(f'ALTER ROLE "{login["login"]}" RESET statement_timeout')
        again = create_login(admin, logins)
        with connect(database_url, again) as conn:
            assert conn.execute("SHOW statement_timeout").fetchone() == ("1min",)

    def test_reads_each_selects_format_and_the_tools_costs_in_every_format(
        self,
        admin: Caller,
        two: tuple[Seeded, Seeded, Caller],
        database_url: str,
        logins: list[str],
    ) -> None:
        # Tokens are counted in the select's format: without it they cannot be read.
        with connect(database_url, create_login(admin, logins)) as conn:
            formats = conn.execute("SELECT DISTINCT format FROM selection_logs").fetchall()
            costs = conn.execute(
                "SELECT token_cost, openai_token_cost, mcp_token_cost,"
                " openai_responses_token_cost FROM tools"
            ).fetchall()
        assert formats
        assert costs
        assert all(openai > anthropic for anthropic, openai, _, _ in costs)
        assert all(responses >= openai for _, openai, _, responses in costs)

    @pytest.mark.parametrize(
        "statement",
        [
            "INSERT INTO tool_calls (tenant_id, id, selection_id, selection_created_at, tool_name,"
            " allowed) SELECT tenant_id, gen_random_uuid(), id, created_at, 'x', true"
            " FROM selection_logs LIMIT 1",
            "UPDATE selection_logs SET query = 'x'",
            "DELETE FROM selection_logs",
            "DELETE FROM tool_versions",
            "TRUNCATE tool_calls",
            "CREATE TABLE mine (x int)",
            "CREATE VIEW analytics.mine AS SELECT 1",
        ],
    )
    def test_writes_nothing(
        self,
        admin: Caller,
        two: tuple[Seeded, Seeded, Caller],
        database_url: str,
        owner_conn: OwnerConn,
        logins: list[str],
        statement: str,
    ) -> None:
        before = owner_conn.execute(
            "SELECT (SELECT count(*) FROM selection_logs), (SELECT count(*) FROM tool_calls)"
        ).fetchone()
        with connect(database_url, create_login(admin, logins)) as conn:
            # Read-only by default; and without the default, no privilege either.
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                conn.execute(statement)
            conn.execute("SET default_transaction_read_only = off")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        after = owner_conn.execute(
            "SELECT (SELECT count(*) FROM selection_logs), (SELECT count(*) FROM tool_calls)"
        ).fetchone()
        assert after == before

    def test_password_shown_once_stored_as_a_scram_verifier(
        self, admin: Caller, owner_conn: OwnerConn, logins: list[str]
    ) -> None:
        first = create_login(admin, logins)

        def stored() -> str:
            row = owner_conn.execute(
                "SELECT rolpassword FROM pg_authid WHERE rolname = %s", (first["login"],)
            ).fetchone()
            assert row is not None
            return str(row[0])

        verifier = stored()
        assert verifier.startswith("SCRAM-SHA-256$")
        assert first["password"] not in verifier
        assert admin.ok(admin.get("/admin/v1/analytics/analyst")) == {"login": first["login"]}
        # Again: same login, a new password.
        second = create_login(admin, logins)
        assert second["login"] == first["login"]
        assert second["password"] != first["password"]
        assert stored() != verifier

    def test_drop(self, admin: Caller, owner_conn: OwnerConn, logins: list[str]) -> None:
        login = create_login(admin, logins)["login"]
        admin.ok(admin.delete("/admin/v1/analytics/analyst"), 204)
        row = owner_conn.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", (login,))
        assert row.fetchone() == (0,)
        assert admin.get("/admin/v1/analytics/analyst").json() == {"login": None}
        assert admin.delete("/admin/v1/analytics/analyst").status_code == 404

    def test_creating_rotating_and_dropping_are_audited_without_the_password(
        self, admin: Caller, logins: list[str]
    ) -> None:
        first = create_login(admin, logins)
        second = create_login(admin, logins)
        admin.ok(admin.delete("/admin/v1/analytics/analyst"), 204)
        items = admin.ok(admin.get("/admin/v1/audit?limit=1000"))["items"]
        trail = [
            (i["action"], i["changed"], i["row_key"], i["actor"])
            for i in reversed(items)
            if i["table_name"] == "analyst_login"
        ]
        key = {"login": first["login"]}
        assert trail == [
            ("insert", ["login", "password"], key, "key"),
            ("update", ["password"], key, "key"),
            ("delete", [], key, "key"),
        ]
        assert first["password"] not in str(items)
        assert second["password"] not in str(items)
        assert admin.ok(admin.get("/admin/v1/audit/verify"))["ok"] is True

    def test_an_agent_key_cannot_make_one(self, support_agent: Caller) -> None:
        assert support_agent.post("/admin/v1/analytics/analyst").status_code == 403
