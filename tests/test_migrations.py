"""The migrations and the ORM models describe the same schema."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from toolsift.config import normalise_database_url
from toolsift.models import Base


def test_models_match_the_migrated_schema(database_url: str) -> None:
    engine = create_engine(normalise_database_url(database_url))
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "compare_server_default": False}
            )
            diff = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert diff == []
