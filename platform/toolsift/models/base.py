from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import DateTime, MetaData, func
from sqlalchemy.dialects.postgresql import JSON, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class StrictJSONB(JSONB):
    """JSONB whose change detection tells 1, 1.0 and true apart.

    The ORM decides whether a column goes into an UPDATE with the type's `compare_values`,
    which is `==` by default; in Python `1 == 1.0 == True`, so a schema whose only change was
    `[0, 1]` to `[false, true]` was hashed and versioned anew but never written.
    """

    def compare_values(self, x: Any, y: Any) -> bool:
        return _canonical(x) == _canonical(y)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


class StrictJSON(JSON):
    """JSON kept as written, keys in their order, with change detection that sees that order.

    For what a model reads: jsonb stores an object's keys shortest first, so a tool's
    parameters would reach the model in an order nobody wrote. A change of order alone is a
    change (written, hashed, versioned), and so is 1 to 1.0 or true.
    """

    def compare_values(self, x: Any, y: Any) -> bool:
        return json_text(x) == json_text(y)


def json_text(value: Any) -> str:
    """JSON as the engine writes it (`Database`), and so as a `json` column serves it:
    compact and UTF-8 as is, the text the token costs count (`tools.definitions`)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: StrictJSONB,
        uuid.UUID: UUID(as_uuid=True),
    }


class TenantScoped:
    """Every tenant table leads its keys with tenant_id (RLS and Citus distribution)."""

    tenant_id: Mapped[uuid.UUID] = mapped_column(primary_key=True, sort_order=-10)


class Timestamped:
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), nullable=False
    )
