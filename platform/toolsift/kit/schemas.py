from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Schema(BaseModel):
    """Base of every API schema: reads ORM objects, refuses unknown fields."""

    model_config = ConfigDict(from_attributes=True, extra="forbid")


class ReadSchema(BaseModel):
    model_config = ConfigDict(from_attributes=True)
