"""Outbox jobs count the embedding server's refusals apart from their publishes.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 15:30:00+00:00

`attempts` counts how often the relay published a job; a job whose text the embedding
server refuses (HTTP 400) is now retried a few times and then dropped, and that decision
must not count publishes: a long worker outage republishes a job many times without any
refusal. `refusals` counts refusals only; the embedding status shows jobs refused so far.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("outbox", sa.Column("refusals", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    op.drop_column("outbox", "refusals")
