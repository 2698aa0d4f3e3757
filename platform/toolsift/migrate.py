"""Schema changes go through Alembic only; the app never creates tables itself."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from psycopg import sql
from sqlalchemy import Connection
from sqlalchemy.engine import make_url

from .config import libpq_url, normalise_database_url

# alembic.ini and migrations/ sit at the project root (an installed image sets the variable).
ROOT = Path(os.environ.get("TOOLSIFT_PROJECT_DIR") or Path(__file__).resolve().parents[2])


def alembic_config(url: str) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.attributes["database_url"] = normalise_database_url(url)
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("postgresql://")).get_current_head()


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def ensure_database(server_url: str, name: str, *, template: str | None = None) -> str:
    """Create database `name` on the server if missing; returns its URL."""
    plain = libpq_url(server_url)
    with psycopg.connect(plain, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if template:
                statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
            conn.execute(statement)
    return with_database(server_url, name)


def with_database(url: str, name: str) -> str:
    return (
        make_url(normalise_database_url(url))
        .set(database=name)
        .render_as_string(hide_password=False)
    )
