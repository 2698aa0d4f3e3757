from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import Field

from ..access.schemas import KeyCreated
from ..kit.schemas import ReadSchema, Schema, StoredSchema


class TenantCreate(StoredSchema):
    name: str = Field(min_length=1, max_length=200, examples=["acme-support"])


class TenantUpdate(StoredSchema):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    settings: dict[str, Any] | None = Field(
        default=None, description="Per-tenant retrieval settings (merged into the current ones)."
    )


class TenantRead(ReadSchema):
    id: UUID
    name: str
    settings: dict[str, Any]
    created_at: datetime


class TenantCreated(Schema):
    tenant: TenantRead
    admin_key: KeyCreated
