from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    DateTime,
    Double,
    ForeignKeyConstraint,
    Index,
    Integer,
    PrimaryKeyConstraint,
    Text,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY, UUID
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, StrictJSONB, TenantScoped, Timestamped


class SelectionLog(TenantScoped, Base):
    """One row per select: what was asked, what came back, how long it took.

    Range-partitioned by month on `created_at` (migration 0004), hence its place in the key.
    """

    __tablename__ = "selection_logs"
    __table_args__ = (
        PrimaryKeyConstraint("tenant_id", "created_at", "id"),
        ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        # Feedback finds a selection by id alone, in whichever month it lies.
        Index("ix_selection_logs_tenant_id_id", "tenant_id", "id"),
        {"postgresql_partition_by": "RANGE (created_at)"},
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    key_id: Mapped[uuid.UUID | None] = mapped_column()
    roles: Mapped[list[str]] = mapped_column(ARRAY(Text))
    mode: Mapped[str] = mapped_column(Text)
    format: Mapped[str] = mapped_column(Text)
    query: Mapped[str] = mapped_column(Text)
    k: Mapped[int] = mapped_column(Integer)
    budget_tokens: Mapped[int] = mapped_column(Integer)
    tool_ids: Mapped[list[uuid.UUID]] = mapped_column(ARRAY(UUID(as_uuid=True)))
    tool_names: Mapped[list[str]] = mapped_column(ARRAY(Text))
    # Per selected tool: why it is there (core, used, ranked) and its component ranks.
    details: Mapped[list[dict[str, Any]]] = mapped_column(StrictJSONB)
    candidate_count: Mapped[int] = mapped_column(Integer)
    # Tools the query's words matched (BM25's candidates); None in dense mode (migration 0024).
    lexical_count: Mapped[int | None] = mapped_column(Integer)
    tokens: Mapped[int] = mapped_column(Integer)
    catalog_tokens: Mapped[int] = mapped_column(Integer)
    latency_ms: Mapped[float] = mapped_column(Double)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), primary_key=True, server_default=func.now()
    )


class ToolCall(TenantScoped, Timestamped, Base):
    """What the model actually called after a selection (fed back by the agent).

    Partitioned like its selection, by the selection's month, so both go together.
    """

    __tablename__ = "tool_calls"
    __table_args__ = (
        PrimaryKeyConstraint("tenant_id", "selection_created_at", "id"),
        ForeignKeyConstraint(
            ["tenant_id", "selection_created_at", "selection_id"],
            ["selection_logs.tenant_id", "selection_logs.created_at", "selection_logs.id"],
            ondelete="CASCADE",
            name="fk_tool_calls_selection_logs",
        ),
        Index("ix_tool_calls_tenant_id_selection_id", "tenant_id", "selection_id"),
        # A tool's latest calls, in order: the tools called together with it (`toolsift_select`).
        Index(
            "ix_tool_calls_tenant_id_tool_name_selection",
            "tenant_id",
            "tool_name",
            "selection_created_at",
            "selection_id",
        ),
        {"postgresql_partition_by": "RANGE (selection_created_at)"},
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    selection_id: Mapped[uuid.UUID] = mapped_column()
    selection_created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), primary_key=True
    )
    tool_name: Mapped[str] = mapped_column(Text)
    allowed: Mapped[bool] = mapped_column(Boolean)
    success: Mapped[bool | None] = mapped_column(Boolean)


class ToolVersion(TenantScoped, Base):
    """Each version a tool has had, written by a trigger on `tools` (so every write path)."""

    __tablename__ = "tool_versions"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "tool_id"], ["tools.tenant_id", "tools.id"], ondelete="CASCADE"
        ),
    )

    tool_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    description_md5: Mapped[str] = mapped_column(Text)
    changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
