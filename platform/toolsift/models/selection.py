from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Boolean, Double, ForeignKeyConstraint, Index, Integer, Text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, TenantScoped, Timestamped


class SelectionLog(TenantScoped, Timestamped, Base):
    """One row per select: what was asked, what came back, how long it took."""

    __tablename__ = "selection_logs"
    __table_args__ = (
        ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        Index("ix_selection_logs_tenant_id_created_at", "tenant_id", "created_at"),
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
    details: Mapped[list[dict[str, Any]]] = mapped_column(JSONB)
    candidate_count: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int] = mapped_column(Integer)
    catalog_tokens: Mapped[int] = mapped_column(Integer)
    latency_ms: Mapped[float] = mapped_column(Double)


class ToolCall(TenantScoped, Timestamped, Base):
    """What the model actually called after a selection (fed back by the agent)."""

    __tablename__ = "tool_calls"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "selection_id"],
            ["selection_logs.tenant_id", "selection_logs.id"],
            ondelete="CASCADE",
        ),
        Index("ix_tool_calls_tenant_id_selection_id", "tenant_id", "selection_id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    selection_id: Mapped[uuid.UUID] = mapped_column()
    tool_name: Mapped[str] = mapped_column(Text)
    allowed: Mapped[bool] = mapped_column(Boolean)
    success: Mapped[bool | None] = mapped_column(Boolean)
