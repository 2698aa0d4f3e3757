from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import BigInteger, CheckConstraint, Index, Text, UniqueConstraint
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, StrictJSONB, TenantScoped, Timestamped


class AuditEntry(TenantScoped, Timestamped, Base):
    """One row changed by an admin unit of work: who, what, and hashes before and after.

    Append-only for the application role (INSERT and SELECT only). No foreign key to
    tenants, so the trail outlives what it describes. Each tenant's entries form a hash
    chain: `seq` counts from 1, `prev_hash` is the previous entry's `entry_hash` (64 zeros for
    the first), and `entry_hash` covers every column and `prev_hash`, so an entry changed,
    removed or inserted out of turn breaks the links after it. Entries written before the
    chain existed have no `seq`.
    """

    __tablename__ = "audit_log"
    __table_args__ = (
        CheckConstraint("action IN ('insert', 'update', 'delete')", name="action"),
        Index("ix_audit_log_tenant_id_created_at", "tenant_id", "created_at"),
        UniqueConstraint("tenant_id", "seq"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    actor: Mapped[str] = mapped_column(Text)  # key, operator, cli or sync (see audit.Actor)
    actor_key_id: Mapped[uuid.UUID | None] = mapped_column()
    request_id: Mapped[str | None] = mapped_column(Text)
    action: Mapped[str] = mapped_column(Text)
    table_name: Mapped[str] = mapped_column(Text)
    row_key: Mapped[dict[str, Any]] = mapped_column(StrictJSONB)
    changed: Mapped[list[str]] = mapped_column(ARRAY(Text))
    before_hash: Mapped[str | None] = mapped_column(Text)
    after_hash: Mapped[str | None] = mapped_column(Text)
    seq: Mapped[int | None] = mapped_column(BigInteger)
    prev_hash: Mapped[str | None] = mapped_column(Text)
    entry_hash: Mapped[str | None] = mapped_column(Text)
