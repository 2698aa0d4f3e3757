"""The migrations and the ORM models describe the same schema; the last one can be undone."""

from __future__ import annotations

from typing import Any

import psycopg
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from psycopg import sql
from sqlalchemy import create_engine, text

from toolsift.config import normalise_database_url
from toolsift.migrate import alembic_config, ensure_database, upgrade
from toolsift.models import Base


def test_models_match_the_migrated_schema(database_url: str) -> None:
    engine = create_engine(normalise_database_url(database_url))
    try:
        with engine.connect() as connection:
            # Monthly partitions are made at run time; the model describes their parent.
            partitions = set(
                connection.scalars(text("SELECT relname FROM pg_class WHERE relispartition"))
            )

            def include_name(name: str | None, type_: str, _parents: Any) -> bool:
                return not (type_ in ("table", "index") and name in partitions)

            def include_object(
                obj: Any, _name: str | None, type_: str, _reflected: bool, _to: Any
            ) -> bool:
                # A foreign key to a partitioned table has one child constraint per partition.
                return not (
                    type_ == "foreign_key_constraint" and obj.referred_table.name in partitions
                )

            context = MigrationContext.configure(
                connection,
                opts={
                    "compare_type": True,
                    "compare_server_default": False,
                    "include_name": include_name,
                    "include_object": include_object,
                },
            )
            diff = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert partitions, "selection_logs has no partitions: the query is wrong"
    assert diff == []


def _schema(url: str) -> tuple[str, set[tuple[str, ...]]]:
    """The revision, and the app's functions (with their bodies) and columns."""
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        rows = conn.execute(
            "SELECT oid::regprocedure::text, md5(prosrc), coalesce(proconfig::text, '')"
            " FROM pg_proc WHERE proname LIKE 'toolsift%%'"
            " UNION ALL SELECT table_name::text, column_name::text, data_type::text"
            " FROM information_schema.columns WHERE table_schema = 'public'"
        )
        return str(revision[0] if revision else None), {tuple(row) for row in rows}


def test_the_last_migration_downgrades_and_upgrades_again(pg_server: str, worker_id: str) -> None:
    """Undone, it leaves the schema its predecessor makes; redone, the schema of head."""
    plain = pg_server.replace("postgresql+psycopg://", "postgresql://")
    names = [f"toolsift_downgrade_{worker_id}", f"toolsift_previous_{worker_id}"]

    def drop_all() -> None:
        with psycopg.connect(plain, autocommit=True) as conn:
            for name in names:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )

    drop_all()
    url, previous_url = (ensure_database(pg_server, name) for name in names)
    try:
        upgrade(url)
        at_head = _schema(url)
        command.downgrade(alembic_config(url), "-1")
        undone = _schema(url)
        upgrade(previous_url, undone[0])
        assert undone != at_head
        assert undone == _schema(previous_url)
        upgrade(url)
        assert _schema(url) == at_head
    finally:
        drop_all()


def test_0011_fills_the_per_format_costs_the_application_computes(
    pg_server: str, worker_id: str
) -> None:
    """Tools and statistics written at head, the columns dropped (downgrade) and filled
    again by the migration: the same figures as the application's own."""
    from toolsift.db import ALL_PERMISSIONS, Database
    from toolsift.tenants.schemas import TenantCreate
    from toolsift.tenants.service import tenant as tenant_service
    from toolsift.tools.schemas import ToolCreate
    from toolsift.tools.service import tool as tool_service

    plain = pg_server.replace("postgresql+psycopg://", "postgresql://")
    name = f"toolsift_backfill_{worker_id}"

    def drop() -> None:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def figures() -> set[tuple[Any, ...]]:
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            conn.execute("SET row_security = off")
            tools = conn.execute(
                "SELECT name, token_cost, openai_token_cost, mcp_token_cost FROM tools"
            ).fetchall()
            stats = conn.execute(
                "SELECT permission_key::text, total_tokens, openai_total_tokens, mcp_total_tokens"
                " FROM corpus_stats"
            ).fetchall()
            return {("tool", *row) for row in tools} | {("bucket", *row) for row in stats}

    drop()
    url = ensure_database(pg_server, name)
    try:
        upgrade(url)
        database = Database(url, pool_size=1)
        try:
            with database.unit_of_work(None) as session:
                created = tenant_service.create(session, TenantCreate(name="t"), pepper="p")
            tenant_id = created.tenant.id
            output = {"type": "object", "properties": {"rows": {"type": "array"}}}
            items = [
                ToolCreate(name="plain", description="Get an order."),
                ToolCreate(
                    name="rich",
                    title="Export the ledger",
                    description="Export it.",
                    output_schema=output,
                    annotations={"readOnlyHint": True},
                ),
                ToolCreate(name="gone", description="Deleted before the migration."),
            ]
            with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
                tool_service.upsert(session, tenant_id, items)
            with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
                gone = next(
                    t
                    for t in tool_service.list_page(session, after=None, limit=9)[0]
                    if t.name == "gone"
                )
                tool_service.delete(session, gone.id)
        finally:
            database.dispose()
        written = figures()
        rich = next(row for row in written if row[:2] == ("tool", "rich"))
        assert rich[4] > rich[2] + 20  # the MCP definition carries title and output schema
        command.downgrade(alembic_config(url), "0010")
        upgrade(url)
        assert figures() == written
    finally:
        drop()
