"""A vector records the digest of the text it was computed from.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 09:00:00+00:00

Most tool writes that make a new version leave the text the model reads unchanged: a new
required permission, the core flag, parameter types or descriptions, annotations, an output
schema, an MCP server's metadata. Each such version was embedded again, the model's whole
cost for the same vector. With the digest of its text stored beside the vector, the embed
task carries a vector whose text is unchanged over to the new version instead: a permission
moved over 1,000 tools took 0.11-0.13 s of embed tasks against 10-14 s to compute the same
vectors again (`benchmarks/embed_carry.py`, docs/benchmarks.md). Vectors stored before this
revision have no digest and are computed again the first time their tool changes.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tool_embeddings", sa.Column("text_hash", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    op.drop_column("tool_embeddings", "text_hash")
