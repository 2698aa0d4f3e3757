"""Production databases rarely hand out a superuser: migrate with a CREATEROLE login that owns
its database, and run partition upkeep and analyst logins through it.

Its own server, because the roles of the other tests' server were made by a superuser.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from toolsift.access.schemas import PermissionCreate
from toolsift.access.service import access
from toolsift.analytics.service import analytics
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.embedded.postgres import EmbeddedPostgres
from toolsift.migrate import upgrade
from toolsift.tenants.schemas import TenantCreate
from toolsift.tenants.service import tenant as tenant_service
from toolsift.tools.schemas import ToolCreate
from toolsift.tools.service import tool as tool_service

# A learned query of the tenant's one tool, called `age` days ago (its permission copied).
LEARNED = """
INSERT INTO learned_queries (tenant_id, tool_id, query_hash, query, required_permission_id,
    position, last_called_at)
SELECT t.tenant_id, t.id, sha256(convert_to(:q, 'UTF8')), :q, t.required_permission_id,
       t.position, now() - make_interval(days => :age)
  FROM tools t WHERE t.tenant_id = :t
"""

LOG = """
INSERT INTO selection_logs (tenant_id, id, roles, mode, format, query, k, budget_tokens,
    tool_ids, tool_names, details, candidate_count, tokens, catalog_tokens, latency_ms,
    created_at)
VALUES (:t, gen_random_uuid(), '{}', 'bm25', 'anthropic', 'q', 5, 10, '{}', '{}', '[]', 0,
        3, 30, 1, now() - make_interval(days => :age))
"""


@pytest.fixture(scope="module")
def owner_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = EmbeddedPostgres(Path(tmp_path_factory.mktemp("pg-owner")) / "data", fast=True)
    superuser = server.start()
    try:
        with psycopg.connect(superuser, autocommit=True) as conn:
            conn.execute("CREATE ROLE site_owner LOGIN CREATEROLE")
            conn.execute("CREATE DATABASE site OWNER site_owner")
        site = make_url(superuser).set(database="site")
        # What a DBA does once: pgvector is not a trusted extension.
        with psycopg.connect(site.render_as_string(hide_password=False), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
        url = site.set(username="site_owner").render_as_string(hide_password=False)
        upgrade(url)
        yield url
    finally:
        server.stop()


def tenant(database: Database, name: str) -> UUID:
    with database.unit_of_work(None) as session:
        return tenant_service.create(session, TenantCreate(name=name), pepper="p").tenant.id


def test_upkeep_and_analysts_without_a_superuser(owner_url: str) -> None:
    plain = owner_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain) as conn:
        assert conn.execute(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone() == (False,)
    database = Database(owner_url, pool_size=1)
    try:
        a, b = tenant(database, "a"), tenant(database, "b")
        for t, ages in ((a, [0, 400]), (b, [0, 20])):
            with database.unit_of_work(t, permissions=ALL_PERMISSIONS) as session:
                if t == a:
                    session.execute(
                        text("UPDATE tenants SET settings = '{\"log_retention_days\": 10}'")
                    )
                for age in ages:
                    session.execute(text(LOG), {"t": t, "age": age})
                # A guarded tool: the upkeep reaches its queries past tool_permission.
                access.create_permission(session, t, PermissionCreate(name="orders.read"))
                tool = ToolCreate(name="order_status", required_permission="orders.read")
                tool_service.upsert(session, t, [tool])
                for age in ages:
                    session.execute(text(LEARNED), {"t": t, "age": age, "q": f"q{age}"})
        # Cross-tenant reads and deletes under FORCE RLS, by the definer functions alone.
        with database.unit_of_work(None) as session:
            result = analytics.maintain_partitions(
                session, months_ahead=2, default_retention_days=30
            )
        assert result.deleted == 1  # a's 400-day-old row; b keeps its 20-day-old one (30 days)
        assert result.forgotten == 1  # and so with the learned queries
        assert len(result.dropped) == 1
        with database.unit_of_work(a, permissions=ALL_PERMISSIONS) as session:
            assert session.scalar(text("SELECT count(*) FROM selection_logs")) == 1
            assert session.scalars(text("SELECT query FROM learned_queries")).all() == ["q0"]
            login = analytics.create_analyst_login(session)
        with database.unit_of_work(b, permissions=ALL_PERMISSIONS) as session:
            assert session.scalar(text("SELECT count(*) FROM selection_logs")) == 2
            assert session.scalar(text("SELECT count(*) FROM learned_queries")) == 2

        analyst = make_url(owner_url).set(
            drivername="postgresql", username=login.login, password=login.password
        )
        with psycopg.connect(
            analyst.render_as_string(hide_password=False), options=login.options
        ) as conn:
            assert conn.execute("SHOW app.permissions").fetchone() == ("*",)
            rows = conn.execute("SELECT selections FROM analytics.tokens_per_turn").fetchall()
            assert rows == [(1,)]
            assert conn.execute("SHOW default_transaction_read_only").fetchone() == ("on",)
        with database.unit_of_work(a, permissions=ALL_PERMISSIONS) as session:
            analytics.drop_analyst_login(session)
    finally:
        database.dispose()
