"""Row-level security, read from the catalog and exercised through the app's own connections.

Tables are found in pg_catalog (any table with a `tenant_id` column), never from a list, so a
table added later is held to the same rules. The owner login (`owner_conn`) only reads the
catalog and seeds/inspects rows; every behavioural check runs through `Database`, i.e. as
`toolsift_app` with the transaction-local settings the app itself applies.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
import pytest
import sqlalchemy.exc
from sqlalchemy import Connection, select, text
from sqlalchemy.orm import Session

from tests.fixtures.factories import Caller
from toolsift.access.schemas import KeyCreate, PermissionCreate, RoleCreate
from toolsift.access.service import access
from toolsift.config import APP_ROLE, Settings
from toolsift.db import ALL_PERMISSIONS, Database, set_permissions, set_tenant
from toolsift.mcp.fetch import Catalog
from toolsift.mcp.schemas import SourceCreate
from toolsift.mcp.service import mcp
from toolsift.models import (
    EmbeddingRefusal,
    LearnedQuery,
    SelectionLog,
    Tool,
    ToolCall,
    ToolEmbedding,
)
from toolsift.security import audit
from toolsift.tenants.schemas import TenantCreate
from toolsift.tenants.service import tenant as tenant_service
from toolsift.tools.schemas import ToolCreate
from toolsift.tools.service import tool as tool_service

OwnerConn = psycopg.Connection[tuple[Any, ...]]

_TENANT_TABLES = """
SELECT c.relname
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND a.attname = 'tenant_id' AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY c.relname
"""
RLS_ERROR = "violates row-level security policy"


def _quoted(table: str) -> str:
    return '"' + table.replace('"', '""') + '"'


def _tenant_column(table: str) -> str:
    return "id" if table == "tenants" else "tenant_id"


@pytest.fixture(scope="module")
def tenant_tables(owner_conn: OwnerConn) -> list[str]:
    tables = [row[0] for row in owner_conn.execute(_TENANT_TABLES)]
    # Sanity: the catalog query finds the tables the product is built around.
    assert {"tools", "tool_terms", "api_keys", "roles", "permissions"} <= set(tables), tables
    assert "tenants" not in tables
    return tables


@pytest.fixture(scope="module")
def scoped_tables(tenant_tables: list[str]) -> list[str]:
    """Every table whose rows belong to one tenant, `tenants` included (keyed by `id`)."""
    return ["tenants", *tenant_tables]


# The outbox relay reads and claims pending jobs of every tenant (ids and versions, no
# content), only in transactions that set app.relay; tested in tests/embedding/test_outbox.py.
# The MCP scheduler reads due sources' ids across tenants (SELECT only), only in transactions
# that set app.scheduler; tested in tests/mcp/test_sync.py.
RELAY_POLICIES = {
    ("outbox", "relay_read"),
    ("outbox", "relay_claim"),
    ("mcp_sources", "scheduler_read"),
}


# --- the catalog -----------------------------------------------------------------------------


class TestCatalog:
    def test_every_tenant_table_has_forced_rls_and_a_tenant_policy(
        self, owner_conn: OwnerConn, scoped_tables: list[str]
    ) -> None:
        app_oid = owner_conn.execute("SELECT %s::regrole::oid", (APP_ROLE,)).fetchone()
        assert app_oid is not None
        problems: list[str] = []
        for table in scoped_tables:
            row = owner_conn.execute(
                "SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = %s::regclass",
                (table,),
            ).fetchone()
            assert row is not None
            enabled, forced = row
            if not enabled:
                problems.append(f"{table}: ROW LEVEL SECURITY not enabled")
            if not forced:
                problems.append(f"{table}: ROW LEVEL SECURITY not forced (the owner bypasses it)")
            policies = owner_conn.execute(
                """
                SELECT polname, polpermissive, polcmd,
                       pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid),
                       0 = ANY(polroles) OR EXISTS (
                           SELECT 1 FROM unnest(polroles) AS r(oid)
                           WHERE pg_has_role(%s, r.oid, 'USAGE'))
                FROM pg_policy WHERE polrelid = %s::regclass
                """,
                (app_oid[0], table),
            ).fetchall()
            # Policies for other roles (the metrics observer, which the app role may SET but
            # does not inherit) do not widen what the application sees.
            permissive = [p for p in policies if p[1] and p[5]]
            if not any(p[2] == "*" and p[5] for p in permissive):
                problems.append(f"{table}: no permissive FOR ALL policy applying to {APP_ROLE}")
            column = _tenant_column(table)
            for name, _, _, using, check in (p[:5] for p in permissive):
                if (table, name) in RELAY_POLICIES:
                    continue
                # Permissive policies are OR-ed: each one on its own must pin the tenant, or it
                # opens the table to every tenant (e.g. a second, permissive permission policy).
                for kind, expr in (("USING", using), ("WITH CHECK", check or using)):
                    if (
                        expr is None
                        or "current_setting('app.tenant_id'" not in expr
                        or column not in expr
                    ):
                        problems.append(
                            f"{table}.{name}: permissive {kind} does not pin {column}: {expr}"
                        )
        assert problems == []

    def test_permission_policy_is_restrictive(self, owner_conn: OwnerConn) -> None:
        rows = owner_conn.execute(
            """
            SELECT polrelid::regclass::text, polpermissive FROM pg_policy
            WHERE polname = 'tool_permission' ORDER BY 1
            """
        ).fetchall()
        assert rows == [
            ("corpus_stats", False),
            ("learned_queries", False),
            ("term_stats", False),
            ("tool_embeddings", False),
            ("tool_terms", False),
            ("tools", False),
        ]

    def test_keys_and_indexes_lead_with_tenant_id(
        self, owner_conn: OwnerConn, tenant_tables: list[str]
    ) -> None:
        problems: list[str] = []
        for table in tenant_tables:
            constraints = owner_conn.execute(
                """
                SELECT con.conname, con.contype, a.attname, con.confrelid::regclass::text,
                       fa.attname
                FROM pg_constraint con
                LEFT JOIN pg_attribute a
                       ON a.attrelid = con.conrelid AND a.attnum = con.conkey[1]
                LEFT JOIN pg_attribute fa
                       ON fa.attrelid = con.confrelid AND fa.attnum = con.confkey[1]
                WHERE con.conrelid = %s::regclass AND con.contype IN ('p', 'u', 'f', 'x')
                """,
                (table,),
            ).fetchall()
            if not any(c[1] == "p" for c in constraints):
                problems.append(f"{table}: no primary key")
            for name, kind, first, referenced, referenced_first in constraints:
                if first != "tenant_id":
                    problems.append(f"{table}.{name} ({kind}) starts with {first}")
                if kind == "f" and referenced_first != _tenant_column(referenced):
                    problems.append(f"{table}.{name} references {referenced}({referenced_first})")
            indexes = owner_conn.execute(
                """
                SELECT i.indexrelid::regclass::text, a.attname
                FROM pg_index i
                LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                WHERE i.indrelid = %s::regclass
                """,
                (table,),
            ).fetchall()
            if not indexes:
                problems.append(f"{table}: no index at all")
            for name, first in indexes:
                if first != "tenant_id":
                    problems.append(f"{table}: index {name} starts with {first or 'an expression'}")
        assert problems == []

    def test_the_app_role_can_touch_only_rls_tables(
        self, owner_conn: OwnerConn, scoped_tables: list[str]
    ) -> None:
        # A view counts as protected when it runs with its caller's rights (security_invoker):
        # the RLS of the tables below it then applies to whoever reads it.
        reachable = owner_conn.execute(
            """
            SELECT c.relname, c.relkind,
                   CASE WHEN c.relkind = 'v'
                        THEN coalesce('security_invoker=true' = ANY (c.reloptions), false)
                        ELSE c.relrowsecurity AND c.relforcerowsecurity END
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
              AND n.nspname NOT IN ('pg_catalog', 'information_schema')
              AND has_table_privilege(%s, c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE')
            ORDER BY 1
            """,
            (APP_ROLE,),
        ).fetchall()
        assert reachable, "the app role can read nothing: the query is wrong"
        assert [name for name, _, protected in reachable if not protected] == []
        assert {name for name, kind, _ in reachable if kind != "v"} <= set(scoped_tables)
        assert any(kind == "v" for _, kind, _ in reachable), "no analytics view: query is wrong"
        truncatable = owner_conn.execute(
            "SELECT count(*) FROM pg_class WHERE has_table_privilege(%s, oid, 'TRUNCATE')"
            " AND relkind IN ('r', 'p')",
            (APP_ROLE,),
        ).fetchone()
        assert truncatable == (0,), "TRUNCATE ignores row-level security"


class TestAppRole:
    def test_connections_run_as_the_app_role(self, database: Database) -> None:
        # Several connections held at once: every pooled connection, not just the first.
        connections = [database.engine.connect() for _ in range(3)]
        try:
            for conn in connections:
                row = conn.execute(
                    text(
                        "SELECT current_user::text, r.rolsuper, r.rolbypassrls"
                        " FROM pg_roles r WHERE r.rolname = current_user"
                    )
                ).one()
                assert tuple(row) == (APP_ROLE, False, False)
        finally:
            for conn in connections:
                conn.close()
        with database.unit_of_work(None) as session:
            assert session.scalar(text("SELECT current_user::text")) == APP_ROLE

    def test_partitions_are_reached_through_their_parent_only(self, owner_conn: OwnerConn) -> None:
        """Policies of a partitioned table apply to queries through it, not to a partition
        read by name: so no partition may be granted to the app role at all."""
        rows = owner_conn.execute(
            """
            SELECT c.relname, has_table_privilege(%s, c.oid, 'SELECT, INSERT, UPDATE, DELETE')
            FROM pg_class c WHERE c.relispartition AND c.relkind IN ('r', 'p')
            """,
            (APP_ROLE,),
        ).fetchall()
        names = {name for name, _ in rows}
        assert {"selection_logs_default", "tool_calls_default"} <= names
        assert [name for name, granted in rows if granted] == []

    def test_definer_functions_search_the_callers_temporary_schema_last(
        self, owner_conn: OwnerConn
    ) -> None:
        """Unnamed, `pg_temp` is searched first for tables: a caller's temporary `pg_roles`
        would stand in for the catalog in a function running as its owner."""
        rows = owner_conn.execute(
            "SELECT p.oid::regprocedure::text, p.proconfig FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE p.prosecdef AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        assert rows, "no SECURITY DEFINER function found: the query is wrong"
        unsafe = [
            (name, config)
            for name, config in rows
            if not any(
                c.startswith("search_path=") and c.replace(" ", "").endswith(",pg_temp")
                for c in config or []
            )
        ]
        assert unsafe == []

    def test_a_temporary_table_does_not_fool_a_definer_function(
        self, database: Database, admin: Caller
    ) -> None:
        with database.unit_of_work(admin.tenant_id, permissions=ALL_PERMISSIONS) as session:
            session.execute(text("CREATE TEMP TABLE pg_roles (rolname name) ON COMMIT DROP"))
            login = f"toolsift_analyst_{admin.tenant_id.hex}"
            session.execute(text("INSERT INTO pg_roles VALUES (:login)"), {"login": login})
            session.execute(
                text("CREATE TEMP TABLE alembic_version (version_num text) ON COMMIT DROP")
            )
            session.execute(text("INSERT INTO alembic_version VALUES ('spoofed')"))
            assert session.scalar(text("SELECT analytics.analyst_login()")) is None
            assert session.scalar(text("SELECT toolsift_schema_revision()")) != "spoofed"

    def test_the_app_role_is_powerless(self, owner_conn: OwnerConn) -> None:
        row = owner_conn.execute(
            "SELECT rolsuper, rolbypassrls, rolcreaterole, rolcreatedb FROM pg_roles"
            " WHERE rolname = %s",
            (APP_ROLE,),
        ).fetchone()
        assert row == (False, False, False, False)
        owned = owner_conn.execute(
            "SELECT count(*) FROM pg_class WHERE relowner = %s::regrole", (APP_ROLE,)
        ).fetchone()
        assert owned == (0,), "an owner is exempt from (non-forced) RLS and can ALTER policies"
        schemas = owner_conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspowner = %s::regrole", (APP_ROLE,)
        ).fetchone()
        assert schemas == (0,)
        # A member of another role could SET ROLE to it (and to its privileges).
        memberships = owner_conn.execute(
            "SELECT count(*) FROM pg_auth_members WHERE member = %s::regrole", (APP_ROLE,)
        ).fetchone()
        assert memberships == (0,)


# --- behaviour, through the app's connections -------------------------------------------------


@dataclass(frozen=True)
class Seeded:
    tenant_id: UUID
    permission_id: UUID
    public_tool: str
    restricted_tool: str
    mcp_tool: str  # imported from an MCP source; requires the restricted permission


def _seed(database: Database, name: str) -> Seeded:
    """A tenant with a row in every tenant table, written the way the app writes them."""
    with database.unit_of_work(None) as session:
        created = tenant_service.create(session, TenantCreate(name=name), pepper="pepper")
    tenant_id = created.tenant.id
    public, restricted = f"{name}_refund_policy", f"{name}_issue_refund"
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        audit.track(session, audit.Actor("cli"))  # fills audit_log too
        permission = access.create_permission(
            session, tenant_id, PermissionCreate(name="billing.refund")
        )
        access.create_role(
            session, tenant_id, RoleCreate(name="billing", permissions=["billing.refund"])
        )
        key = access.create_key(
            session, tenant_id, KeyCreate(name="bot", scope="agent", roles=["billing"]), pepper="p"
        )
        tool_service.upsert(
            session,
            tenant_id,
            [
                ToolCreate(name=public, description="Explain the refund policy"),
                ToolCreate(
                    name=restricted,
                    description="Refund the order payment",
                    required_permission="billing.refund",
                ),
            ],
        )
        restricted_tool = session.scalars(select(Tool).where(Tool.name == restricted)).one()
        session.add(
            ToolEmbedding(
                tenant_id=tenant_id,
                tool_id=restricted_tool.id,
                model="test-model",
                version=restricted_tool.version,
                dimension=3,
                embedding=[1.0, 0.0, 0.0],
                required_permission_id=restricted_tool.required_permission_id,
                position=restricted_tool.position,
            )
        )
        session.add(
            LearnedQuery(
                tenant_id=tenant_id,
                tool_id=restricted_tool.id,
                query_hash=b"refund the order",
                query="refund the order",
                model="test-model",
                embedding=[1.0, 0.0, 0.0],
                required_permission_id=restricted_tool.required_permission_id,
                position=restricted_tool.position,
            )
        )
        session.add(
            EmbeddingRefusal(
                tenant_id=tenant_id,
                tool_id=restricted_tool.id,
                model="next-model",
                version=restricted_tool.version,
                reason="embedding server answered HTTP 400: input too long",
            )
        )
        log = SelectionLog(
            tenant_id=tenant_id,
            id=uuid.uuid4(),
            key_id=key.id,
            roles=["billing"],
            mode="bm25",
            format="anthropic",
            query="refund",
            k=5,
            budget_tokens=4000,
            tool_ids=[],
            tool_names=[],
            details=[],
            candidate_count=0,
            tokens=0,
            catalog_tokens=0,
            latency_ms=1.0,
        )
        session.add(log)
        session.flush()
        session.add(
            ToolCall(
                tenant_id=tenant_id,
                id=uuid.uuid4(),
                selection_id=log.id,
                selection_created_at=log.created_at,
                tool_name=restricted,
                allowed=True,
            )
        )
        # An MCP source and its tool (mcp_sources, mcp_tools), through the sync's own apply.
        settings = Settings(env="testing")
        source = mcp.create(
            session,
            tenant_id,
            SourceCreate(
                name="srv",
                transport="http",
                url="http://127.0.0.1:9/mcp",
                default_permission="billing.refund",
            ),
            settings=settings,
        )
        catalog = Catalog(
            tools=[{"name": "echo", "inputSchema": {"type": "object"}}], pages=1, ttl_ms=None
        )
        mcp.apply(session, source, catalog, settings=settings)
    return Seeded(tenant_id, permission.id, public, restricted, "srv_echo")


@pytest.fixture
def two_tenants(
    database: Database, owner_conn: OwnerConn, scoped_tables: list[str]
) -> tuple[Seeded, Seeded]:
    a, b = _seed(database, "acme"), _seed(database, "globex")
    for table in scoped_tables:
        column = _tenant_column(table)
        for seeded in (a, b):
            row = owner_conn.execute(
                f"SELECT count(*) FROM {_quoted(table)} WHERE {column} = %s", (seeded.tenant_id,)
            ).fetchone()
            # Otherwise "0 rows" below would prove nothing for this table: extend _seed.
            assert row is not None
            assert row[0] > 0, f"_seed wrote no {table} row"
    return a, b


def _counts(session: Session, tables: list[str]) -> dict[str, int]:
    return {t: int(session.scalar(text(f"SELECT count(*) FROM {_quoted(t)}")) or 0) for t in tables}


def _raw_counts(conn: Connection, tables: list[str]) -> dict[str, int]:
    return {
        t: int(conn.execute(text(f"SELECT count(*) FROM {_quoted(t)}")).scalar_one())
        for t in tables
    }


def _visible_tenants(session: Session, tables: list[str]) -> set[UUID]:
    seen: set[UUID] = set()
    for table in tables:
        column = _tenant_column(table)
        seen |= set(session.scalars(text(f"SELECT DISTINCT {column} FROM {_quoted(table)}")))
    return seen


def _row_of(owner_conn: OwnerConn, table: str, tenant_id: UUID) -> str:
    row = owner_conn.execute(
        f"SELECT to_jsonb(t)::text FROM {_quoted(table)} t"
        f" WHERE t.{_tenant_column(table)} = %s LIMIT 1",
        (tenant_id,),
    ).fetchone()
    assert row is not None
    return str(row[0])


def _insert_copy(session: Session, table: str, row: str) -> None:
    """Insert an exact copy of an existing row. With RLS the policy refuses it; without RLS
    the duplicate key would fail instead, with a different error: so the check below tells
    the two apart."""
    session.execute(
        text(
            f"INSERT INTO {_quoted(table)}"
            f" SELECT * FROM jsonb_populate_record(NULL::{_quoted(table)}, CAST(:row AS jsonb))"
        ),
        {"row": row},
    )


# Tables the app role may only append to: UPDATE and DELETE are refused before RLS is asked.
APPEND_ONLY = {"audit_log", "tool_versions"}


def _assert_rls_refusal(
    error: pytest.ExceptionInfo[sqlalchemy.exc.DBAPIError], table: str = ""
) -> None:
    assert isinstance(error.value.orig, psycopg.errors.InsufficientPrivilege), error.value
    if table in APPEND_ONLY:
        assert f"permission denied for table {table}" in str(error.value.orig)
        return
    assert RLS_ERROR in str(error.value.orig)


class TestTenantScope:
    def test_each_tenant_sees_only_itself(
        self, database: Database, two_tenants: tuple[Seeded, Seeded], scoped_tables: list[str]
    ) -> None:
        for seeded in two_tenants:
            with database.unit_of_work(seeded.tenant_id, permissions=ALL_PERMISSIONS) as session:
                assert _visible_tenants(session, scoped_tables) == {seeded.tenant_id}
                assert all(_counts(session, scoped_tables).values())

    @pytest.mark.parametrize("permissions", ["", ALL_PERMISSIONS])
    def test_no_tenant_sees_no_rows(
        self,
        database: Database,
        two_tenants: tuple[Seeded, Seeded],
        scoped_tables: list[str],
        permissions: str,
    ) -> None:
        with database.unit_of_work(None, permissions=permissions) as session:
            assert _counts(session, scoped_tables) == dict.fromkeys(scoped_tables, 0)

    def test_no_tenant_cannot_insert(
        self,
        database: Database,
        owner_conn: OwnerConn,
        two_tenants: tuple[Seeded, Seeded],
        scoped_tables: list[str],
    ) -> None:
        a, _ = two_tenants
        for table in scoped_tables:
            row = _row_of(owner_conn, table, a.tenant_id)
            with (
                pytest.raises(sqlalchemy.exc.DBAPIError) as error,
                database.unit_of_work(None, permissions=ALL_PERMISSIONS) as session,
            ):
                _insert_copy(session, table, row)
            _assert_rls_refusal(error)

    def test_cross_tenant_insert_is_refused(
        self,
        database: Database,
        owner_conn: OwnerConn,
        two_tenants: tuple[Seeded, Seeded],
        scoped_tables: list[str],
    ) -> None:
        a, b = two_tenants
        for table in scoped_tables:
            row = _row_of(owner_conn, table, b.tenant_id)
            with (
                pytest.raises(sqlalchemy.exc.DBAPIError) as error,
                database.unit_of_work(a.tenant_id, permissions=ALL_PERMISSIONS) as session,
            ):
                _insert_copy(session, table, row)
            _assert_rls_refusal(error)

    def test_cross_tenant_insert_through_the_orm_is_refused(
        self, database: Database, two_tenants: tuple[Seeded, Seeded]
    ) -> None:
        a, b = two_tenants
        with (
            pytest.raises(sqlalchemy.exc.DBAPIError) as error,
            database.unit_of_work(a.tenant_id, permissions=ALL_PERMISSIONS) as session,
        ):
            # The service takes the tenant id as an argument: a wrong one must not get through.
            access.create_permission(session, b.tenant_id, PermissionCreate(name="sneaky"))
        _assert_rls_refusal(error)

    def test_rows_cannot_be_moved_to_another_tenant(
        self,
        database: Database,
        two_tenants: tuple[Seeded, Seeded],
        tenant_tables: list[str],
    ) -> None:
        a, b = two_tenants
        for table in tenant_tables:
            with (
                pytest.raises(sqlalchemy.exc.DBAPIError) as error,
                database.unit_of_work(a.tenant_id, permissions=ALL_PERMISSIONS) as session,
            ):
                session.execute(
                    text(f"UPDATE {_quoted(table)} SET tenant_id = :b WHERE tenant_id = :a"),
                    {"a": a.tenant_id, "b": b.tenant_id},
                )
            _assert_rls_refusal(error, table)

    def test_other_tenants_rows_cannot_be_changed_or_deleted(
        self,
        database: Database,
        owner_conn: OwnerConn,
        two_tenants: tuple[Seeded, Seeded],
        scoped_tables: list[str],
    ) -> None:
        a, b = two_tenants

        def snapshot() -> dict[str, list[str]]:
            return {
                t: [
                    str(r[0])
                    for r in owner_conn.execute(
                        f"SELECT to_jsonb(x)::text FROM {_quoted(t)} x"
                        f" WHERE x.{_tenant_column(t)} = %s ORDER BY 1",
                        (b.tenant_id,),
                    )
                ]
                for t in scoped_tables
            }

        before = snapshot()
        with database.unit_of_work(a.tenant_id, permissions=ALL_PERMISSIONS) as session:
            for table in (t for t in scoped_tables if t not in APPEND_ONLY):
                column = _tenant_column(table)
                params = {"b": b.tenant_id}
                where = f"WHERE {column} = :b"
                touch = f"UPDATE {_quoted(table)} SET {column} = {column} {where} RETURNING 1"
                updated = session.execute(text(touch), params).all()
                remove = f"DELETE FROM {_quoted(table)} {where} RETURNING 1"
                deleted = session.execute(text(remove), params).all()
                assert (table, updated, deleted) == (table, [], [])
        assert snapshot() == before


class TestPermissionPolicy:
    def test_a_tenant_never_sees_another_tenants_public_tools(
        self, database: Database, two_tenants: tuple[Seeded, Seeded]
    ) -> None:
        a, b = two_tenants
        cases = {
            "public only": "",
            "all": ALL_PERMISSIONS,
            "the other tenant's permission ids": str(b.permission_id),
            "own permission": str(a.permission_id),
        }
        for label, permissions in cases.items():
            with database.unit_of_work(a.tenant_id, permissions=permissions) as session:
                tools = set(session.scalars(text("SELECT name FROM tools")))
                posted = set(
                    session.scalars(
                        text(
                            "SELECT DISTINCT t.name FROM tool_terms p"
                            " JOIN tools t ON t.tenant_id = p.tenant_id AND t.id = p.tool_id"
                        )
                    )
                )
                tenants = set(session.scalars(text("SELECT DISTINCT tenant_id FROM tool_terms")))
            expected = {a.public_tool}
            if permissions in (ALL_PERMISSIONS, str(a.permission_id)):
                expected |= {a.restricted_tool, a.mcp_tool}
            assert (label, tools) == (label, expected)
            assert (label, posted) == (label, expected)
            assert (label, tenants) == (label, {a.tenant_id})

    def test_public_only_session_cannot_write_a_restricted_tool(
        self, database: Database, two_tenants: tuple[Seeded, Seeded]
    ) -> None:
        a, _ = two_tenants
        with (
            pytest.raises(sqlalchemy.exc.DBAPIError) as error,
            database.unit_of_work(a.tenant_id, permissions="") as session,
        ):
            session.execute(
                text("UPDATE tool_terms SET required_permission_id = :p"),
                {"p": a.permission_id},
            )
        _assert_rls_refusal(error)


class TestSettingsDoNotLeak:
    @pytest.fixture
    def one_connection(self, database_url: str, database: Database) -> Iterator[Database]:
        """A pool of exactly one connection: the next transaction must reuse it."""
        single = Database(database_url, pool_size=1, max_overflow=0)
        yield single
        single.dispose()

    def test_next_transaction_on_the_same_connection_starts_blank(
        self,
        one_connection: Database,
        two_tenants: tuple[Seeded, Seeded],
        scoped_tables: list[str],
    ) -> None:
        a, b = two_tenants
        settings = text(
            "SELECT pg_backend_pid(), coalesce(current_setting('app.tenant_id', true), ''),"
            " coalesce(current_setting('app.permissions', true), '')"
        )
        with one_connection.unit_of_work(a.tenant_id, permissions=ALL_PERMISSIONS) as session:
            pid, tenant, permissions = session.execute(settings).one()
            assert (tenant, permissions) == (str(a.tenant_id), ALL_PERMISSIONS)
            assert all(_counts(session, scoped_tables).values())

        with one_connection.unit_of_work(None) as session:
            assert session.execute(settings).one() == (pid, "", "")
            assert _counts(session, scoped_tables) == dict.fromkeys(scoped_tables, 0)

        # Switched mid-transaction (as tenant creation does), then a plain connection that
        # applies no scope at all: only transaction-local settings leave it blank.
        with one_connection.unit_of_work(None) as session:
            set_tenant(session, b.tenant_id)
            set_permissions(session, ALL_PERMISSIONS)
            assert _visible_tenants(session, scoped_tables) == {b.tenant_id}
        with one_connection.engine.connect() as conn:
            assert conn.execute(settings).one() == (pid, "", "")
            assert _raw_counts(conn, scoped_tables) == dict.fromkeys(scoped_tables, 0)
            conn.rollback()

    def test_a_failed_transaction_leaves_nothing_behind(
        self,
        one_connection: Database,
        two_tenants: tuple[Seeded, Seeded],
        scoped_tables: list[str],
    ) -> None:
        a, _ = two_tenants

        class Failed(Exception):
            pass

        def fail_inside() -> None:
            with one_connection.unit_of_work(a.tenant_id, permissions=ALL_PERMISSIONS) as session:
                assert all(_counts(session, scoped_tables).values())
                raise Failed

        with pytest.raises(Failed):
            fail_inside()
        with one_connection.engine.connect() as conn:
            assert _raw_counts(conn, scoped_tables) == dict.fromkeys(scoped_tables, 0)
            conn.rollback()


def test_the_insert_probe_fails_differently_without_rls(
    owner_conn: OwnerConn, two_tenants: tuple[Seeded, Seeded], scoped_tables: list[str]
) -> None:
    """Control for the insert checks: the superuser owner bypasses RLS, and the same copy then
    fails on the duplicate key, not on a policy. So a refusal above is RLS and nothing else."""
    a, _ = two_tenants
    for table in scoped_tables:
        row = _row_of(owner_conn, table, a.tenant_id)
        with pytest.raises(psycopg.errors.UniqueViolation):
            owner_conn.execute(
                f"INSERT INTO {_quoted(table)}"
                f" SELECT * FROM jsonb_populate_record(NULL::{_quoted(table)}, %s::jsonb)",
                (row,),
            )
