"""Audit log hash chain: per-tenant sequence number, previous entry's hash, entry hash.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 15:30:00+00:00

Entries already written keep NULLs: the chain starts with the first entry after this
revision (verification covers the chained entries).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.add_column("audit_log", sa.Column("seq", sa.BigInteger(), nullable=True))
    op.add_column("audit_log", sa.Column("prev_hash", sa.Text(), nullable=True))
    op.add_column("audit_log", sa.Column("entry_hash", sa.Text(), nullable=True))
    # tenant_id first, as every key of a tenant table; NULLs (unchained entries) may repeat.
    op.create_unique_constraint(
        op.f("uq_audit_log_tenant_id_seq"), "audit_log", ["tenant_id", "seq"]
    )


def downgrade() -> None:
    op.drop_constraint(op.f("uq_audit_log_tenant_id_seq"), "audit_log", type_="unique")
    op.drop_column("audit_log", "entry_hash")
    op.drop_column("audit_log", "prev_hash")
    op.drop_column("audit_log", "seq")
