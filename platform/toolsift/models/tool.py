from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Double,
    ForeignKeyConstraint,
    Index,
    Integer,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, StrictJSON, StrictJSONB, TenantScoped, Timestamped


class Tool(TenantScoped, Timestamped, Base):
    __tablename__ = "tools"
    __table_args__ = (
        UniqueConstraint("tenant_id", "name"),
        UniqueConstraint("tenant_id", "position"),
        ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(
            ["tenant_id", "required_permission_id"],
            ["permissions.tenant_id", "permissions.id"],
            ondelete="RESTRICT",
        ),
        Index("ix_tools_tenant_id_required_permission_id", "tenant_id", "required_permission_id"),
        Index(
            "ix_tools_tenant_id_core",
            "tenant_id",
            postgresql_where=text("core AND deleted_at IS NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    position: Mapped[int] = mapped_column(BigInteger)
    name: Mapped[str] = mapped_column(Text)
    title: Mapped[str | None] = mapped_column(Text)
    description: Mapped[str] = mapped_column(Text, default="")
    # `json`, not `jsonb`: served to models in the order written (migration 0020).
    input_schema: Mapped[dict[str, Any]] = mapped_column(StrictJSON)
    # MCP `outputSchema` and `annotations`: shown with the tool; annotations are hints from
    # the tool's author and never decide a permission.
    output_schema: Mapped[dict[str, Any] | None] = mapped_column(StrictJSON)
    annotations: Mapped[dict[str, Any] | None] = mapped_column(StrictJSON)
    examples: Mapped[list[str]] = mapped_column(StrictJSONB, default=list)
    required_permission_id: Mapped[uuid.UUID | None] = mapped_column()
    core: Mapped[bool] = mapped_column(default=False)
    # Prompt tokens of the definition in each format the budget counts (`definitions`):
    # `anthropic` (and its tool references) in token_cost, then `openai`, `mcp` and
    # `openai_responses`, whose wrapper, title, output schema and annotations can make them
    # much larger.
    token_cost: Mapped[int] = mapped_column(Integer)
    openai_token_cost: Mapped[int] = mapped_column(Integer)
    mcp_token_cost: Mapped[int] = mapped_column(Integer)
    openai_responses_token_cost: Mapped[int] = mapped_column(Integer)
    content_hash: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer, default=1)
    source: Mapped[str] = mapped_column(Text, default="manual")
    # Weighted number of indexed terms: the BM25 document length.
    doc_length: Mapped[float] = mapped_column(Double, default=0.0)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), nullable=False
    )
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    @property
    def token_costs(self) -> dict[str, int]:
        return {
            "anthropic": self.token_cost,
            "openai": self.openai_token_cost,
            "mcp": self.mcp_token_cost,
            "openai_responses": self.openai_responses_token_cost,
        }


class ToolTerm(TenantScoped, Base):
    """A BM25 posting. Length and permission are copied in so scoring reads one table.

    The permission copy lets row-level security drop forbidden postings before any score is
    summed; only live (not deleted) tools have postings.
    """

    __tablename__ = "tool_terms"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "tool_id"], ["tools.tenant_id", "tools.id"], ondelete="CASCADE"
        ),
        Index("ix_tool_terms_tenant_id_tool_id", "tenant_id", "tool_id"),
    )

    term: Mapped[str] = mapped_column(Text, primary_key=True)
    tool_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    tf: Mapped[float] = mapped_column(Double)
    doc_length: Mapped[float] = mapped_column(Double)
    required_permission_id: Mapped[uuid.UUID | None] = mapped_column()
    # Registry position, for a deterministic tie-break without touching the tools table.
    position: Mapped[int] = mapped_column(BigInteger)


class TermStat(TenantScoped, Base):
    """Document frequency per tenant and permission bucket (nil UUID = public tools).

    One tenant's text never moves another's scores, and RLS shows a caller only the buckets
    it may use, so a hidden tool never moves the caller's scores either.
    """

    __tablename__ = "term_stats"
    __table_args__ = (ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),)

    term: Mapped[str] = mapped_column(Text, primary_key=True)
    permission_key: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    df: Mapped[int] = mapped_column(Integer)


class CorpusStat(TenantScoped, Base):
    __tablename__ = "corpus_stats"
    __table_args__ = (ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),)

    permission_key: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    doc_count: Mapped[int] = mapped_column(Integer, default=0)
    total_length: Mapped[float] = mapped_column(Double, default=0.0)
    # Prompt tokens of the bucket's tools: what sending the whole allowed catalog would cost,
    # per format as the tools' costs.
    total_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    openai_total_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    mcp_total_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    openai_responses_total_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
