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
