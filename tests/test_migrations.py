"""The migrations and the ORM models describe the same schema."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text

from toolsift.config import normalise_database_url
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
