"""SECURITY DEFINER functions search the caller's temporary schema last.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04 18:00:00+00:00

A function's `SET search_path` that does not name `pg_temp` has PostgreSQL search the
session's temporary schema first for tables: the app role could create a temporary
`pg_roles` or `alembic_version` and have a SECURITY DEFINER function, running as its owner,
read that instead (`analytics.analyst_login()` answered a login of another tenant's making,
`toolsift_schema_revision()` a revision of the caller's). Naming `pg_temp` last closes it.
The bodies are unchanged.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# function: (search_path before, search_path now)
FUNCTIONS = {
    "toolsift_schema_revision()": ("public", "public, pg_temp"),
    "analytics.set_analyst_login(text)": ("pg_catalog", "pg_catalog, pg_temp"),
    "analytics.drop_analyst_login()": ("pg_catalog", "pg_catalog, pg_temp"),
    "analytics.analyst_login()": ("pg_catalog", "pg_catalog, pg_temp"),
}


def upgrade() -> None:
    for function, (_, now) in FUNCTIONS.items():
        op.execute(f"ALTER FUNCTION {function} SET search_path = {now}")


def downgrade() -> None:
    for function, (before, _) in FUNCTIONS.items():
        op.execute(f"ALTER FUNCTION {function} SET search_path = {before}")
