"""The select hot path's first statement: key check, roles and RLS scope in one function.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 14:40:00+00:00

`toolsift_agent_scope` runs as its caller (SECURITY INVOKER, never DEFINER): it reads
`api_keys`, `roles` and `role_permissions` through their row-level security like any other
statement of `toolsift_app`, and only sets the transaction-local settings the policies read.
It raises instead of returning an error, so the statements pipelined behind it in the same
transaction never run for an unknown, wrong, revoked or admin key.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "toolsift_app"

# No SET clause on purpose: a function with one restores every setting changed inside it at
# exit, and this one exists to leave app.tenant_id and app.permissions set for the transaction.
SCOPE = f"""
CREATE FUNCTION toolsift_agent_scope(
    p_tenant uuid, p_key uuid, p_key_hash text, p_roles text[]
) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $$
DECLARE
    found_key record;
    acting text[];
BEGIN
    -- The role first: whatever login calls, everything below runs bound by RLS.
    PERFORM set_config('role', '{APP_ROLE}', true),
            set_config('app.tenant_id', p_tenant::text, true),
            set_config('app.permissions', '', true);
    SELECT k.key_hash, k.scope, k.revoked_at IS NOT NULL AS revoked,
           coalesce(array_agg(r.name ORDER BY r.name) FILTER (WHERE r.name IS NOT NULL),
                    '{{}}') AS roles
      INTO found_key
      FROM public.api_keys k
      LEFT JOIN public.api_key_roles kr ON kr.tenant_id = k.tenant_id AND kr.key_id = k.id
      LEFT JOIN public.roles r ON r.tenant_id = kr.tenant_id AND r.id = kr.role_id
     WHERE k.tenant_id = p_tenant AND k.id = p_key
     GROUP BY k.key_hash, k.scope, k.revoked_at;
    -- One message for unknown, wrong and revoked keys: nothing to probe.
    IF NOT FOUND OR found_key.revoked OR found_key.key_hash <> p_key_hash THEN
        RAISE EXCEPTION 'invalid or revoked API key' USING ERRCODE = 'TSA01';
    END IF;
    IF found_key.scope <> 'agent' THEN
        RAISE EXCEPTION 'this endpoint needs an agent key' USING ERRCODE = 'TSA03';
    END IF;
    -- Roles asserted but not granted add nothing here; the caller refuses them by name.
    acting := CASE WHEN p_roles IS NULL THEN found_key.roles
                   ELSE ARRAY(SELECT unnest(p_roles) INTERSECT SELECT unnest(found_key.roles))
              END;
    PERFORM set_config(
        'app.permissions',
        coalesce((
            SELECT string_agg(DISTINCT rp.permission_id::text, ',')
              FROM public.role_permissions rp
              JOIN public.roles r ON r.tenant_id = rp.tenant_id AND r.id = rp.role_id
             WHERE r.tenant_id = p_tenant AND r.name = ANY (acting)
        ), ''),
        true);
    RETURN found_key.roles;
END
$$
"""  # noqa: S608 - the only interpolation is the role name constant
SIGNATURE = "toolsift_agent_scope(uuid, uuid, text, text[])"


def upgrade() -> None:
    op.execute(SCOPE)
    op.execute(f"REVOKE ALL ON FUNCTION {SIGNATURE} FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {SIGNATURE} TO {APP_ROLE}")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION {SIGNATURE}")
