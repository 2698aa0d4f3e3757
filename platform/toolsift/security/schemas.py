from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, Field

from ..kit.schemas import ReadSchema


class AuditRead(ReadSchema):
    id: UUID
    created_at: datetime
    actor: str
    actor_key_id: UUID | None
    request_id: str | None
    action: str
    table_name: str
    row_key: dict[str, Any]
    changed: list[str]
    before_hash: str | None
    after_hash: str | None
    seq: int | None
    prev_hash: str | None
    entry_hash: str | None


class AuditPage(BaseModel):
    """Newest first; `next_cursor` is passed back as `before`."""

    items: list[AuditRead]
    next_cursor: str | None = Field(
        description="Opaque and URL-safe: pass it back as it is.",
        examples=["YQAGYdnochEI1fQmzMZQTxawCodj5XjHzA"],
    )


class ChainBreak(BaseModel):
    id: UUID
    seq: int
    reason: str


class AuditChain(BaseModel):
    ok: bool
    entries: int = Field(description="Chained entries that verified, oldest first.")
    head: str = Field(description="Hash of the last verified entry; keep a copy elsewhere.")
    broken_at: ChainBreak | None = None
