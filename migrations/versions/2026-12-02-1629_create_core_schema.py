"""Create the core schema: tenants, access control, tools, lexical index, logs, with RLS.

Revision ID: 0001
Revises:
Create Date: 2026-12-02 16:29:10.593776+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "toolsift_app"
TENANT_TABLES = [
    "api_keys",
    "api_key_roles",
    "permissions",
    "roles",
    "role_permissions",
    "tools",
    "tool_terms",
    "term_stats",
    "corpus_stats",
    "selection_logs",
    "tool_calls",
]
PUBLIC_BUCKET = "00000000-0000-0000-0000-000000000000"
CURRENT_TENANT = "NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid"
# app.permissions holds the caller's permission ids (comma separated), or '*' for admins.
# The array is built and cast in a sub-select, so once per statement, not once per row
# checked (the outer no-op cast only tells ANY it is given an array, not a set).
# Unset or empty means: public tools only. RESTRICTIVE, so it is AND-ed with the tenant policy;
# a permissive second policy would be OR-ed and leak other tenants' public tools.
PERMITTED = """(
    required_permission_id IS NULL
    OR (SELECT current_setting('app.permissions', true)) = '*'
    OR required_permission_id = ANY ((
        SELECT string_to_array(NULLIF(current_setting('app.permissions', true), '*'), ',')::uuid[]
    )::uuid[])
)"""

STATS_PERMITTED = PERMITTED.replace(
    "required_permission_id IS NULL", f"permission_key = '{PUBLIC_BUCKET}'::uuid"
).replace("required_permission_id", "permission_key")


def _create_app_role() -> None:
    """The role the application runs as: it neither owns the tables nor bypasses RLS."""
    op.execute(
        f"""
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
                CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
            END IF;
        END
        $$
        """
    )
    # Lets the migrating (owner) login `SET ROLE toolsift_app`, so one URL serves both.
    op.execute(f"GRANT {APP_ROLE} TO CURRENT_USER")


def _enable_row_level_security() -> None:
    op.execute(f"GRANT USAGE ON SCHEMA public TO {APP_ROLE}")
    for table in ["tenants", *TENANT_TABLES]:
        column = "id" if table == "tenants" else "tenant_id"
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {APP_ROLE}")
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY tenant_isolation ON {table} "
            f"USING ({column} = {CURRENT_TENANT}) WITH CHECK ({column} = {CURRENT_TENANT})"
        )
    for table in ["tools", "tool_terms"]:
        op.execute(
            f"CREATE POLICY tool_permission ON {table} AS RESTRICTIVE "
            f"USING {PERMITTED} WITH CHECK {PERMITTED}"
        )
    # Statistics are bucketed by permission (nil UUID = public): a caller's idf and average
    # length come from its allowed catalog only.
    for table in ["term_stats", "corpus_stats"]:
        op.execute(
            f"CREATE POLICY tool_permission ON {table} AS RESTRICTIVE "
            f"USING {STATS_PERMITTED} WITH CHECK {STATS_PERMITTED}"
        )


def upgrade() -> None:
    _create_app_role()
    op.create_table(
        "tenants",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("settings", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("next_position", sa.BigInteger(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
    )
    op.create_table(
        "api_keys",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("prefix", sa.Text(), nullable=False),
        sa.Column("key_hash", sa.Text(), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("scope IN ('admin', 'agent')", name=op.f("ck_api_keys_scope")),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_api_keys_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_api_keys")),
    )
    op.create_table(
        "corpus_stats",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("permission_key", sa.UUID(), nullable=False),
        sa.Column("doc_count", sa.Integer(), nullable=False),
        sa.Column("total_length", sa.Double(), nullable=False),
        sa.Column("total_tokens", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_corpus_stats_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "permission_key", name=op.f("pk_corpus_stats")),
    )
    op.create_table(
        "permissions",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_permissions_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_permissions")),
        sa.UniqueConstraint("tenant_id", "name", name=op.f("uq_permissions_tenant_id_name")),
    )
    op.create_table(
        "roles",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_roles_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_roles")),
        sa.UniqueConstraint("tenant_id", "name", name=op.f("uq_roles_tenant_id_name")),
    )
    op.create_table(
        "selection_logs",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("key_id", sa.UUID(), nullable=True),
        sa.Column("roles", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("mode", sa.Text(), nullable=False),
        sa.Column("format", sa.Text(), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("budget_tokens", sa.Integer(), nullable=False),
        sa.Column("tool_ids", postgresql.ARRAY(sa.UUID()), nullable=False),
        sa.Column("tool_names", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("details", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("candidate_count", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("catalog_tokens", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Double(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_selection_logs_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_selection_logs")),
    )
    op.create_index(
        "ix_selection_logs_tenant_id_created_at",
        "selection_logs",
        ["tenant_id", "created_at"],
        unique=False,
    )
    op.create_table(
        "term_stats",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("term", sa.Text(), nullable=False),
        sa.Column("permission_key", sa.UUID(), nullable=False),
        sa.Column("df", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_term_stats_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "term", "permission_key", name=op.f("pk_term_stats")),
    )
    op.create_table(
        "api_key_roles",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("key_id", sa.UUID(), nullable=False),
        sa.Column("role_id", sa.UUID(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "key_id"],
            ["api_keys.tenant_id", "api_keys.id"],
            name=op.f("fk_api_key_roles_tenant_id_key_id_api_keys"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "role_id"],
            ["roles.tenant_id", "roles.id"],
            name=op.f("fk_api_key_roles_tenant_id_role_id_roles"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "key_id", "role_id", name=op.f("pk_api_key_roles")),
    )
    op.create_index(
        "ix_api_key_roles_tenant_id_role_id",
        "api_key_roles",
        ["tenant_id", "role_id"],
        unique=False,
    )
    op.create_table(
        "role_permissions",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("role_id", sa.UUID(), nullable=False),
        sa.Column("permission_id", sa.UUID(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "permission_id"],
            ["permissions.tenant_id", "permissions.id"],
            name=op.f("fk_role_permissions_tenant_id_permission_id_permissions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "role_id"],
            ["roles.tenant_id", "roles.id"],
            name=op.f("fk_role_permissions_tenant_id_role_id_roles"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "role_id", "permission_id", name=op.f("pk_role_permissions")
        ),
    )
    op.create_index(
        "ix_role_permissions_tenant_id_permission_id",
        "role_permissions",
        ["tenant_id", "permission_id"],
        unique=False,
    )
    op.create_table(
        "tool_calls",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("selection_id", sa.UUID(), nullable=False),
        sa.Column("tool_name", sa.Text(), nullable=False),
        sa.Column("allowed", sa.Boolean(), nullable=False),
        sa.Column("success", sa.Boolean(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "selection_id"],
            ["selection_logs.tenant_id", "selection_logs.id"],
            name=op.f("fk_tool_calls_tenant_id_selection_id_selection_logs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_tool_calls")),
    )
    op.create_index(
        "ix_tool_calls_tenant_id_selection_id",
        "tool_calls",
        ["tenant_id", "selection_id"],
        unique=False,
    )
    op.create_table(
        "tools",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("input_schema", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("examples", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("required_permission_id", sa.UUID(), nullable=True),
        sa.Column("core", sa.Boolean(), nullable=False),
        sa.Column("token_cost", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("doc_length", sa.Double(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "required_permission_id"],
            ["permissions.tenant_id", "permissions.id"],
            name=op.f("fk_tools_tenant_id_required_permission_id_permissions"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_tools_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_tools")),
        sa.UniqueConstraint("tenant_id", "name", name=op.f("uq_tools_tenant_id_name")),
        sa.UniqueConstraint("tenant_id", "position", name=op.f("uq_tools_tenant_id_position")),
    )
    op.create_index(
        "ix_tools_tenant_id_core",
        "tools",
        ["tenant_id"],
        postgresql_where=sa.text("core AND deleted_at IS NULL"),
    )
    op.create_index(
        "ix_tools_tenant_id_required_permission_id",
        "tools",
        ["tenant_id", "required_permission_id"],
        unique=False,
    )
    op.create_table(
        "tool_terms",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("term", sa.Text(), nullable=False),
        sa.Column("tool_id", sa.UUID(), nullable=False),
        sa.Column("tf", sa.Double(), nullable=False),
        sa.Column("doc_length", sa.Double(), nullable=False),
        sa.Column("required_permission_id", sa.UUID(), nullable=True),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "tool_id"],
            ["tools.tenant_id", "tools.id"],
            name=op.f("fk_tool_terms_tenant_id_tool_id_tools"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "term", "tool_id", name=op.f("pk_tool_terms")),
    )
    op.create_index(
        "ix_tool_terms_tenant_id_tool_id", "tool_terms", ["tenant_id", "tool_id"], unique=False
    )
    _enable_row_level_security()


def downgrade() -> None:
    op.execute(f"REVOKE USAGE ON SCHEMA public FROM {APP_ROLE}")
    op.drop_index("ix_tool_terms_tenant_id_tool_id", table_name="tool_terms")
    op.drop_table("tool_terms")
    op.drop_index("ix_tools_tenant_id_core", table_name="tools")
    op.drop_index("ix_tools_tenant_id_required_permission_id", table_name="tools")
    op.drop_table("tools")
    op.drop_index("ix_tool_calls_tenant_id_selection_id", table_name="tool_calls")
    op.drop_table("tool_calls")
    op.drop_index("ix_role_permissions_tenant_id_permission_id", table_name="role_permissions")
    op.drop_table("role_permissions")
    op.drop_index("ix_api_key_roles_tenant_id_role_id", table_name="api_key_roles")
    op.drop_table("api_key_roles")
    op.drop_table("term_stats")
    op.drop_index("ix_selection_logs_tenant_id_created_at", table_name="selection_logs")
    op.drop_table("selection_logs")
    op.drop_table("roles")
    op.drop_table("permissions")
    op.drop_table("corpus_stats")
    op.drop_table("api_keys")
    op.drop_table("tenants")
