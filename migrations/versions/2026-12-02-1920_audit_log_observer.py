"""Audit log of admin changes; the observer role for metrics; readiness may read the revision.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 19:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "toolsift_app"
OBSERVER_ROLE = "toolsift_observer"
CURRENT_TENANT = "NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid"
# What /metrics counts across tenants, column by column; a table that a later or an
# unmerged migration creates is granted when it exists (the grant is re-run harmlessly).
OBSERVED = {
    "tenants": ["id", "embedding_model"],
    "tools": ["tenant_id", "id", "version", "deleted_at", "updated_at"],
    "outbox": ["tenant_id", "created_at", "published_at"],
    "tool_embeddings": ["tenant_id", "tool_id", "model", "version"],
    "mcp_sources": ["tenant_id", "last_error"],
}


def _observer() -> None:
    """A role that may count rows across tenants for metrics, and nothing else.

    NOLOGIN: /metrics switches to it for one read-only transaction, which works when the
    login of DATABASE_URL is a member (the migrating login is). Ordinary requests run as the
    app role, which is not a member, so they stay bound by the tenant policies.
    """
    op.execute(
        f"""
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{OBSERVER_ROLE}') THEN
                CREATE ROLE {OBSERVER_ROLE} NOLOGIN NOSUPERUSER NOBYPASSRLS;
            END IF;
        END
        $$
        """
    )
    # The migrating login may switch to it; the app role is a member of nothing.
    op.execute(f"GRANT {OBSERVER_ROLE} TO CURRENT_USER")
    op.execute(f"GRANT USAGE ON SCHEMA public TO {OBSERVER_ROLE}")
    for table, columns in OBSERVED.items():
        listed = ", ".join(f"'{c}'" for c in columns)
        op.execute(
            f"""
            DO $$
            DECLARE cols text;
            BEGIN
                SELECT string_agg(quote_ident(attname), ', ') INTO cols FROM pg_attribute
                WHERE attrelid = to_regclass('{table}') AND attname IN ({listed})
                  AND NOT attisdropped;
                IF cols IS NOT NULL THEN
                    EXECUTE format('GRANT SELECT (%s) ON {table} TO {OBSERVER_ROLE}', cols);
                    IF NOT EXISTS (SELECT FROM pg_policies WHERE tablename = '{table}'
                                   AND policyname = 'observer_count') THEN
                        EXECUTE 'CREATE POLICY observer_count ON {table} FOR SELECT'
                                ' TO {OBSERVER_ROLE} USING (true)';
                    END IF;
                END IF;
            END
            $$
            """  # noqa: S608 - table and column names are the constants above
        )


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("actor_key_id", sa.UUID(), nullable=True),
        sa.Column("request_id", sa.Text(), nullable=True),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("table_name", sa.Text(), nullable=False),
        sa.Column("row_key", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("changed", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("before_hash", sa.Text(), nullable=True),
        sa.Column("after_hash", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "action IN ('insert', 'update', 'delete')", name=op.f("ck_audit_log_action")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_audit_log")),
    )
    op.create_index("ix_audit_log_tenant_id_created_at", "audit_log", ["tenant_id", "created_at"])
    # Append-only for the application: no UPDATE, no DELETE.
    op.execute(f"GRANT SELECT, INSERT ON audit_log TO {APP_ROLE}")
    op.execute("ALTER TABLE audit_log ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE audit_log FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY tenant_isolation ON audit_log "
        f"USING (tenant_id = {CURRENT_TENANT}) WITH CHECK (tenant_id = {CURRENT_TENANT})"
    )
    # /readyz compares the applied revision with the code's head. A function, not a grant on
    # alembic_version: the app role reads no table without row-level security.
    op.execute(
        """
        CREATE FUNCTION toolsift_schema_revision() RETURNS text
        LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public
        AS $$ SELECT version_num FROM alembic_version LIMIT 1 $$
        """
    )
    op.execute("REVOKE ALL ON FUNCTION toolsift_schema_revision() FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION toolsift_schema_revision() TO {APP_ROLE}")
    _observer()


def downgrade() -> None:
    for table in OBSERVED:
        op.execute(
            f"DO $$ BEGIN IF to_regclass('{table}') IS NOT NULL THEN "
            f"EXECUTE 'DROP POLICY IF EXISTS observer_count ON {table}'; "
            f"EXECUTE 'REVOKE ALL ON {table} FROM {OBSERVER_ROLE}'; END IF; END $$"
        )
    op.execute(f"REVOKE USAGE ON SCHEMA public FROM {OBSERVER_ROLE}")
    op.execute("DROP FUNCTION toolsift_schema_revision()")
    op.drop_index("ix_audit_log_tenant_id_created_at", table_name="audit_log")
    op.drop_table("audit_log")
