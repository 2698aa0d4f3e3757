from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from .text import escape_unstorable, find_unstorable


class Schema(BaseModel):
    """Base of every API schema: reads ORM objects, refuses unknown fields."""

    model_config = ConfigDict(from_attributes=True, extra="forbid")


class StoredSchema(Schema):
    """Input that is stored: PostgreSQL text and jsonb cannot hold NUL, and no lone surrogate
    (a JSON escape such as "\\ud800") can be encoded to send them, so both are refused here,
    naming the field, rather than failing in the database."""

    @field_validator("*")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        if (found := find_unstorable(value)) is not None:
            path, why = found
            where = f" (at {path})" if path else ""
            # The path may hold the very characters: show them escaped.
            where = escape_unstorable(where)
            raise ValueError(f"{why} are not allowed{where}")
        return value


class ReadSchema(BaseModel):
    model_config = ConfigDict(from_attributes=True)
