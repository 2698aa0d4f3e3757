"""Alembic environment: metadata from toolsift.models, the database objects from the domains'
`sql/` files (toolsift.dbobjects), URL from the caller or the settings."""

from __future__ import annotations

from typing import Any

from alembic import context
from alembic_utils.replaceable_entity import register_entities
from sqlalchemy import Connection, create_engine, pool, text

from toolsift import dbobjects
from toolsift.config import get_settings, normalise_database_url
from toolsift.models import Base

target_metadata = Base.metadata
# Autogenerate compares these with the database too, and writes what makes them agree.
register_entities(dbobjects.entities(), entity_types=dbobjects.ENTITY_TYPES)


def _url() -> str:
    url = context.config.attributes.get("database_url") or get_settings().database_url
    if not url:
        raise RuntimeError("no database URL: set DATABASE_URL or run `toolsift up`")
    return normalise_database_url(str(url))


def _compare_options(connection: Connection) -> dict[str, Any]:
    """What autogenerate leaves out: the monthly partitions of the logs, made at run time
    (the model describes their parent), and the foreign keys each partition inherits."""
    began = not connection.in_transaction()
    partitions = set(connection.scalars(text("SELECT relname FROM pg_class WHERE relispartition")))
    if began:
        # Ends the transaction the read began: alembic would take it for the caller's own
        # and leave the migrations it runs uncommitted.
        connection.rollback()

    def include_name(name: str | None, type_: str, _parents: Any) -> bool:
        return not (type_ in ("table", "index") and name in partitions)

    def include_object(obj: Any, _name: str | None, type_: str, _reflected: bool, _to: Any) -> bool:
        return not (type_ == "foreign_key_constraint" and obj.referred_table.name in partitions)

    return {
        "compare_type": True,
        "compare_server_default": False,
        "include_name": include_name,
        "include_object": include_object,
    }


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection, target_metadata=target_metadata, **_compare_options(connection)
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        _run(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
