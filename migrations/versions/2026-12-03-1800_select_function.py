"""The whole select in one statement: key, roles, scores, fusion, budget, log, definitions.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 18:00:00+00:00

`toolsift_select` replaces the select path's two pipelines (about ten statements, each
converted, sent, parsed and read back by the API's Python) with one call that the API sends
in autocommit: one round trip, one implicit transaction, and the response comes back as
JSON text that the API passes through. It runs as its caller (SECURITY INVOKER, no SET
clause), so every table it reads is filtered by the same row-level security as any other
statement of `toolsift_app`; `toolsift_agent_scope` (0006) still checks the key first and
raises before anything is scored or written.

`toolsift_bm25` is the BM25 statement itself, shared by the select function and by
`selection.bm25.score` (the reference the scores are tested against): one text, so the two
cannot drift apart.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "toolsift_app"

BM25 = """
CREATE FUNCTION toolsift_bm25(
    p_tenant uuid, p_query text, p_config regconfig, p_k1 float8, p_b float8, p_limit integer
) RETURNS TABLE (tool_id uuid, score float8, terms text[], "position" bigint)
LANGUAGE sql STABLE SECURITY INVOKER PARALLEL SAFE
AS $$
    WITH q AS (
        SELECT DISTINCT lexeme AS term FROM unnest(to_tsvector(p_config, p_query))
    ),
    -- Statistics of the caller's allowed catalog: RLS keeps only the permission buckets
    -- it may use. Sums run in bucket order, for the same floats whatever the plan.
    c AS (
        SELECT sum(doc_count)::float8 AS n,
               CASE WHEN sum(doc_count) > 0
                    THEN sum(total_length ORDER BY permission_key) / sum(doc_count)
                    ELSE 1 END AS avgdl
        FROM public.corpus_stats WHERE tenant_id = p_tenant
    ),
    w AS (
        SELECT s.term, ln(1 + (c.n - sum(s.df) + 0.5) / (sum(s.df) + 0.5)) AS idf
        FROM public.term_stats s JOIN q ON q.term = s.term CROSS JOIN c
        WHERE s.tenant_id = p_tenant
        GROUP BY s.term, c.n
    )
    SELECT p.tool_id,
           -- ORDER BY term: the same float sum whatever plan the planner picks.
           sum(w.idf * p.tf * (p_k1 + 1) / (p.tf + p_k1 * (1 - p_b + p_b * p.doc_length / c.avgdl))
               ORDER BY p.term) AS score,
           array_agg(p.term ORDER BY p.term) AS terms,
           min(p.position) AS position
    FROM public.tool_terms p JOIN w ON w.term = p.term CROSS JOIN c
    WHERE p.tenant_id = p_tenant
    GROUP BY p.tool_id
    ORDER BY score DESC, position
    LIMIT p_limit
$$
"""

# A fusion setting as `Fusion.from_settings` read it before this function replaced it: a JSON
# number within bounds, else the default (settings stored before they were validated on write).
SETTING = """
CREATE FUNCTION toolsift_setting(
    p_settings jsonb, p_name text, p_low float8, p_closed boolean, p_high float8,
    p_default float8
) RETURNS float8
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    raw jsonb := CASE WHEN jsonb_typeof(p_settings) = 'object' THEN p_settings -> p_name END;
    value float8;
BEGIN
    IF raw IS NULL OR jsonb_typeof(raw) <> 'number' THEN
        RETURN p_default;
    END IF;
    BEGIN
        value := (raw #>> '{}')::float8;
    EXCEPTION WHEN numeric_value_out_of_range THEN
        RETURN p_default;  -- beyond a double: not finite, as Python reads it
    END;
    IF (CASE WHEN p_closed THEN value >= p_low ELSE value > p_low END) AND value <= p_high THEN
        RETURN value;
    END IF;
    RETURN p_default;
END
$$
"""

# A tool as each model API wants it (`tools.definitions.render`), as JSON text: keys in
# the same order, optional MCP keys only when set.
DEFINITION = """
CREATE FUNCTION toolsift_definition(
    p_name text, p_title text, p_description text, p_input jsonb, p_output jsonb,
    p_annotations jsonb, p_format text
) RETURNS text
-- STABLE, as json_build_object is: an IMMUTABLE label would keep it from being inlined.
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE p_format
        WHEN 'anthropic' THEN json_build_object(
            'name', p_name, 'description', p_description, 'input_schema', p_input)::text
        WHEN 'anthropic_tool_reference' THEN json_build_object(
            'type', 'tool_reference', 'tool_name', p_name)::text
        WHEN 'openai' THEN json_build_object(
            'type', 'function', 'function', json_build_object(
                'name', p_name, 'description', p_description, 'parameters', p_input))::text
        ELSE '{"name":' || to_json(p_name)::text
            || CASE WHEN coalesce(p_title, '') <> ''
                    THEN ',"title":' || to_json(p_title)::text ELSE '' END
            || ',"description":' || to_json(p_description)::text
            || ',"inputSchema":' || p_input::text
            -- A JSON null is no schema, as an SQL NULL is.
            || CASE WHEN jsonb_typeof(p_output) <> 'null'
                    THEN ',"outputSchema":' || p_output::text ELSE '' END
            || CASE WHEN jsonb_typeof(p_annotations) <> 'null'
                    THEN ',"annotations":' || p_annotations::text ELSE '' END
            || '}'
    END
$$
"""

# The roles' grants as the transaction's permissions (RLS reads `app.permissions`), for a
# caller already scoped to its tenant: MCP, in-process, `authorize` and the select function.
APPLY_ROLES = """
CREATE FUNCTION toolsift_apply_roles(p_tenant uuid, p_roles text[]) RETURNS text
LANGUAGE sql VOLATILE SECURITY INVOKER
AS $$
    SELECT set_config(
        'app.permissions',
        coalesce(string_agg(DISTINCT rp.permission_id::text, ','), ''),
        true)
      FROM public.role_permissions rp
      JOIN public.roles r ON r.tenant_id = rp.tenant_id AND r.id = rp.role_id
     WHERE r.tenant_id = p_tenant AND r.name = ANY (p_roles)
$$
"""

RANKED = """
CREATE TYPE toolsift_ranked AS (
    tool_id uuid, score float8, terms text[], bm25_rank integer, dense_rank integer
)
"""
# A tool the budget took, and why: core, used or ranked.
PICK = """
CREATE TYPE toolsift_pick AS (
    id uuid, name text, "position" bigint, token_cost integer, reason text
)
"""

# No SET clause on purpose (see 0006): the scope it sets must hold for the statements inside.
SELECT = """
CREATE FUNCTION toolsift_select(
    p_tenant uuid, p_key uuid, p_key_hash text, p_roles text[], p_selection uuid,
    p_query text, p_config regconfig, p_k1 float8, p_b float8, p_pool integer,
    p_mode text, p_vector vector, p_model text, p_used text[],
    p_k integer, p_budget integer, p_format text, p_debug boolean, p_elapsed_ms float8
) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $$
DECLARE
    granted text[];
    acting text[];
    served text;
    fusion jsonb;
    f_k float8;
    f_bm25 float8;
    f_dense float8;
    f_scale float8;
    f_floor float8;
    top float8;
    lexical float8;
    missing integer;
    ranked toolsift_ranked[];
    r toolsift_ranked;
    tool record;
    used text;
    rank integer := 0;
    added integer := 0;
    spent integer := 0;
    reason text;
    -- The picks, in the order they were taken, and their ids (for membership tests).
    picks toolsift_pick[];
    pick_ids uuid[];
    candidates text[] := '{}';
    chosen record;
    definitions text;
BEGIN
    -- Who is calling. With a key hash, the key is checked here (it raises for a bad key,
    -- so nothing below runs); without one, the caller's transaction is already scoped to
    -- this tenant and its key (MCP, in-process), and only the roles' grants are applied.
    IF p_key_hash IS NOT NULL THEN
        granted := toolsift_agent_scope(p_tenant, p_key, p_key_hash, p_roles);
        IF p_roles IS NULL THEN
            acting := ARRAY(SELECT x FROM unnest(granted) x ORDER BY x COLLATE "C");
        ELSE
            FOR i IN 1 .. coalesce(array_length(p_roles, 1), 0) LOOP
                IF NOT p_roles[i] = ANY (granted) THEN
                    -- DETAIL: the index into roles, which the API names as the field.
                    RAISE EXCEPTION 'role not granted to this key'
                        USING ERRCODE = 'TSA02', DETAIL = (i - 1)::text;
                END IF;
            END LOOP;
            acting := ARRAY(SELECT DISTINCT x COLLATE "C" FROM unnest(p_roles) x ORDER BY 1);
        END IF;
    ELSE
        IF current_setting('app.tenant_id', true) IS DISTINCT FROM p_tenant::text THEN
            RAISE EXCEPTION 'the transaction is not scoped to this tenant'
                USING ERRCODE = 'TSA04';
        END IF;
        acting := coalesce(p_roles, '{}');
        PERFORM toolsift_apply_roles(p_tenant, acting);
    END IF;

    -- Scores of the tools the caller may see (RLS), fused into one ranked list; ties go
    -- to registry position, for determinism.
    -- Postings and vectors carry the tool's position: no tool row is read to rank.
    IF p_mode = 'bm25' THEN
        SELECT coalesce(array_agg(
                   ROW(b.tool_id, b.score, b.terms, b.rnk, NULL)::toolsift_ranked
                   ORDER BY b.rnk), '{}')
          INTO ranked
          FROM (SELECT s.*, row_number() OVER (ORDER BY s.score DESC, s.position) AS rnk
                  FROM toolsift_bm25(p_tenant, p_query, p_config, p_k1, p_b, p_pool) s) b;
    ELSE
        SELECT tn.embedding_model, tn.settings -> 'fusion' INTO served, fusion
          FROM public.tenants tn WHERE tn.id = p_tenant;
        f_k := toolsift_setting(fusion, 'k', 0, false, 'Infinity', 3.0);
        f_bm25 := toolsift_setting(fusion, 'bm25_weight', 0, true, 'Infinity', 1.0);
        f_dense := toolsift_setting(fusion, 'dense_weight', 0, true, 'Infinity', 1.0);
        f_scale := toolsift_setting(fusion, 'bm25_scale', 0, false, 'Infinity', 10.0);
        f_floor := toolsift_setting(fusion, 'bm25_floor', 0, true, 1, 0.45);
        -- Counted against the served model, under RLS: hidden tools are not counted. EXCEPT,
        -- not NOT EXISTS: a set difference is linear whatever the plan, where the generic
        -- plan of the anti-join compared every tool with every vector (43 ms at 1k tools).
        SELECT count(*) INTO missing FROM (
            SELECT t.id FROM public.tools t
             WHERE t.tenant_id = p_tenant AND t.deleted_at IS NULL
            EXCEPT
            SELECT e.tool_id FROM public.tool_embeddings e
             WHERE e.tenant_id = p_tenant AND e.model = served) m;
        WITH lex AS (
            SELECT s.tool_id, s.score, s.terms, s.position,
                   row_number() OVER (ORDER BY s.score DESC, s.position)::integer AS rnk
              FROM toolsift_bm25(p_tenant, p_query, p_config, p_k1, p_b, p_pool) s
             WHERE p_mode = 'hybrid'
        ),
        -- Vectors of another model than the tenant serves never mix in (a switch is on).
        near AS (
            SELECT x.tool_id, x.position, 1.0::float8 - x.distance AS similarity,
                   row_number() OVER (ORDER BY x.distance, x.position)::integer AS rnk
              -- A deleted tool's vectors are deleted with it (`embedding.service`).
              FROM (SELECT e.tool_id, e.embedding <=> p_vector AS distance, e.position
                      FROM public.tool_embeddings e
                     WHERE e.tenant_id = p_tenant AND e.model = p_model AND p_model = served
                       AND p_vector IS NOT NULL
                     ORDER BY distance, e.position
                     LIMIT p_pool) x
        ),
        weights AS (
            SELECT CASE WHEN count(*) = 0 THEN 0.0::float8
                        ELSE greatest(greatest(max(lex.score), 0) / (greatest(max(lex.score), 0)
                                      + f_scale), f_floor) END AS lexical
              FROM lex
        ),
        fused AS (
            SELECT coalesce(l.tool_id, n.tool_id) AS tool_id,
                   CASE WHEN p_mode = 'dense' THEN n.similarity
                        -- As `dense.fuse` adds them: the BM25 term first, then the dense one.
                        ELSE coalesce(f_bm25 * w.lexical / (f_k + l.rnk), 0.0::float8)
                             + coalesce(f_dense * (1.0 - w.lexical) / (f_k + n.rnk), 0.0::float8)
                   END AS score,
                   coalesce(l.terms, '{}') AS terms, l.rnk AS bm25_rank, n.rnk AS dense_rank,
                   coalesce(l.position, n.position) AS position
              FROM lex l FULL JOIN near n ON n.tool_id = l.tool_id CROSS JOIN weights w
        )
        SELECT coalesce(array_agg(
                   ROW(f.tool_id, f.score, f.terms, f.bm25_rank, f.dense_rank)::toolsift_ranked
                   ORDER BY f.score DESC, f.position), '{}')
          INTO ranked
          FROM fused f;
    END IF;

    -- The budget. Core tools always; then tools used in the conversation, still allowed,
    -- most recent first; then the ranked ones. What does not fit is skipped, and smaller
    -- ones are still tried.
    SELECT coalesce(array_agg(
               ROW(t.id, t.name, t.position, t.token_cost, 'core')::toolsift_pick
               ORDER BY t.position), '{}'),
           coalesce(array_agg(t.id ORDER BY t.position), '{}'),
           coalesce(sum(t.token_cost), 0)
      INTO picks, pick_ids, spent
      FROM public.tools t
     WHERE t.tenant_id = p_tenant AND t.deleted_at IS NULL AND t.core;
    FOREACH used IN ARRAY p_used LOOP
        -- One index probe per name: a join would let the planner scan the whole catalog.
        SELECT t.id, t.name, t.position, t.token_cost INTO tool FROM public.tools t
         WHERE t.tenant_id = p_tenant AND t.name = used AND t.deleted_at IS NULL;
        IF FOUND AND NOT tool.id = ANY (pick_ids) AND spent + tool.token_cost <= p_budget THEN
            picks := picks
                || ROW(tool.id, tool.name, tool.position, tool.token_cost, 'used')::toolsift_pick;
            pick_ids := pick_ids || tool.id;
            spent := spent + tool.token_cost;
        END IF;
    END LOOP;
    FOREACH r IN ARRAY ranked LOOP
        rank := rank + 1;
        -- What the budget needs of a candidate, read only for those it gets to.
        SELECT t.name, t.position, t.token_cost INTO tool FROM public.tools t
         WHERE t.tenant_id = p_tenant AND t.id = r.tool_id AND t.deleted_at IS NULL;
        CONTINUE WHEN NOT FOUND;
        IF r.tool_id = ANY (pick_ids) THEN
            reason := picks[array_position(pick_ids, r.tool_id)].reason;  -- core or used
        ELSIF added >= p_k THEN
            reason := 'beyond_k';
        ELSIF spent + tool.token_cost > p_budget THEN
            reason := 'over_budget';
        ELSE
            reason := 'selected';
            picks := picks || ROW(
                r.tool_id, tool.name, tool.position, tool.token_cost, 'ranked')::toolsift_pick;
            pick_ids := pick_ids || r.tool_id;
            spent := spent + tool.token_cost;
            added := added + 1;
        END IF;
        IF p_debug THEN
            candidates := candidates || json_strip_nulls(json_build_object(
                'name', tool.name, 'rank', rank, 'score', r.score, 'matched_terms', r.terms,
                'bm25_rank', r.bm25_rank, 'dense_rank', r.dense_rank,
                'selected', r.tool_id = ANY (pick_ids),
                'reason', reason))::text;
        ELSIF added >= p_k THEN
            EXIT;
        END IF;
    END LOOP;

    -- Core tools first, then the rest in registry order: the prompt-cache prefix survives.
    SELECT coalesce(array_agg(i.id ORDER BY i.o), '{}') AS ids,
           coalesce(array_agg(i.name ORDER BY i.o), '{}') AS names,
           coalesce(json_agg(json_build_object(
               'name', i.name, 'reason', i.reason, 'bm25_rank', i.bm25_rank,
               'dense_rank', i.dense_rank) ORDER BY i.o), '[]') AS details,
           coalesce(sum(i.token_cost), 0)::integer AS tokens
      INTO chosen
      -- Component ranks from the whole ranked list, core and used tools included.
      FROM (SELECT u.*, x.bm25_rank, x.dense_rank,
                   row_number() OVER (ORDER BY u.reason <> 'core', u.position) AS o
              FROM unnest(picks) u
              LEFT JOIN unnest(ranked) x ON x.tool_id = u.id
           ) i;

    INSERT INTO public.selection_logs (
        tenant_id, id, key_id, roles, mode, format, query, k, budget_tokens, tool_ids,
        tool_names, details, candidate_count, tokens, catalog_tokens, latency_ms)
    VALUES (
        p_tenant, p_selection, p_key, acting, p_mode, p_format, p_query, p_k, p_budget,
        chosen.ids, chosen.names, chosen.details::jsonb, cardinality(ranked), chosen.tokens,
        -- The allowed catalog's tokens, from the RLS-filtered statistics buckets.
        (SELECT coalesce(sum(total_tokens), 0) FROM public.corpus_stats
          WHERE tenant_id = p_tenant),
        p_elapsed_ms
            + extract(epoch FROM clock_timestamp() - statement_timestamp())::float8 * 1000);

    SELECT string_agg(toolsift_definition(
               t.name, t.title, t.description, t.input_schema, t.output_schema, t.annotations,
               p_format), ',' ORDER BY array_position(chosen.ids, t.id))
      INTO definitions
      FROM public.tools t
     WHERE t.tenant_id = p_tenant AND t.id = ANY (chosen.ids);

    -- The response body, in `SelectResponse`'s field order.
    RETURN '{"selection_id":"' || p_selection::text
        || '","mode":' || to_json(p_mode)::text
        || ',"format":' || to_json(p_format)::text
        || ',"tools":[' || coalesce(definitions, '') || ']'
        || ',"tokens":' || chosen.tokens
        || ',"budget_tokens":' || p_budget
        || CASE WHEN p_debug THEN ',"query":' || to_json(p_query)::text
                    || ',"candidates":[' || array_to_string(candidates, ',') || ']'
                ELSE '' END
        || CASE WHEN missing IS NOT NULL THEN ',"missing_embeddings":' || missing ELSE '' END
        || '}';
END
$$
"""

SIGNATURES = {
    "toolsift_bm25": "toolsift_bm25(uuid, text, regconfig, float8, float8, integer)",
    "toolsift_setting": "toolsift_setting(jsonb, text, float8, boolean, float8, float8)",
    "toolsift_definition": "toolsift_definition(text, text, text, jsonb, jsonb, jsonb, text)",
    "toolsift_apply_roles": "toolsift_apply_roles(uuid, text[])",
    "toolsift_select": (
        "toolsift_select(uuid, uuid, text, text[], uuid, text, regconfig, float8, float8,"
        " integer, text, vector, text, text[], integer, integer, text, boolean, float8)"
    ),
}


def upgrade() -> None:
    for statement in (BM25, SETTING, DEFINITION, APPLY_ROLES, RANKED, PICK, SELECT):
        op.execute(statement)
    for signature in SIGNATURES.values():
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {APP_ROLE}")
    for kind in ("toolsift_ranked", "toolsift_pick"):
        op.execute(f"GRANT USAGE ON TYPE {kind} TO {APP_ROLE}")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION {SIGNATURES['toolsift_select']}")
    op.execute("DROP TYPE toolsift_pick")
    op.execute("DROP TYPE toolsift_ranked")
    for name in (
        "toolsift_apply_roles",
        "toolsift_definition",
        "toolsift_setting",
        "toolsift_bm25",
    ):
        op.execute(f"DROP FUNCTION {SIGNATURES[name]}")
