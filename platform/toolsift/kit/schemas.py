from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from .text import find_nul


class Schema(BaseModel):
    """Base of every API schema: reads ORM objects, refuses unknown fields."""

    model_config = ConfigDict(from_attributes=True, extra="forbid")


class StoredSchema(Schema):
    """Input that is stored: PostgreSQL text and jsonb cannot hold NUL, so it is refused here,
    naming the field, rather than failing in the database."""

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if (path := find_nul(value)) is not None:
            where = f" (at {path})".replace("\x00", "\\0") if path else ""
            raise ValueError(f"NUL characters are not allowed{where}")
        return value


class ReadSchema(BaseModel):
    model_config = ConfigDict(from_attributes=True)
