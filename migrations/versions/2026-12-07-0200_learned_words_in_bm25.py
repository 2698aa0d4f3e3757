"""Learned words in BM25: a tool's learned queries count in its BM25 document.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-07 02:00:00+00:00

The worker now indexes a tool's learned queries (0027) as words of its BM25 document, at
`toolsift.lexical.analysis.LEARNED_WEIGHT`, whenever a `learn` job says they changed. The
queries the retention forgets (0029) must leave those postings too, so
`analytics.maintain_partitions` now queues a `learn` job for each tool it forgot queries of,
as that tenant (`app.tenant_id` set for the statement, then restored, as `app.permissions`
is). Same signature and result: replaced in place, its grants stay. The text is
`platform/toolsift/analytics/sql/maintain_partitions.sql`'s, written out; the way down is
0029's. The tools that have learned queries today get a `learn` job each, so their words
arrive without waiting for their next call. The way down leaves the words in the postings
until each tool is written again.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MAINTAIN = r"""CREATE OR REPLACE FUNCTION analytics.maintain_partitions(months_ahead integer, default_retention_days integer)
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
    caller_tenant text := current_setting('app.tenant_id', true);
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
        -- Its words leave its tool's BM25 document too: a `learn` job has the worker index
        -- the tool again, queued as the tenant's own (tenant_isolation on the outbox).
        PERFORM set_config('app.permissions', '*', true);
        PERFORM set_config('app.tenant_id', tenant.id::text, true);
        WITH gone AS (
            DELETE FROM learned_queries
            WHERE tenant_id = tenant.id
              AND last_called_at < now() - make_interval(days => tenant.days)
            RETURNING tool_id
        ), relearn AS (
            INSERT INTO outbox (tenant_id, id, kind, tool_id, attempts)
            SELECT tenant.id, gen_random_uuid(), 'learn', g.tool_id, 0
            FROM (SELECT DISTINCT tool_id FROM gone) g
        )
        SELECT count(*) INTO n FROM gone;
        PERFORM set_config('app.tenant_id', coalesce(caller_tenant, ''), true);
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

MAINTAIN_0029 = r"""
CREATE OR REPLACE FUNCTION analytics.maintain_partitions(months_ahead integer, default_retention_days integer)
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


# Every tenant's, as that tenant (tenant_isolation on the outbox); learned_queries and
# tenants are read through the maintenance policies the migrating login has.
QUEUE_LEARNED = r"""
DO $$
DECLARE
    tenant uuid;
BEGIN
    PERFORM set_config('app.permissions', '*', true);
    FOR tenant IN SELECT id FROM tenants ORDER BY id LOOP
        PERFORM set_config('app.tenant_id', tenant::text, true);
        INSERT INTO outbox (tenant_id, id, kind, tool_id, attempts)
        SELECT tenant, gen_random_uuid(), 'learn', q.tool_id, 0
        FROM (SELECT DISTINCT tool_id FROM learned_queries WHERE tenant_id = tenant) q;
    END LOOP;
    PERFORM set_config('app.tenant_id', '', true);
    PERFORM set_config('app.permissions', '', true);
END
$$
"""


def upgrade() -> None:
    op.execute(MAINTAIN)
    op.execute(QUEUE_LEARNED)


def downgrade() -> None:
    op.execute(MAINTAIN_0029)
