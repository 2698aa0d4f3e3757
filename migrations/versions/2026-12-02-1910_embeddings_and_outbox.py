"""Embeddings (pgvector) and the transactional outbox that keeps them up to date.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 19:10:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import VECTOR
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "toolsift_app"
CURRENT_TENANT = "NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid"
# The same permission rule as on tools (see 0001): vectors of forbidden tools are gone
# before any distance is computed.
PERMITTED = """(
    required_permission_id IS NULL
    OR (SELECT current_setting('app.permissions', true)) = '*'
    OR required_permission_id = ANY ((
        SELECT string_to_array(NULLIF(current_setting('app.permissions', true), '*'), ',')::uuid[]
    )::uuid[])
)"""
# The relay alone reads and claims every tenant's pending jobs, and only in transactions that
# say so. Permissive on purpose (OR-ed with tenant_isolation), for SELECT and UPDATE only: it
# can neither add nor remove jobs, and the outbox holds ids and versions, never content.
RELAY = "(SELECT current_setting('app.relay', true)) = 'on'"


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.add_column("tenants", sa.Column("embedding_model", sa.Text(), nullable=True))
    op.create_table(
        "tool_embeddings",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("tool_id", sa.UUID(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("dimension", sa.Integer(), nullable=False),
        sa.Column("embedding", VECTOR(), nullable=False),
        sa.Column("required_permission_id", sa.UUID(), nullable=True),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column(
            "embedded_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "tool_id"],
            ["tools.tenant_id", "tools.id"],
            name=op.f("fk_tool_embeddings_tenant_id_tool_id_tools"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "tool_id", "model", name=op.f("pk_tool_embeddings")),
    )
    op.create_table(
        "outbox",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("tool_id", sa.UUID(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("published_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_outbox_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_outbox")),
    )
    op.create_index("ix_outbox_tenant_id_tool_id", "outbox", ["tenant_id", "tool_id"])
    for table in ["tool_embeddings", "outbox"]:
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {APP_ROLE}")
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY tenant_isolation ON {table} "
            f"USING (tenant_id = {CURRENT_TENANT}) WITH CHECK (tenant_id = {CURRENT_TENANT})"
        )
    op.execute(
        "CREATE POLICY tool_permission ON tool_embeddings AS RESTRICTIVE "
        f"USING {PERMITTED} WITH CHECK {PERMITTED}"
    )
    op.execute(f"CREATE POLICY relay_read ON outbox FOR SELECT USING ({RELAY})")
    op.execute(
        f"CREATE POLICY relay_claim ON outbox FOR UPDATE USING ({RELAY}) WITH CHECK ({RELAY})"
    )


def downgrade() -> None:
    op.drop_index("ix_outbox_tenant_id_tool_id", table_name="outbox")
    op.drop_table("outbox")
    op.drop_table("tool_embeddings")
    op.drop_column("tenants", "embedding_model")
