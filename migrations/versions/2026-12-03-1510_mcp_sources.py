"""MCP sources, the per-tool MCP state (review), and MCP fields on tools.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 15:10:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "toolsift_app"
OBSERVER_ROLE = "toolsift_observer"
CURRENT_TENANT = "NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid"
# The sync scheduler and the notification listener find due sources of every tenant, only in
# transactions that say so. Permissive on purpose (OR-ed with tenant_isolation) and SELECT
# only: they read ids and times, then sync each source in its own tenant's transaction.
SCHEDULER = "(SELECT current_setting('app.scheduler', true)) = 'on'"
# Held tools require this permission, which no role may hold: RLS then hides them (and
# their postings, statistics and vectors) from every agent, exactly like a forbidden tool.
REVIEW_PERMISSION = "mcp.review"


def _timestamp(name: str, *, nullable: bool = True, now: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(
        name,
        sa.DateTime(timezone=True),
        server_default=sa.text("now()") if now else None,
        nullable=nullable,
    )


def _secure(table: str) -> None:
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {APP_ROLE}")
    op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY tenant_isolation ON {table} "
        f"USING (tenant_id = {CURRENT_TENANT}) WITH CHECK (tenant_id = {CURRENT_TENANT})"
    )


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.add_column(
        "tools",
        sa.Column("output_schema", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )
    op.add_column(
        "tools", sa.Column("annotations", postgresql.JSONB(astext_type=sa.Text()), nullable=True)
    )
    op.create_table(
        "mcp_sources",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("prefix", sa.Text(), nullable=False),
        sa.Column("transport", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("args", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("secrets", sa.LargeBinary(), nullable=True),
        sa.Column("header_names", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("env_names", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("has_bearer_token", sa.Boolean(), nullable=False),
        sa.Column("default_permission_id", sa.UUID(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("listen", sa.Boolean(), nullable=False),
        sa.Column("sync_interval_seconds", sa.Integer(), nullable=False),
        sa.Column("server_ttl_ms", sa.BigInteger(), nullable=True),
        _timestamp("next_sync_at"),
        sa.Column("health", sa.Text(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        _timestamp("last_attempt_at"),
        _timestamp("last_synced_at"),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("tool_count", sa.Integer(), nullable=False),
        _timestamp("updated_at", nullable=False, now=True),
        _timestamp("created_at", nullable=False, now=True),
        sa.CheckConstraint("transport IN ('http', 'stdio')", name=op.f("ck_mcp_sources_transport")),
        sa.CheckConstraint(
            "health IN ('new', 'healthy', 'unhealthy')", name=op.f("ck_mcp_sources_health")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "default_permission_id"],
            ["permissions.tenant_id", "permissions.id"],
            name=op.f("fk_mcp_sources_tenant_id_default_permission_id_permissions"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_mcp_sources_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_mcp_sources")),
        sa.UniqueConstraint("tenant_id", "name", name=op.f("uq_mcp_sources_tenant_id_name")),
        sa.UniqueConstraint("tenant_id", "prefix", name=op.f("uq_mcp_sources_tenant_id_prefix")),
    )
    op.create_index(
        "ix_mcp_sources_tenant_id_next_sync_at", "mcp_sources", ["tenant_id", "next_sync_at"]
    )
    op.create_table(
        "mcp_tools",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("source_id", sa.UUID(), nullable=False),
        sa.Column("remote_name", sa.Text(), nullable=False),
        sa.Column("tool_id", sa.UUID(), nullable=False),
        sa.Column("definition", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("definition_hash", sa.Text(), nullable=False),
        sa.Column("review_state", sa.Text(), nullable=False),
        sa.Column("findings", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("approved_hash", sa.Text(), nullable=True),
        _timestamp("reviewed_at"),
        sa.Column("permission_override", sa.Boolean(), nullable=False),
        sa.Column("permission_id", sa.UUID(), nullable=True),
        _timestamp("removed_at"),
        _timestamp("first_seen_at", nullable=False, now=True),
        _timestamp("updated_at", nullable=False, now=True),
        sa.CheckConstraint(
            "review_state IN ('clean', 'held', 'approved', 'rejected')",
            name=op.f("ck_mcp_tools_review_state"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "permission_id"],
            ["permissions.tenant_id", "permissions.id"],
            name=op.f("fk_mcp_tools_tenant_id_permission_id_permissions"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "source_id"],
            ["mcp_sources.tenant_id", "mcp_sources.id"],
            name=op.f("fk_mcp_tools_tenant_id_source_id_mcp_sources"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "tool_id"],
            ["tools.tenant_id", "tools.id"],
            name=op.f("fk_mcp_tools_tenant_id_tool_id_tools"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "source_id", "remote_name", name=op.f("pk_mcp_tools")),
        sa.UniqueConstraint("tenant_id", "tool_id", name=op.f("uq_mcp_tools_tenant_id_tool_id")),
    )
    op.create_index(
        "ix_mcp_tools_tenant_id_review_state", "mcp_tools", ["tenant_id", "review_state"]
    )
    for table in ("mcp_sources", "mcp_tools"):
        _secure(table)
    op.execute(f"CREATE POLICY scheduler_read ON mcp_sources FOR SELECT USING ({SCHEDULER})")
    # The reserved permission can never reach a role, whatever path writes the grant.
    op.execute(
        f"""
        CREATE FUNCTION toolsift_refuse_reserved_grant() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF EXISTS (SELECT 1 FROM permissions p WHERE p.tenant_id = NEW.tenant_id
                       AND p.id = NEW.permission_id AND p.name = '{REVIEW_PERMISSION}') THEN
                RAISE EXCEPTION 'permission {REVIEW_PERMISSION} is reserved and cannot be granted'
                    USING ERRCODE = 'check_violation';
            END IF;
            RETURN NEW;
        END
        $$
        """  # noqa: S608 - the permission name is the constant above
    )
    op.execute(
        "CREATE TRIGGER refuse_reserved_grant BEFORE INSERT OR UPDATE ON role_permissions"
        " FOR EACH ROW EXECUTE FUNCTION toolsift_refuse_reserved_grant()"
    )
    # /metrics counts failing sources (toolsift_sync_failures), as 0003 anticipated.
    op.execute(f"GRANT SELECT (tenant_id, health, last_error) ON mcp_sources TO {OBSERVER_ROLE}")
    op.execute(
        f"CREATE POLICY observer_count ON mcp_sources FOR SELECT TO {OBSERVER_ROLE} USING (true)"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER refuse_reserved_grant ON role_permissions")
    op.execute("DROP FUNCTION toolsift_refuse_reserved_grant()")
    op.execute(f"REVOKE ALL ON mcp_sources FROM {OBSERVER_ROLE}")
    op.drop_index("ix_mcp_tools_tenant_id_review_state", table_name="mcp_tools")
    op.drop_table("mcp_tools")
    op.drop_index("ix_mcp_sources_tenant_id_next_sync_at", table_name="mcp_sources")
    op.drop_table("mcp_sources")
    op.drop_column("tools", "annotations")
    op.drop_column("tools", "output_schema")
