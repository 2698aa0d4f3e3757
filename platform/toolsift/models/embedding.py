from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import VECTOR
from sqlalchemy import (
    BigInteger,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    Text,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, TenantScoped


class ToolEmbedding(TenantScoped, Base):
    """A tool's vector under one model, computed from one version of the tool.

    Permission and position are copies of the tool's (kept in step in the tool's transaction),
    so the same RESTRICTIVE policy as on `tools` drops forbidden vectors before any distance
    is computed. Several models may coexist while a tenant switches: the tenant's
    `embedding_model` says which one serves.
    """

    __tablename__ = "tool_embeddings"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "tool_id"], ["tools.tenant_id", "tools.id"], ondelete="CASCADE"
        ),
    )

    tool_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(Text, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    dimension: Mapped[int] = mapped_column(Integer)
    embedding: Mapped[Any] = mapped_column(VECTOR())
    required_permission_id: Mapped[uuid.UUID | None] = mapped_column()
    position: Mapped[int] = mapped_column(BigInteger)
    # SHA-256 of the text the vector was computed from (`document_text`): a new version of
    # the tool with the same text keeps the vector. Null for vectors stored before 0018.
    text_hash: Mapped[bytes | None] = mapped_column(LargeBinary)
    embedded_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), nullable=False
    )


class EmbeddingRefusal(TenantScoped, Base):
    """A tool version a model's server refused for good (its job was dropped).

    The model switch counts it as settled, so one text a new model cannot take does not keep
    the old model serving forever; the tool stays findable by BM25 and the embedding status
    names it. A new version is tried again, and a vector stored later removes the row.
    """

    __tablename__ = "embedding_refusals"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "tool_id"], ["tools.tenant_id", "tools.id"], ondelete="CASCADE"
        ),
    )

    tool_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(Text, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text)
    refused_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), nullable=False
    )


class OutboxJob(TenantScoped, Base):
    """Work to publish, written in the same transaction as the change that needs it.

    A row lives until the job is done: the relay publishes it (again, once its lease runs
    out), the task deletes it. Broker or worker loss therefore delays work but never drops it.
    """

    __tablename__ = "outbox"
    __table_args__ = (
        ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        Index("ix_outbox_tenant_id_tool_id", "tenant_id", "tool_id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(Text)
    tool_id: Mapped[uuid.UUID | None] = mapped_column()
    version: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), nullable=False
    )
    published_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # Times the embedding server refused this job's text (not publishes, which `attempts`
    # counts): the job is dropped after `embedding.service.MAX_EMBED_REFUSALS`.
    refusals: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class LearnedQuery(TenantScoped, Base):
    """A query whose selection was followed by a call of this tool (`POST /v1/tool-calls`).

    Its vector is one more way to reach the tool: the dense score of a tool is its best
    similarity over its own vector and these. The worker computes the vector (outbox kind
    `learn`); until then, or under another model than the tenant serves, the row ranks
    nothing. Permission and position are the tool's, copied like `ToolEmbedding`'s, so the
    same RESTRICTIVE policy drops a forbidden tool's queries before any distance.
    """

    __tablename__ = "learned_queries"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "tool_id"], ["tools.tenant_id", "tools.id"], ondelete="CASCADE"
        ),
    )

    tool_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    # SHA-256 of the query: the same query called again counts, it is not a new row.
    query_hash: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    query: Mapped[str] = mapped_column(Text)
    calls: Mapped[int] = mapped_column(Integer, server_default="1")
    model: Mapped[str | None] = mapped_column(Text)
    embedding: Mapped[Any | None] = mapped_column(VECTOR())
    required_permission_id: Mapped[uuid.UUID | None] = mapped_column()
    position: Mapped[int] = mapped_column(BigInteger)
    last_called_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), nullable=False
    )
