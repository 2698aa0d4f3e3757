"""Tools the embedding server refused for good are recorded, so a model change can finish.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04 17:00:00+00:00

A job whose text the embedding server refuses (HTTP 400: too long for the model, say) is
dropped after a few refusals (0014). A new model takes over a tenant only once every live
tool has one of its vectors, so a single tool the new model refuses held the old model in
service forever, with nothing to show why but a worker log line. `embedding_refusals` keeps
the given-up tool, the model, the version and the server's reason: the switch counts a tool
refused at its current version as settled (it stays findable by BM25), and the embedding
status lists what was refused. A new version of the tool is tried again; a vector stored
later removes the row.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "toolsift_app"
CURRENT_TENANT = "NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid"


def upgrade() -> None:
    op.create_table(
        "embedding_refusals",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("tool_id", sa.UUID(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "refused_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "tool_id"],
            ["tools.tenant_id", "tools.id"],
            name=op.f("fk_embedding_refusals_tenant_id_tool_id_tools"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "tool_id", "model", name=op.f("pk_embedding_refusals")
        ),
    )
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON embedding_refusals TO {APP_ROLE}")
    op.execute("ALTER TABLE embedding_refusals ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE embedding_refusals FORCE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY tenant_isolation ON embedding_refusals "
        f"USING (tenant_id = {CURRENT_TENANT}) WITH CHECK (tenant_id = {CURRENT_TENANT})"
    )


def downgrade() -> None:
    op.drop_table("embedding_refusals")
