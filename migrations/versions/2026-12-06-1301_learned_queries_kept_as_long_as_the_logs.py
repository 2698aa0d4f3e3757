"""Learned queries kept as long as the logs they came from.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-06 13:01:00+00:00

A learned query (0027) copies a user's words out of a selection log, and was kept for as long
as its tool lived, past the tenant's `log_retention_days`. `analytics.maintain_partitions`
now also deletes each tenant's learned queries not called within that retention, and counts
them (`forgotten`). It runs as the migrating login under FORCE ROW LEVEL SECURITY, so
learned_queries gets the maintenance policies selection_logs has, and the delete runs with
`app.permissions` '*' (set for that statement, then restored) so the RESTRICTIVE
tool_permission policy lets it reach guarded tools' rows. Its result gains a column: dropped and created again, grants restored. The text
is `platform/toolsift/analytics/sql/maintain_partitions.sql`'s, written out.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "toolsift_app"
MAINTENANCE_ROLE = "toolsift_maintenance"
SIGNATURE = "analytics.maintain_partitions(integer, integer)"

MAINTAIN = r"""
CREATE FUNCTION analytics.maintain_partitions(months_ahead integer, default_retention_days integer)
RETURNS TABLE(created text[], dropped text[], deleted bigint, forgotten bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path TO 'pg_catalog', 'public', 'pg_temp'
SET "TimeZone" TO 'UTC'
AS $$
DECLARE
    m date;
    longest integer;
    tenant record;
    n bigint;
    part record;
    permissions text := current_setting('app.permissions', true);
BEGIN
    IF months_ahead IS NULL OR months_ahead < 1 OR months_ahead > 24 THEN
        RAISE EXCEPTION 'months_ahead must be between 1 and 24' USING ERRCODE = '22023';
    END IF;
    IF default_retention_days IS NULL OR default_retention_days < 1 THEN
        RAISE EXCEPTION 'default_retention_days must be at least 1' USING ERRCODE = '22023';
    END IF;
    created := '{}';
    dropped := '{}';
    deleted := 0;
    forgotten := 0;
    -- This month and the next ones, and past months whose rows wait in the default partition.
    FOR m IN
        SELECT g::date FROM generate_series(date_trunc('month', now()),
            date_trunc('month', now()) + make_interval(months => months_ahead),
            interval '1 month') AS g
        UNION
        SELECT DISTINCT date_trunc('month', created_at)::date FROM selection_logs_default
        WHERE created_at < date_trunc('month', now())
        ORDER BY 1
    LOOP
        IF analytics.ensure_month(m) THEN
            created := created || to_char(m, 'YYYY-MM');
        END IF;
    END LOOP;

    longest := default_retention_days;
    FOR tenant IN SELECT t.id, analytics.retention_days(t.settings, default_retention_days) AS days
                  FROM tenants t LOOP
        longest := greatest(longest, tenant.days);
        DELETE FROM selection_logs
        WHERE tenant_id = tenant.id AND created_at < now() - make_interval(days => tenant.days);
        GET DIAGNOSTICS n = ROW_COUNT;
        deleted := deleted + n;
        -- A learned query holds a user's words like the log it came from: one not called
        -- again within the retention is forgotten with its logs. Guarded tools' too: '*'
        -- passes the RESTRICTIVE tool_permission policy, for this statement only (a SET
        -- clause on the function would need a superuser to create it).
        PERFORM set_config('app.permissions', '*', true);
        DELETE FROM learned_queries
        WHERE tenant_id = tenant.id AND last_called_at < now() - make_interval(days => tenant.days);
        GET DIAGNOSTICS n = ROW_COUNT;
        PERFORM set_config('app.permissions', coalesce(permissions, ''), true);
        forgotten := forgotten + n;
    END LOOP;

    FOR part IN
        SELECT c.relname, substr(c.relname, length('selection_logs_') + 1) AS suffix
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'public.selection_logs'::regclass
          AND c.relname ~ '^selection_logs_y[0-9]{4}m[0-9]{2}$'
          AND to_date(substr(c.relname, 17), 'YYYY"m"MM') + interval '1 month'
              <= now() - make_interval(days => longest)
        ORDER BY 1
    LOOP
        EXECUTE format('DROP TABLE IF EXISTS public.%I', 'tool_calls_' || part.suffix);
        EXECUTE format('ALTER TABLE public.selection_logs DETACH PARTITION public.%I', part.relname);
        EXECUTE format('DROP TABLE public.%I', part.relname);
        dropped := dropped || to_char(to_date(substr(part.relname, 17), 'YYYY"m"MM'), 'YYYY-MM');
    END LOOP;
    RETURN NEXT;
END
$$
"""

# As 0004 created it (no learned queries yet).
MAINTAIN_0004 = r"""
CREATE FUNCTION analytics.maintain_partitions(months_ahead integer, default_retention_days integer)
RETURNS TABLE(created text[], dropped text[], deleted bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path TO 'pg_catalog', 'public', 'pg_temp'
SET "TimeZone" TO 'UTC'
AS $$
DECLARE
    m date;
    longest integer;
    tenant record;
    n bigint;
    part record;
BEGIN
    IF months_ahead IS NULL OR months_ahead < 1 OR months_ahead > 24 THEN
        RAISE EXCEPTION 'months_ahead must be between 1 and 24' USING ERRCODE = '22023';
    END IF;
    IF default_retention_days IS NULL OR default_retention_days < 1 THEN
        RAISE EXCEPTION 'default_retention_days must be at least 1' USING ERRCODE = '22023';
    END IF;
    created := '{}';
    dropped := '{}';
    deleted := 0;
    -- This month and the next ones, and past months whose rows wait in the default partition.
    FOR m IN
        SELECT g::date FROM generate_series(date_trunc('month', now()),
            date_trunc('month', now()) + make_interval(months => months_ahead),
            interval '1 month') AS g
        UNION
        SELECT DISTINCT date_trunc('month', created_at)::date FROM selection_logs_default
        WHERE created_at < date_trunc('month', now())
        ORDER BY 1
    LOOP
        IF analytics.ensure_month(m) THEN
            created := created || to_char(m, 'YYYY-MM');
        END IF;
    END LOOP;

    longest := default_retention_days;
    FOR tenant IN SELECT t.id, analytics.retention_days(t.settings, default_retention_days) AS days
                  FROM tenants t LOOP
        longest := greatest(longest, tenant.days);
        DELETE FROM selection_logs
        WHERE tenant_id = tenant.id AND created_at < now() - make_interval(days => tenant.days);
        GET DIAGNOSTICS n = ROW_COUNT;
        deleted := deleted + n;
    END LOOP;

    FOR part IN
        SELECT c.relname, substr(c.relname, length('selection_logs_') + 1) AS suffix
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'public.selection_logs'::regclass
          AND c.relname ~ '^selection_logs_y[0-9]{4}m[0-9]{2}$'
          AND to_date(substr(c.relname, 17), 'YYYY"m"MM') + interval '1 month'
              <= now() - make_interval(days => longest)
        ORDER BY 1
    LOOP
        EXECUTE format('DROP TABLE IF EXISTS public.%I', 'tool_calls_' || part.suffix);
        EXECUTE format('ALTER TABLE public.selection_logs DETACH PARTITION public.%I', part.relname);
        EXECUTE format('DROP TABLE public.%I', part.relname);
        dropped := dropped || to_char(to_date(substr(part.relname, 17), 'YYYY"m"MM'), 'YYYY-MM');
    END LOOP;
    RETURN NEXT;
END
$$
"""


def _replace(text: str) -> None:
    op.execute(f"DROP FUNCTION {SIGNATURE}")
    op.execute(text)
    op.execute(f"REVOKE ALL ON FUNCTION {SIGNATURE} FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {SIGNATURE} TO {APP_ROLE}")


def upgrade() -> None:
    for command in ("SELECT", "DELETE"):
        op.execute(
            f"CREATE POLICY maintenance_{command.lower()} ON public.learned_queries"
            f" FOR {command} TO {MAINTENANCE_ROLE} USING (true)"
        )
    _replace(MAINTAIN)


def downgrade() -> None:
    _replace(MAINTAIN_0004)
    for command in ("select", "delete"):
        op.execute(f"DROP POLICY maintenance_{command} ON public.learned_queries")
