"""The operator may list tenants by name.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 14:00:00+00:00

`GET /admin/v1/tenants` and `toolsift tenant list` read every tenant's id, name, creation
time and live tool count, across the tenant policies, as `toolsift_observer` (the role
/metrics counts rows as; it already reads `tenants.id` and the tools' `tenant_id` and
`deleted_at`). The observer gets the two more columns it needs, and nothing else: the app
role, which serves every other request, is still not a member.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OBSERVER_ROLE = "toolsift_observer"


def upgrade() -> None:
    op.execute(f"GRANT SELECT (name, created_at) ON tenants TO {OBSERVER_ROLE}")


def downgrade() -> None:
    op.execute(f"REVOKE SELECT (name, created_at) ON tenants FROM {OBSERVER_ROLE}")  # noqa: S608 - a constant
