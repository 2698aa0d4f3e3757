"""Alembic environment: metadata from toolsift.models, URL from the caller or the settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from toolsift.config import get_settings, normalise_database_url
from toolsift.models import Base

target_metadata = Base.metadata


def _url() -> str:
    url = context.config.attributes.get("database_url") or get_settings().database_url
    if not url:
        raise RuntimeError("no database URL: set DATABASE_URL or run `toolsift up`")
    return normalise_database_url(str(url))


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
