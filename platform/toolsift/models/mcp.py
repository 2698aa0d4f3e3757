from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, StrictJSON, StrictJSONB, TenantScoped, Timestamped


class McpSource(TenantScoped, Timestamped, Base):
    """An MCP server whose catalog a tenant imports.

    Headers, bearer token and the stdio environment are kept only in `secrets`, encrypted
    with the server's secret key; no read path decrypts them except the sync itself.
    """

    __tablename__ = "mcp_sources"
    __table_args__ = (
        UniqueConstraint("tenant_id", "name"),
        UniqueConstraint("tenant_id", "prefix"),
        CheckConstraint("transport IN ('http', 'stdio')", name="transport"),
        CheckConstraint("health IN ('new', 'healthy', 'unhealthy')", name="health"),
        ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(
            ["tenant_id", "default_permission_id"],
            ["permissions.tenant_id", "permissions.id"],
            ondelete="RESTRICT",
        ),
        Index("ix_mcp_sources_tenant_id_next_sync_at", "tenant_id", "next_sync_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    prefix: Mapped[str] = mapped_column(Text)
    transport: Mapped[str] = mapped_column(Text)
    url: Mapped[str | None] = mapped_column(Text)
    command: Mapped[str | None] = mapped_column(Text)
    args: Mapped[list[str]] = mapped_column(StrictJSONB, default=list)
    # Fernet token of {"headers": {...}, "bearer_token": ..., "env": {...}}.
    secrets: Mapped[bytes | None] = mapped_column(LargeBinary)
    # Names only, so an admin can see which headers are set without seeing their values.
    header_names: Mapped[list[str]] = mapped_column(StrictJSONB, default=list)
    env_names: Mapped[list[str]] = mapped_column(StrictJSONB, default=list)
    has_bearer_token: Mapped[bool] = mapped_column(default=False)
    default_permission_id: Mapped[uuid.UUID | None] = mapped_column()
    enabled: Mapped[bool] = mapped_column(default=True)
    # Listen for tools-list-changed notifications (`toolsift mcp listen`).
    listen: Mapped[bool] = mapped_column(default=True)
    sync_interval_seconds: Mapped[int] = mapped_column(Integer, default=3600)
    # The server's own freshness hint for its listing (ttlMs), when it gives one.
    server_ttl_ms: Mapped[int | None] = mapped_column(BigInteger)
    next_sync_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    health: Mapped[str] = mapped_column(Text, default="new")
    last_error: Mapped[str | None] = mapped_column(Text)
    last_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_synced_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0)
    tool_count: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), nullable=False
    )


class McpTool(TenantScoped, Base):
    """One tool of a source, keyed by the server's own name, and its review state.

    `tool_id` is the registry tool the definition maps to. `approved_hash` pins the
    definition an admin approved (or rejected); any other definition goes back to review.
    """

    __tablename__ = "mcp_tools"
    __table_args__ = (
        CheckConstraint(
            "review_state IN ('clean', 'held', 'approved', 'rejected')", name="review_state"
        ),
        ForeignKeyConstraint(
            ["tenant_id", "source_id"],
            ["mcp_sources.tenant_id", "mcp_sources.id"],
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(
            ["tenant_id", "tool_id"], ["tools.tenant_id", "tools.id"], ondelete="CASCADE"
        ),
        ForeignKeyConstraint(
            ["tenant_id", "permission_id"],
            ["permissions.tenant_id", "permissions.id"],
            ondelete="RESTRICT",
        ),
        UniqueConstraint("tenant_id", "tool_id"),
        Index("ix_mcp_tools_tenant_id_review_state", "tenant_id", "review_state"),
    )

    source_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    remote_name: Mapped[str] = mapped_column(Text, primary_key=True)
    tool_id: Mapped[uuid.UUID] = mapped_column()
    # As the server listed it, in its order (`json`, migration 0020).
    definition: Mapped[dict[str, Any]] = mapped_column(StrictJSON)
    definition_hash: Mapped[str] = mapped_column(Text)
    review_state: Mapped[str] = mapped_column(Text)
    findings: Mapped[list[dict[str, str]]] = mapped_column(StrictJSONB, default=list)
    approved_hash: Mapped[str | None] = mapped_column(Text)
    reviewed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # A per-tool permission instead of the source's default (`permission_id` NULL = public).
    permission_override: Mapped[bool] = mapped_column(default=False)
    permission_id: Mapped[uuid.UUID | None] = mapped_column()
    removed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    first_seen_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), nullable=False
    )
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), nullable=False
    )
