"""Selection analytics: monthly partitions of the logs, tool versions, views, the analyst role.

`selection_logs` and `tool_calls` become range-partitioned by month (a call lives in the
month of its selection), each with a DEFAULT partition so no write ever fails for a missing
month. Existing rows are moved. Partitions are created and dropped only by SECURITY DEFINER
functions (the app role owns nothing); `analytics.*` views run with the caller's RLS.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 15:00:00+00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "toolsift_app"
ANALYST_ROLE = "toolsift_analyst"
MAINTENANCE_ROLE = "toolsift_maintenance"
CURRENT_TENANT = "NULLIF((SELECT current_setting('app.tenant_id', true)), '')::uuid"
ANALYST_TENANT = "(SELECT analytics.analyst_tenant())"

# What an analyst may read of the base tables (the views read nothing else): no tool text,
# no input schemas, no keys.
ANALYST_COLUMNS = {
    "selection_logs": [
        "tenant_id", "id", "created_at", "mode", "query", "roles", "k", "budget_tokens",
        "tool_ids", "tool_names", "details", "candidate_count", "tokens", "catalog_tokens",
        "latency_ms",
    ],
    "tool_calls": [
        "tenant_id", "id", "selection_id", "selection_created_at", "tool_name", "allowed",
        "success", "created_at",
    ],
    "tools": ["tenant_id", "id", "name", "core", "version", "token_cost", "created_at",
              "deleted_at"],
    "tool_embeddings": ["tenant_id", "tool_id", "model", "embedding"],
    "tool_versions": ["tenant_id", "tool_id", "version", "description_md5", "changed_at"],
}  # fmt: skip

SELECTION_COLUMNS = """
    tenant_id uuid NOT NULL,
    id uuid NOT NULL,
    key_id uuid,
    roles text[] NOT NULL,
    mode text NOT NULL,
    format text NOT NULL,
    query text NOT NULL,
    k integer NOT NULL,
    budget_tokens integer NOT NULL,
    tool_ids uuid[] NOT NULL,
    tool_names text[] NOT NULL,
    details jsonb NOT NULL,
    candidate_count integer NOT NULL,
    tokens integer NOT NULL,
    catalog_tokens integer NOT NULL,
    latency_ms double precision NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
"""
SELECTION_LIST = (
    "tenant_id, id, key_id, roles, mode, format, query, k, budget_tokens, tool_ids, tool_names,"
    " details, candidate_count, tokens, catalog_tokens, latency_ms, created_at"
)

# Creates the month's partitions of both tables (idempotent). Rows of that month already in
# the DEFAULT partitions (the maintenance task did not run in time) are moved into them, calls
# first so that no ON DELETE CASCADE fires. Months are UTC months, as the views' days are.
ENSURE_MONTH = """
CREATE FUNCTION analytics.ensure_month(for_month date) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
SET TimeZone = 'UTC' AS $$
DECLARE
    lo date := date_trunc('month', for_month)::date;
    hi date := (date_trunc('month', for_month) + interval '1 month')::date;
    suffix text := to_char(date_trunc('month', for_month), '"y"YYYY"m"MM');
    stranded boolean;
BEGIN
    IF to_regclass('public.selection_logs_' || suffix) IS NOT NULL THEN
        RETURN false;
    END IF;
    -- One maintainer at a time; selects keep inserting (ROW EXCLUSIVE does not conflict).
    LOCK TABLE selection_logs, tool_calls IN SHARE UPDATE EXCLUSIVE MODE;
    IF to_regclass('public.selection_logs_' || suffix) IS NOT NULL THEN
        RETURN false;
    END IF;
    -- Nothing may land in the default partitions between the check, the move and the new
    -- partition's own check of them (a select of a month that has no partition yet).
    LOCK TABLE tool_calls_default, selection_logs_default IN ACCESS EXCLUSIVE MODE;
    SELECT EXISTS (SELECT 1 FROM selection_logs_default WHERE created_at >= lo AND created_at < hi)
      INTO stranded;
    IF stranded THEN
        CREATE TEMP TABLE analytics_stranded_calls ON COMMIT DROP AS
            SELECT * FROM tool_calls_default
            WHERE selection_created_at >= lo AND selection_created_at < hi;
        CREATE TEMP TABLE analytics_stranded_logs ON COMMIT DROP AS
            SELECT * FROM selection_logs_default WHERE created_at >= lo AND created_at < hi;
        DELETE FROM tool_calls_default
        WHERE selection_created_at >= lo AND selection_created_at < hi;
        DELETE FROM selection_logs_default WHERE created_at >= lo AND created_at < hi;
    END IF;
    EXECUTE format('CREATE TABLE public.%I PARTITION OF public.selection_logs FOR VALUES FROM (%L) TO (%L)',
                   'selection_logs_' || suffix, lo, hi);
    EXECUTE format('CREATE TABLE public.%I PARTITION OF public.tool_calls FOR VALUES FROM (%L) TO (%L)',
                   'tool_calls_' || suffix, lo, hi);
    IF stranded THEN
        EXECUTE format('INSERT INTO public.%I SELECT * FROM pg_temp.analytics_stranded_logs',
                       'selection_logs_' || suffix);
        EXECUTE format('INSERT INTO public.%I SELECT * FROM pg_temp.analytics_stranded_calls',
                       'tool_calls_' || suffix);
        DROP TABLE pg_temp.analytics_stranded_calls, pg_temp.analytics_stranded_logs;
    END IF;
    RETURN true;
END
$$
"""

# The maintenance run (a beat task calls it as the app role): partitions for the coming
# months; each tenant's rows past its own retention deleted; whole months past the longest
# retention of any tenant dropped (calls first: a referenced partition cannot go).
MAINTAIN = """
CREATE FUNCTION analytics.maintain_partitions(months_ahead integer, default_retention_days integer)
RETURNS TABLE (created text[], dropped text[], deleted bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
SET TimeZone = 'UTC' AS $$
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

# A tenant's retention from its settings; anything but a whole number of days reads as the
# default, so a bad setting can never stop the maintenance of every other tenant.
RETENTION = """
CREATE FUNCTION analytics.retention_days(settings jsonb, default_days integer) RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog AS $$
    SELECT CASE WHEN jsonb_typeof(settings -> 'log_retention_days') = 'number'
                 AND (settings ->> 'log_retention_days') ~ '^[0-9]{1,5}$'
                 AND (settings ->> 'log_retention_days')::integer >= 1
                THEN (settings ->> 'log_retention_days')::integer
                ELSE default_days END
$$
"""

# Analyst logins are named after their tenant; membership in the group makes the name count.
ANALYST_TENANT_FN = f"""
CREATE FUNCTION analytics.analyst_tenant() RETURNS uuid
LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog AS $$
    SELECT CASE WHEN session_user::text ~ '^{ANALYST_ROLE}_[0-9a-f]{{32}}$'
                 AND pg_has_role(session_user, '{ANALYST_ROLE}', 'MEMBER')
                THEN substr(session_user::text, {len(ANALYST_ROLE) + 2})::uuid END
$$
"""

# Creates (or re-keys) the current tenant's analyst login from a SCRAM verifier computed by
# the client, so no password ever reaches the server or its logs.
ANALYST_LOGIN_FN = f"""
CREATE FUNCTION analytics.set_analyst_login(verifier text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    tenant uuid := NULLIF(current_setting('app.tenant_id', true), '')::uuid;
    login text;
BEGIN
    IF tenant IS NULL THEN
        RAISE EXCEPTION 'no tenant in this transaction' USING ERRCODE = '42501';
    END IF;
    IF verifier IS NULL OR verifier !~ '^SCRAM-SHA-256\\$' THEN
        RAISE EXCEPTION 'a SCRAM-SHA-256 verifier is required' USING ERRCODE = '22023';
    END IF;
    login := '{ANALYST_ROLE}_' || replace(tenant::text, '-', '');
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = login) THEN
        EXECUTE format('ALTER ROLE %I PASSWORD %L', login, verifier);
    ELSE
        EXECUTE format('CREATE ROLE %I LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE'
                       ' NOBYPASSRLS NOREPLICATION CONNECTION LIMIT 5 PASSWORD %L IN ROLE {ANALYST_ROLE}',
                       login, verifier);
        EXECUTE format('ALTER ROLE %I SET default_transaction_read_only = on', login);
        EXECUTE format('ALTER ROLE %I SET search_path = analytics, public', login);
        -- The tenant is pinned by the analyst policies; within it the whole catalog counts.
        -- Only a superuser may store a custom setting on a role; otherwise the analyst passes
        -- it when connecting (options=-c app.permissions=*), as the API answer says.
        BEGIN
            EXECUTE format('ALTER ROLE %I SET app.permissions = %L', login, '*');
        EXCEPTION WHEN insufficient_privilege THEN
            NULL;
        END;
    END IF;
    RETURN login;
END
$$
"""

ANALYST_DROP_FN = f"""
CREATE FUNCTION analytics.drop_analyst_login() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    tenant uuid := NULLIF(current_setting('app.tenant_id', true), '')::uuid;
    login text;
BEGIN
    IF tenant IS NULL THEN
        RAISE EXCEPTION 'no tenant in this transaction' USING ERRCODE = '42501';
    END IF;
    login := '{ANALYST_ROLE}_' || replace(tenant::text, '-', '');
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = login) THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP ROLE %I', login);
    RETURN true;
END
$$
"""

ANALYST_EXISTS_FN = """
CREATE FUNCTION analytics.analyst_login() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT rolname::text FROM pg_roles
    WHERE rolname = 'toolsift_analyst_'
          || replace(NULLIF(current_setting('app.tenant_id', true), ''), '-', '')
$$
"""

# Day buckets are UTC dates.
VIEWS = {
    # Of the tools the model called after a select, the share that select had offered.
    "called_tool_recall": """
        SELECT (s.created_at AT TIME ZONE 'UTC')::date AS day, s.mode,
               count(*) AS calls,
               count(*) FILTER (WHERE c.tool_name = ANY (s.tool_names)) AS hits,
               (count(*) FILTER (WHERE c.tool_name = ANY (s.tool_names)))::double precision
                   / count(*) AS recall
        FROM public.tool_calls c
        JOIN public.selection_logs s
          ON s.tenant_id = c.tenant_id AND s.created_at = c.selection_created_at
         AND s.id = c.selection_id
        GROUP BY 1, 2
    """,
    # Tokens of the definitions sent against those of the caller's whole allowed catalog.
    "tokens_per_turn": """
        SELECT (s.created_at AT TIME ZONE 'UTC')::date AS day,
               count(*) AS selections,
               sum(s.tokens) AS tokens_sent,
               sum(s.catalog_tokens) AS catalog_tokens,
               sum(s.catalog_tokens) - sum(s.tokens) AS tokens_saved,
               CASE WHEN sum(s.catalog_tokens) > 0
                    THEN 1 - sum(s.tokens)::double precision / sum(s.catalog_tokens) END
                   AS saved_share,
               avg(s.tokens)::double precision AS avg_tokens,
               avg(s.catalog_tokens)::double precision AS avg_catalog_tokens
        FROM public.selection_logs s
        GROUP BY 1
    """,
    "latency_percentiles": """
        SELECT (s.created_at AT TIME ZONE 'UTC')::date AS day, s.mode,
               count(*) AS selections,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY s.latency_ms) AS p50_ms,
               percentile_cont(0.95) WITHIN GROUP (ORDER BY s.latency_ms) AS p95_ms,
               percentile_cont(0.99) WITHIN GROUP (ORDER BY s.latency_ms) AS p99_ms,
               max(s.latency_ms) AS max_ms
        FROM public.selection_logs s
        GROUP BY 1, 2
    """,
    # zero_result: nothing in the catalog matched; core_only: only core tools came back.
    "zero_result_queries": """
        SELECT kind, query, count(*) AS selections,
               min(created_at) AS first_seen, max(created_at) AS last_seen
        FROM (
            SELECT s.query, s.created_at,
                   CASE WHEN s.candidate_count = 0 THEN 'zero_result'
                        WHEN NOT EXISTS (SELECT 1 FROM jsonb_array_elements(s.details) d
                                         WHERE d ->> 'reason' <> 'core') THEN 'core_only'
                   END AS kind
            FROM public.selection_logs s
        ) q
        WHERE kind IS NOT NULL
        GROUP BY kind, query
    """,
    # An equality anti-join on the unnested ids: `t.id = ANY (s.tool_ids)` would rescan the
    # logs once per tool.
    "tools_never_selected": """
        SELECT t.id AS tool_id, t.name, t.core, t.created_at
        FROM public.tools t
        WHERE t.deleted_at IS NULL
          AND NOT EXISTS (
              SELECT 1
              FROM public.selection_logs s CROSS JOIN LATERAL unnest(s.tool_ids) AS p(tool_id)
              WHERE s.tenant_id = t.tenant_id AND p.tool_id = t.id)
    """,
    "tools_selected_never_called": """
        SELECT t.id AS tool_id, t.name, t.core, count(*) AS selections,
               max(s.created_at) AS last_selected
        FROM public.selection_logs s
        CROSS JOIN LATERAL unnest(s.tool_ids) AS picked(tool_id)
        JOIN public.tools t ON t.tenant_id = s.tenant_id AND t.id = picked.tool_id
        WHERE t.deleted_at IS NULL
          AND NOT EXISTS (
              SELECT 1 FROM public.tool_calls c
              WHERE c.tenant_id = t.tenant_id AND c.tool_name = t.name)
        GROUP BY t.id, t.name, t.core
    """,
    # Per day and tool: how often it was offered and how often the model called it.
    "tool_usage_daily": """
        SELECT day, tool_name, sum(selections)::bigint AS selections, sum(calls)::bigint AS calls
        FROM (
            SELECT (s.created_at AT TIME ZONE 'UTC')::date AS day, picked.name AS tool_name, 1 AS selections, 0 AS calls
            FROM public.selection_logs s CROSS JOIN LATERAL unnest(s.tool_names) AS picked(name)
            UNION ALL
            SELECT (c.selection_created_at AT TIME ZONE 'UTC')::date, c.tool_name, 0, 1
            FROM public.tool_calls c
        ) u
        GROUP BY day, tool_name
    """,
    # Pairs so close that they split scores: vectors of the same model at cosine >= 0.9, or
    # names (camelCase split, lower case) at trigram similarity >= 0.6.
    "near_duplicate_tools": """
        WITH live AS (
            SELECT t.tenant_id, t.id, t.name,
                   lower(regexp_replace(t.name, '([a-z0-9])([A-Z])', '\\1_\\2', 'g')) AS words
            FROM public.tools t WHERE t.deleted_at IS NULL
        ), close_vectors AS (
            -- Distances computed in the scan and filtered at once: a join that carried the
            -- vectors along would spill every pair's 2 x 1.5 kB to disk.
            SELECT ea.tool_id AS tool_a, eb.tool_id AS tool_b
            FROM public.tool_embeddings ea
            JOIN public.tool_embeddings eb ON eb.tenant_id = ea.tenant_id AND eb.model = ea.model
                 AND ea.tool_id < eb.tool_id
            WHERE 1 - (ea.embedding <=> eb.embedding) >= 0.9
        ), close_names AS (
            SELECT a.id AS tool_a, b.id AS tool_b
            FROM live a JOIN live b ON b.tenant_id = a.tenant_id AND a.id < b.id
            WHERE public.similarity(a.words, b.words) >= 0.6
        ), candidates AS (
            SELECT tool_a, tool_b FROM close_vectors UNION SELECT tool_a, tool_b FROM close_names
        ), measured AS (
            SELECT a.id AS tool_a, a.name AS name_a, b.id AS tool_b, b.name AS name_b,
                   v.model, v.cosine_similarity,
                   public.similarity(a.words, b.words)::double precision AS name_similarity
            FROM candidates c
            JOIN live a ON a.id = c.tool_a
            JOIN live b ON b.id = c.tool_b AND b.tenant_id = a.tenant_id
            LEFT JOIN LATERAL (
                SELECT ea.model, 1 - (ea.embedding <=> eb.embedding) AS cosine_similarity
                FROM public.tool_embeddings ea
                JOIN public.tool_embeddings eb ON eb.tenant_id = ea.tenant_id
                     AND eb.model = ea.model AND eb.tool_id = b.id
                WHERE ea.tenant_id = a.tenant_id AND ea.tool_id = a.id
            ) v ON true
        )
        SELECT * FROM measured WHERE cosine_similarity >= 0.9 OR name_similarity >= 0.6
    """,
    # For each new version of a tool: its share of the tenant's selections while the previous
    # version served against its share since (until the next version, or now).
    "tool_version_drift": """
        WITH spans AS (
            SELECT v.tenant_id, v.tool_id, v.version, v.changed_at,
                   v.description_md5 IS DISTINCT FROM lag(v.description_md5)
                       OVER w AS description_changed,
                   lag(v.changed_at) OVER w AS previous_at,
                   coalesce(lead(v.changed_at) OVER w, 'infinity') AS next_at
            FROM public.tool_versions v
            WINDOW w AS (PARTITION BY v.tenant_id, v.tool_id ORDER BY v.version)
        ), counted AS (
            SELECT sp.*,
                   (SELECT count(*) FROM public.selection_logs s
                    WHERE s.tenant_id = sp.tenant_id AND s.created_at >= sp.previous_at
                      AND s.created_at < sp.changed_at) AS selections_before,
                   (SELECT count(*) FROM public.selection_logs s
                    WHERE s.tenant_id = sp.tenant_id AND s.created_at >= sp.previous_at
                      AND s.created_at < sp.changed_at AND sp.tool_id = ANY (s.tool_ids))
                       AS selected_before,
                   (SELECT count(*) FROM public.selection_logs s
                    WHERE s.tenant_id = sp.tenant_id AND s.created_at >= sp.changed_at
                      AND s.created_at < sp.next_at) AS selections_after,
                   (SELECT count(*) FROM public.selection_logs s
                    WHERE s.tenant_id = sp.tenant_id AND s.created_at >= sp.changed_at
                      AND s.created_at < sp.next_at AND sp.tool_id = ANY (s.tool_ids))
                       AS selected_after
            FROM spans sp
            WHERE sp.previous_at IS NOT NULL
        )
        SELECT c.tool_id, t.name, c.version, c.changed_at, c.description_changed,
               c.selections_before, c.selected_before,
               c.selected_before::double precision / NULLIF(c.selections_before, 0) AS rate_before,
               c.selections_after, c.selected_after,
               c.selected_after::double precision / NULLIF(c.selections_after, 0) AS rate_after,
               c.selected_after::double precision / NULLIF(c.selections_after, 0)
                   - c.selected_before::double precision / NULLIF(c.selections_before, 0)
                   AS rate_change
        FROM counted c
        JOIN public.tools t ON t.tenant_id = c.tenant_id AND t.id = c.tool_id
    """,
}

TOOL_VERSION_TRIGGER = """
CREATE FUNCTION record_tool_version() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    INSERT INTO tool_versions (tenant_id, tool_id, version, description_md5, changed_at)
    VALUES (NEW.tenant_id, NEW.id, NEW.version, md5(NEW.description), now())
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$
"""


def _create_role(name: str) -> None:
    op.execute(
        f"""
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{name}') THEN
                CREATE ROLE {name} NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
            END IF;
        END
        $$
        """
    )


def _tenant_policies(table: str) -> None:
    op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY tenant_isolation ON {table} "
        f"USING (tenant_id = {CURRENT_TENANT}) WITH CHECK (tenant_id = {CURRENT_TENANT})"
    )


def _partition_logs() -> None:
    """Rebuild both tables partitioned by month and move the rows across."""
    op.execute("ALTER TABLE tool_calls RENAME TO tool_calls_unpartitioned")
    op.execute("ALTER TABLE selection_logs RENAME TO selection_logs_unpartitioned")
    # Their key and index names go to the new tables.
    op.execute(
        "ALTER TABLE tool_calls_unpartitioned"
        " DROP CONSTRAINT fk_tool_calls_tenant_id_selection_id_selection_logs,"
        " DROP CONSTRAINT pk_tool_calls"
    )
    op.execute("DROP INDEX ix_tool_calls_tenant_id_selection_id")
    op.execute("ALTER TABLE selection_logs_unpartitioned DROP CONSTRAINT pk_selection_logs")
    op.execute("DROP INDEX ix_selection_logs_tenant_id_created_at")
    for table in ("tool_calls_unpartitioned", "selection_logs_unpartitioned"):
        # The owner reads every tenant's rows for the move; the tables are dropped after.
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    op.execute(
        f"""
        CREATE TABLE selection_logs ({SELECTION_COLUMNS},
            CONSTRAINT pk_selection_logs PRIMARY KEY (tenant_id, created_at, id),
            CONSTRAINT fk_selection_logs_tenant_id_tenants FOREIGN KEY (tenant_id)
                REFERENCES tenants (id) ON DELETE CASCADE
        ) PARTITION BY RANGE (created_at)
        """
    )
    op.execute("CREATE INDEX ix_selection_logs_tenant_id_id ON selection_logs (tenant_id, id)")
    op.execute(
        """
        CREATE TABLE tool_calls (
            tenant_id uuid NOT NULL,
            id uuid NOT NULL,
            selection_id uuid NOT NULL,
            selection_created_at timestamptz NOT NULL,
            tool_name text NOT NULL,
            allowed boolean NOT NULL,
            success boolean,
            created_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT pk_tool_calls PRIMARY KEY (tenant_id, selection_created_at, id),
            CONSTRAINT fk_tool_calls_selection_logs
                FOREIGN KEY (tenant_id, selection_created_at, selection_id)
                REFERENCES selection_logs (tenant_id, created_at, id) ON DELETE CASCADE
        ) PARTITION BY RANGE (selection_created_at)
        """
    )
    op.execute(
        "CREATE INDEX ix_tool_calls_tenant_id_selection_id ON tool_calls (tenant_id, selection_id)"
    )
    op.execute("CREATE TABLE selection_logs_default PARTITION OF selection_logs DEFAULT")
    op.execute("CREATE TABLE tool_calls_default PARTITION OF tool_calls DEFAULT")
    op.execute(ENSURE_MONTH)
    # A partition for every month that has rows, and for the next two, before rows come in.
    op.execute(
        """
        SELECT analytics.ensure_month(m::date)
        FROM generate_series(
            least(date_trunc('month', now()),
                  (SELECT date_trunc('month', min(created_at)) FROM selection_logs_unpartitioned)),
            date_trunc('month', now()) + interval '2 months', interval '1 month') AS m
        """
    )
    op.execute(
        f"INSERT INTO selection_logs ({SELECTION_LIST})"  # noqa: S608 - constants
        f" SELECT {SELECTION_LIST} FROM selection_logs_unpartitioned"
    )
    op.execute(
        """
        INSERT INTO tool_calls (tenant_id, id, selection_id, selection_created_at, tool_name,
                                allowed, success, created_at)
        SELECT c.tenant_id, c.id, c.selection_id, s.created_at, c.tool_name, c.allowed,
               c.success, c.created_at
        FROM tool_calls_unpartitioned c
        JOIN selection_logs_unpartitioned s ON s.tenant_id = c.tenant_id AND s.id = c.selection_id
        """
    )
    op.execute("DROP TABLE tool_calls_unpartitioned")
    op.execute("DROP TABLE selection_logs_unpartitioned")
    for table in ("selection_logs", "tool_calls"):
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {APP_ROLE}")
        _tenant_policies(table)


def _tool_versions() -> None:
    op.execute(
        """
        CREATE TABLE tool_versions (
            tenant_id uuid NOT NULL,
            tool_id uuid NOT NULL,
            version integer NOT NULL,
            description_md5 text NOT NULL,
            changed_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT pk_tool_versions PRIMARY KEY (tenant_id, tool_id, version),
            CONSTRAINT fk_tool_versions_tenant_id_tool_id_tools FOREIGN KEY (tenant_id, tool_id)
                REFERENCES tools (tenant_id, id) ON DELETE CASCADE
        )
        """
    )
    # The app writes versions only through the trigger on tools; it never edits history.
    op.execute(f"GRANT SELECT, INSERT ON tool_versions TO {APP_ROLE}")
    _tenant_policies("tool_versions")
    op.execute(
        """
        INSERT INTO tool_versions (tenant_id, tool_id, version, description_md5, changed_at)
        SELECT tenant_id, id, version, md5(description), updated_at FROM tools
        """
    )
    op.execute(TOOL_VERSION_TRIGGER)
    op.execute(
        """
        CREATE TRIGGER record_tool_version AFTER INSERT OR UPDATE OF version ON tools
        FOR EACH ROW EXECUTE FUNCTION record_tool_version()
        """
    )


def _maintenance() -> None:
    """Cross-tenant reads and deletes for the maintenance function, and for it alone.

    NOLOGIN and granted to the migrating login, which owns the SECURITY DEFINER functions:
    the policies apply inside those functions, never to the app role (not a member).
    """
    _create_role(MAINTENANCE_ROLE)
    op.execute(f"GRANT {MAINTENANCE_ROLE} TO CURRENT_USER")
    op.execute(
        f"CREATE POLICY maintenance_read ON tenants FOR SELECT TO {MAINTENANCE_ROLE} USING (true)"
    )
    for command in ("SELECT", "DELETE"):
        op.execute(
            f"CREATE POLICY maintenance_{command.lower()} ON selection_logs FOR {command}"
            f" TO {MAINTENANCE_ROLE} USING (true)"
        )
    op.execute(RETENTION)
    op.execute(MAINTAIN)
    for signature in (
        "analytics.ensure_month(date)",
        "analytics.maintain_partitions(integer, integer)",
    ):
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {APP_ROLE}")


def _views() -> None:
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW analytics.{name} WITH (security_invoker = true) AS {body}")
        op.execute(f"GRANT SELECT ON analytics.{name} TO {APP_ROLE}, {ANALYST_ROLE}")


def _analyst() -> None:
    op.execute(ANALYST_TENANT_FN)
    op.execute(f"GRANT USAGE ON SCHEMA public, analytics TO {ANALYST_ROLE}")
    op.execute(f"GRANT EXECUTE ON FUNCTION public.similarity(text, text) TO {ANALYST_ROLE}")
    for table, columns in ANALYST_COLUMNS.items():
        op.execute(f"GRANT SELECT ({', '.join(columns)}) ON {table} TO {ANALYST_ROLE}")
        pinned = f"tenant_id = {ANALYST_TENANT}"
        op.execute(
            f"CREATE POLICY analyst_read ON {table} FOR SELECT TO {ANALYST_ROLE} USING ({pinned})"
        )
        # Restrictive: whatever app.tenant_id an analyst sets, tenant_isolation alone (OR-ed
        # with analyst_read) never opens another tenant to it.
        op.execute(
            f"CREATE POLICY analyst_pin ON {table} AS RESTRICTIVE FOR SELECT TO {ANALYST_ROLE}"
            f" USING ({pinned})"
        )
    for fn in (ANALYST_LOGIN_FN, ANALYST_DROP_FN, ANALYST_EXISTS_FN):
        op.execute(fn)
    for signature in (
        "analytics.set_analyst_login(text)",
        "analytics.drop_analyst_login()",
        "analytics.analyst_login()",
    ):
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {APP_ROLE}")


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
    op.execute("CREATE SCHEMA analytics")
    op.execute(f"GRANT USAGE ON SCHEMA analytics TO {APP_ROLE}")
    _create_role(ANALYST_ROLE)
    _partition_logs()
    _tool_versions()
    _maintenance()
    _analyst()
    _views()


def downgrade() -> None:
    op.execute("DROP SCHEMA analytics CASCADE")
    op.execute("DROP POLICY maintenance_read ON tenants")
    op.execute("DROP TRIGGER record_tool_version ON tools")
    op.execute("DROP FUNCTION record_tool_version()")
    op.execute("DROP TABLE tool_versions")
    op.execute("ALTER TABLE tool_calls RENAME TO tool_calls_partitioned")
    op.execute("ALTER TABLE selection_logs RENAME TO selection_logs_partitioned")
    op.execute(
        "ALTER TABLE tool_calls_partitioned DROP CONSTRAINT fk_tool_calls_selection_logs,"
        " DROP CONSTRAINT pk_tool_calls"
    )
    op.execute("DROP INDEX ix_tool_calls_tenant_id_selection_id")
    op.execute("ALTER TABLE selection_logs_partitioned DROP CONSTRAINT pk_selection_logs")
    op.execute("DROP INDEX ix_selection_logs_tenant_id_id")
    for table in ("tool_calls_partitioned", "selection_logs_partitioned"):
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    op.execute(
        f"""
        CREATE TABLE selection_logs ({SELECTION_COLUMNS},
            CONSTRAINT pk_selection_logs PRIMARY KEY (tenant_id, id),
            CONSTRAINT fk_selection_logs_tenant_id_tenants FOREIGN KEY (tenant_id)
                REFERENCES tenants (id) ON DELETE CASCADE)
        """
    )
    op.execute(
        "CREATE INDEX ix_selection_logs_tenant_id_created_at ON selection_logs (tenant_id, created_at)"
    )
    op.execute(
        """
        CREATE TABLE tool_calls (
            tenant_id uuid NOT NULL,
            id uuid NOT NULL,
            selection_id uuid NOT NULL,
            tool_name text NOT NULL,
            allowed boolean NOT NULL,
            success boolean,
            created_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT pk_tool_calls PRIMARY KEY (tenant_id, id),
            CONSTRAINT fk_tool_calls_tenant_id_selection_id_selection_logs
                FOREIGN KEY (tenant_id, selection_id)
                REFERENCES selection_logs (tenant_id, id) ON DELETE CASCADE)
        """
    )
    op.execute(
        "CREATE INDEX ix_tool_calls_tenant_id_selection_id ON tool_calls (tenant_id, selection_id)"
    )
    op.execute(
        f"INSERT INTO selection_logs ({SELECTION_LIST})"  # noqa: S608 - constants
        f" SELECT {SELECTION_LIST} FROM selection_logs_partitioned"
    )
    op.execute(
        "INSERT INTO tool_calls (tenant_id, id, selection_id, tool_name, allowed, success,"
        " created_at) SELECT tenant_id, id, selection_id, tool_name, allowed, success,"
        " created_at FROM tool_calls_partitioned"
    )
    op.execute("DROP TABLE tool_calls_partitioned")
    op.execute("DROP TABLE selection_logs_partitioned")
    for table in ("selection_logs", "tool_calls"):
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {APP_ROLE}")
        _tenant_policies(table)
    op.execute(f"REVOKE ALL ON SCHEMA public FROM {ANALYST_ROLE}")
    op.execute(f"REVOKE ALL ON FUNCTION public.similarity(text, text) FROM {ANALYST_ROLE}")
