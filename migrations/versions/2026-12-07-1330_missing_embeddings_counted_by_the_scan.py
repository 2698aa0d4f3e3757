"""A hybrid or dense select counts the tools without a vector from what it reads anyway.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07 13:30:00+00:00

`missing_embeddings` (visible live tools without a vector of the served model) was two
counts per select, `toolsift_missing_embeddings`, each reading every visible tool or
vector row: about a fifth of PostgreSQL's time per hybrid select at 10,000 tools. The
visible live tools are now the sum of the caller's statistics buckets (`corpus_stats`,
BM25's N), and the vectors are counted by the dense scan, which reads each of them already
(`count(*) OVER ()` before its LIMIT). The answer is the same; only a select with no vector
wanted (`p_model` NULL) still calls `toolsift_missing_embeddings`.
`toolsift_select` keeps its signature: replaced in place, its grants stay. The text is
`platform/toolsift/selection/sql/toolsift_select.sql`'s, written out; the way down is 0033's.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SELECT = r"""
-- One agent turn's selection, in one round trip: the caller's roles become its permissions
-- (row-level security then hides every tool it may not use, before any score), the query is
-- scored by BM25 and by the vector, the lists are fused (`fusion` settings, see
-- toolsift.selection.dense.Fusion), the tools are taken within the token budget (core tools
-- first, then the conversation's, then by rank), and the turn is logged. Returns the served
-- JSON: definitions in registry order, so the prompt-cache prefix survives. `p_steps` are
-- the vectors of the request's steps (`toolsift.selection.query.steps`, of p_vector's
-- model), NULL where it reads as one; an API from before migration 0033 passes none.
CREATE OR REPLACE FUNCTION public.toolsift_select(
    p_tenant uuid,
    p_key uuid,
    p_key_hash text,
    p_roles text[],
    p_selection uuid,
    p_query text,
    p_config regconfig,
    p_k1 double precision,
    p_b double precision,
    p_fusion jsonb,
    p_pool integer,
    p_mode text,
    p_vector vector,
    p_model text,
    p_used text[],
    p_k integer,
    p_budget integer,
    p_format text,
    p_debug boolean,
    p_elapsed_ms double precision,
    p_steps vector[] DEFAULT NULL::vector[]
)
RETURNS text
LANGUAGE plpgsql
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
    f_usage float8;
    f_companion float8;
    f_leads float8;
    f_support float8;
    f_window float8;
    missing integer;
    -- The vectors the dense scan read (those of p_model the caller may see).
    vectors integer;
    -- Tools the query's words matched (BM25's candidates); NULL where words are not scored.
    matched integer;
    -- Hybrid: the idf-weighted share of the query's words BM25's first tool matched.
    coverage float8;
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
    -- The rows the budget needs, read a chunk of ranks at a time: c_*[i] is rank base + i.
    base integer := 0;
    fetched integer := 0;
    c_names text[];
    c_positions bigint[];
    c_costs integer[];
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
                   ROW(b.tool_id, b.score, b.terms, b.rnk, NULL, NULL, NULL)::toolsift_ranked
                   ORDER BY b.rnk), '{}')
          INTO ranked
          FROM (SELECT s.*, row_number() OVER (ORDER BY s.score DESC, s.position) AS rnk
                  FROM toolsift_bm25(p_tenant, p_query, p_config, p_k1, p_b, p_pool, p_debug) s) b;
    ELSE
        SELECT tn.embedding_model, tn.settings -> 'fusion' INTO served, fusion
          FROM public.tenants tn WHERE tn.id = p_tenant;
        -- The defaults are the caller's (toolsift.selection.dense.Fusion), checked as a
        -- tenant's values are; a tenant's own value, where it is in range, wins.
        f_k := toolsift_setting(p_fusion, 'k', 0, false, 'Infinity', NULL);
        f_bm25 := toolsift_setting(p_fusion, 'bm25_weight', 0, true, 'Infinity', NULL);
        f_dense := toolsift_setting(p_fusion, 'dense_weight', 0, true, 'Infinity', NULL);
        f_scale := toolsift_setting(p_fusion, 'bm25_scale', 0, false, 'Infinity', NULL);
        f_floor := toolsift_setting(p_fusion, 'bm25_floor', 0, true, 1, NULL);
        -- An API from before the usage list passes no `usage_weight`: it had none (0).
        f_usage := CASE WHEN p_fusion ? 'usage_weight'
                        THEN toolsift_setting(p_fusion, 'usage_weight', 0, true, 'Infinity', NULL)
                        ELSE 0 END;
        -- Nor tools called together: no lift.
        f_companion := CASE WHEN p_fusion ? 'companion_weight'
                            THEN toolsift_setting(p_fusion, 'companion_weight', 0, true,
                                                  'Infinity', NULL)
                            ELSE 0 END;
        f_leads := CASE WHEN p_fusion ? 'companion_leads'
                        THEN toolsift_setting(p_fusion, 'companion_leads', 1, true, 100, NULL)
                        ELSE 1 END;
        f_support := CASE WHEN p_fusion ? 'companion_support'
                          THEN toolsift_setting(p_fusion, 'companion_support', 1, true,
                                                'Infinity', NULL)
                          ELSE 1 END;
        f_window := CASE WHEN p_fusion ? 'companion_window'
                         THEN toolsift_setting(p_fusion, 'companion_window', 1, true, 1000, NULL)
                         ELSE 1 END;
        IF num_nulls(f_k, f_bm25, f_dense, f_scale, f_floor, f_usage, f_companion, f_leads,
                     f_support, f_window) > 0 THEN
            RAISE EXCEPTION 'p_fusion lacks a fusion default, or one is out of range: %', p_fusion
                USING ERRCODE = '22023';
        END IF;
        f_k := toolsift_setting(fusion, 'k', 0, false, 'Infinity', f_k);
        f_bm25 := toolsift_setting(fusion, 'bm25_weight', 0, true, 'Infinity', f_bm25);
        f_dense := toolsift_setting(fusion, 'dense_weight', 0, true, 'Infinity', f_dense);
        f_scale := toolsift_setting(fusion, 'bm25_scale', 0, false, 'Infinity', f_scale);
        f_floor := toolsift_setting(fusion, 'bm25_floor', 0, true, 1, f_floor);
        f_usage := toolsift_setting(fusion, 'usage_weight', 0, true, 'Infinity', f_usage);
        f_companion := toolsift_setting(fusion, 'companion_weight', 0, true, 'Infinity',
                                        f_companion);
        f_leads := floor(toolsift_setting(fusion, 'companion_leads', 1, true, 100, f_leads));
        f_support := toolsift_setting(fusion, 'companion_support', 1, true, 'Infinity',
                                      f_support);
        f_window := floor(toolsift_setting(fusion, 'companion_window', 1, true, 1000, f_window));
        WITH lex AS (
            SELECT s.tool_id, s.score, s.terms, s.position, s.coverage,
                   row_number() OVER (ORDER BY s.score DESC, s.position)::integer AS rnk
              FROM toolsift_bm25(p_tenant, p_query, p_config, p_k1, p_b, p_pool, p_debug) s
             WHERE p_mode = 'hybrid'
        ),
        -- Vectors of another model than the tenant serves never mix in (a switch is on).
        -- Every vector the caller may see, by its distance: to the query's, or to the
        -- nearest of it and its steps' (a request of several steps is near none of its
        -- tools as a whole; docs/quality.md, "Steps of a request"). Kept (a few bytes a
        -- tool, not the vectors) so that the same scan is also the count of vectors for
        -- `missing_embeddings`.
        seen AS MATERIALIZED (
            SELECT e.tool_id,
                   CASE WHEN p_steps IS NULL THEN e.embedding <=> p_vector
                        ELSE (SELECT min(e.embedding <=> v)
                                FROM unnest(array_prepend(p_vector, p_steps)) v) END AS distance,
                   e.position
              FROM public.tool_embeddings e
             WHERE e.tenant_id = p_tenant AND e.model = p_model
               AND p_model = served AND p_vector IS NOT NULL
        ),
        -- The tools nearest by their own vector, cut to the pool.
        own AS (
            SELECT s.tool_id, s.distance, s.position
              FROM seen s
             ORDER BY s.distance, s.position
             LIMIT p_pool
        ),
        -- The tools nearest by the queries they were called for (`learned_queries`), each by
        -- its nearest one, cut to the pool; empty for a tenant that reported no calls.
        learned AS (
            SELECT q.tool_id, min(q.embedding <=> p_vector) AS distance,
                   min(q.position) AS position
              FROM public.learned_queries q
             WHERE q.tenant_id = p_tenant AND q.model = p_model
               AND p_model = served AND p_vector IS NOT NULL
             GROUP BY q.tool_id
             ORDER BY distance, position
             LIMIT p_pool
        ),
        -- A tool is as near as the nearest of its own vector and its learned queries: usage
        -- reaches it by the words its users use. A deleted tool's vectors are deleted with
        -- it (`embedding.service`). Each side's first p_pool tools hold every tool of the
        -- merged first p_pool at its nearest distance.
        near AS (
            SELECT x.tool_id, x.position, 1.0::float8 - x.distance AS similarity,
                   row_number() OVER (ORDER BY x.distance, x.position)::integer AS rnk
              FROM (SELECT v.tool_id, min(v.distance) AS distance, min(v.position) AS position
                      FROM (SELECT * FROM own UNION ALL SELECT * FROM learned) v
                     GROUP BY v.tool_id
                     ORDER BY distance, position
                     LIMIT p_pool) x
        ),
        -- Usage as a list of its own (hybrid): the tools called for queries like this one,
        -- ranked by the nearest such query, so that a tool learned for this kind of request
        -- counts twice against BM25's words (docs/quality.md, "The usage list").
        usage AS (
            SELECT l.tool_id, l.position,
                   row_number() OVER (ORDER BY l.distance, l.position)::integer AS rnk
              FROM learned l
             WHERE p_mode = 'hybrid'
        ),
        -- BM25's floor is kept in full only by a first tool that has every word of the query
        -- the catalog has: a match on one common word of several is nearly noise.
        best AS (
            SELECT lex.score, lex.coverage FROM lex WHERE lex.rnk = 1
        ),
        weights AS (
            SELECT CASE WHEN f.score IS NULL THEN 0.0::float8
                        ELSE greatest(greatest(f.score, 0) / (greatest(f.score, 0) + f_scale),
                                      f_floor * f.coverage) END AS lexical,
                   f.coverage
              FROM (SELECT 1) one LEFT JOIN best f ON true
        ),
        fused AS (
            SELECT coalesce(l.tool_id, n.tool_id, u.tool_id) AS tool_id,
                   CASE WHEN p_mode = 'dense' THEN n.similarity
                        -- As `dense.fuse` adds them: BM25's term, then dense's, then usage's.
                        ELSE coalesce(f_bm25 * w.lexical / (f_k + l.rnk), 0.0::float8)
                             + coalesce(f_dense * (1.0 - w.lexical) / (f_k + n.rnk), 0.0::float8)
                             + coalesce(f_usage * (1.0 - w.lexical) / (f_k + u.rnk), 0.0::float8)
                   END AS score,
                   coalesce(l.terms, '{}') AS terms, l.rnk AS bm25_rank, n.rnk AS dense_rank,
                   u.rnk AS usage_rank, coalesce(l.position, n.position, u.position) AS position
              FROM lex l FULL JOIN near n ON n.tool_id = l.tool_id
              FULL JOIN usage u ON u.tool_id = coalesce(l.tool_id, n.tool_id)
              CROSS JOIN weights w
        ),
        -- Tools called together (hybrid): each of the fused first `companion_leads` tools
        -- looks at the selections of its last `companion_window` calls; with at least
        -- `companion_support`, it lifts every other candidate called in some of them, by
        -- `companion_weight` times their share times its own score (`dense.lift_companions`).
        -- Only candidates move: a tool the caller may not see is never one. The calls are the
        -- logs', so they leave with them (retention).
        lead AS (
            SELECT f.tool_id, f.score, t.name,
                   row_number() OVER (ORDER BY f.score DESC, f.position) AS o
              FROM (SELECT * FROM fused f
                     WHERE p_mode = 'hybrid' AND f_companion > 0
                     ORDER BY f.score DESC, f.position
                     LIMIT f_leads::integer) f
              JOIN public.tools t ON t.tenant_id = p_tenant AND t.id = f.tool_id
        ),
        recent AS (
            SELECT l.tool_id, l.score, l.o, c.selection_id, c.selection_created_at,
                   count(*) OVER (PARTITION BY l.tool_id) AS n
              FROM lead l
              -- Its last calls, read backwards along the index and no further: a tool's
              -- history in the logs may be long.
              CROSS JOIN LATERAL (
                  SELECT DISTINCT c.selection_created_at, c.selection_id
                    FROM (SELECT c.selection_created_at, c.selection_id
                            FROM public.tool_calls c
                           WHERE c.tenant_id = p_tenant AND c.tool_name = l.name AND c.allowed
                             AND c.success IS DISTINCT FROM false
                           ORDER BY c.selection_created_at DESC, c.selection_id DESC
                           LIMIT f_window::integer) c) c
        ),
        together AS (
            SELECT t.id AS tool_id, w.o, w.score, w.n, count(DISTINCT w.selection_id) AS shared
              FROM recent w
              JOIN public.tool_calls c
                ON c.tenant_id = p_tenant AND c.selection_created_at = w.selection_created_at
               AND c.selection_id = w.selection_id AND c.allowed
               AND c.success IS DISTINCT FROM false
              JOIN public.tools t
                ON t.tenant_id = p_tenant AND t.name = c.tool_name AND t.deleted_at IS NULL
             WHERE w.n >= f_support AND t.id <> w.tool_id
             GROUP BY t.id, w.o, w.score, w.n
        ),
        -- Summed in the leads' order, as `dense.lift_companions` adds them.
        lift AS (
            SELECT t.tool_id,
                   sum(f_companion * t.shared::float8 / t.n::float8 * t.score ORDER BY t.o)
                       AS score
              FROM together t
             GROUP BY t.tool_id
        ),
        lifted AS (
            SELECT f.tool_id, f.score + coalesce(c.score, 0) AS score, f.terms, f.bm25_rank,
                   f.dense_rank, f.usage_rank, c.score AS lift, f.position
              FROM fused f LEFT JOIN lift c ON c.tool_id = f.tool_id
        )
        SELECT coalesce(array_agg(
                   ROW(f.tool_id, f.score, f.terms, f.bm25_rank, f.dense_rank,
                       f.usage_rank, f.lift)::toolsift_ranked
                   ORDER BY f.score DESC, f.position), '{}'),
               (SELECT w.coverage FROM weights w),
               (SELECT count(*) FROM seen)
          INTO ranked, coverage, vectors
          FROM lifted f;
        -- Under RLS, so hidden tools are not counted: the visible live tools (the
        -- statistics buckets the caller may use count them, as BM25's N) less the vectors
        -- the scan saw, which are a subset (vectors are stored only for live tools, with
        -- their permission: `embedding.service`). With no vector wanted (p_model NULL),
        -- against the served model's vectors.
        missing := CASE WHEN p_model IS NULL THEN toolsift_missing_embeddings(p_tenant, served)
                        ELSE (SELECT coalesce(sum(s.doc_count), 0)::integer
                                FROM public.corpus_stats s WHERE s.tenant_id = p_tenant)
                             - vectors END;
    END IF;
    -- In hybrid, dense ranks every embedded tool whatever the query says: the logs keep
    -- whether its words matched anything, which is what a catalog's gaps show in.
    matched := CASE p_mode
        WHEN 'bm25' THEN cardinality(ranked)
        WHEN 'hybrid' THEN (SELECT count(*) FROM unnest(ranked) x WHERE x.bm25_rank IS NOT NULL)
    END;

    -- The budget. Core tools always; then tools used in the conversation, still allowed,
    -- most recent first; then the ranked ones. What does not fit is skipped, and smaller
    -- ones are still tried.
    SELECT coalesce(array_agg(
               ROW(t.id, t.name, t.position,
                   CASE p_format WHEN 'openai' THEN t.openai_token_cost
                        WHEN 'openai_responses' THEN t.openai_responses_token_cost
                        WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END,
                   'core')::toolsift_pick
               ORDER BY t.position), '{}'),
           coalesce(array_agg(t.id ORDER BY t.position), '{}'),
           coalesce(sum(CASE p_format WHEN 'openai' THEN t.openai_token_cost
                             WHEN 'openai_responses' THEN t.openai_responses_token_cost
                             WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END), 0)
      INTO picks, pick_ids, spent
      FROM public.tools t
     WHERE t.tenant_id = p_tenant AND t.deleted_at IS NULL AND t.core;
    FOREACH used IN ARRAY p_used LOOP
        -- One index probe per name: a join would let the planner scan the whole catalog.
        SELECT t.id, t.name, t.position,
               CASE p_format WHEN 'openai' THEN t.openai_token_cost
                    WHEN 'openai_responses' THEN t.openai_responses_token_cost
                    WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END AS token_cost
          INTO tool
          FROM public.tools t
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
        -- What the budget needs of a candidate, read only for those it gets to, and a chunk
        -- of ranks per statement rather than a statement per rank: k plus the tools already
        -- picked plus a few that may not fit (every rank for debug output).
        IF rank > fetched THEN
            base := rank - 1;
            fetched := base + CASE WHEN p_debug THEN cardinality(ranked)
                                   ELSE p_k + cardinality(pick_ids) + 3 END;
            SELECT array_agg(t.name ORDER BY x.o), array_agg(t.position ORDER BY x.o),
                   array_agg(CASE p_format WHEN 'openai' THEN t.openai_token_cost
                                  WHEN 'openai_responses' THEN t.openai_responses_token_cost
                                  WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END
                             ORDER BY x.o)
              INTO c_names, c_positions, c_costs
              FROM unnest(ranked[rank:fetched]) WITH ORDINALITY
                       AS x(tool_id, score, terms, bm25_rank, dense_rank, usage_rank, lift, o)
              LEFT JOIN public.tools t
                ON t.tenant_id = p_tenant AND t.id = x.tool_id AND t.deleted_at IS NULL;
        END IF;
        CONTINUE WHEN c_names[rank - base] IS NULL;  -- deleted since it was ranked
        tool := ROW(r.tool_id, c_names[rank - base], c_positions[rank - base],
                    c_costs[rank - base], NULL)::toolsift_pick;
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
                'usage_rank', r.usage_rank, 'companion_lift', r.lift,
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
               'dense_rank', i.dense_rank, 'usage_rank', i.usage_rank,
               'companion_lift', i.lift) ORDER BY i.o),
               '[]') AS details,
           coalesce(sum(i.token_cost), 0)::integer AS tokens
      INTO chosen
      -- Component ranks from the whole ranked list, core and used tools included.
      FROM (SELECT u.*, x.bm25_rank, x.dense_rank, x.usage_rank, x.lift,
                   row_number() OVER (ORDER BY u.reason <> 'core', u.position) AS o
              FROM unnest(picks) u
              LEFT JOIN unnest(ranked) x ON x.tool_id = u.id
           ) i;

    INSERT INTO public.selection_logs (
        tenant_id, id, key_id, roles, mode, format, query, k, budget_tokens, tool_ids,
        tool_names, details, candidate_count, lexical_count, tokens, catalog_tokens,
        latency_ms)
    VALUES (
        p_tenant, p_selection, p_key, acting, p_mode, p_format, p_query, p_k, p_budget,
        chosen.ids, chosen.names, chosen.details::jsonb, cardinality(ranked), matched,
        chosen.tokens,
        -- The allowed catalog's tokens, from the RLS-filtered statistics buckets.
        (SELECT coalesce(sum(CASE p_format WHEN 'openai' THEN openai_total_tokens
                                     WHEN 'openai_responses' THEN openai_responses_total_tokens
                                     WHEN 'mcp' THEN mcp_total_tokens ELSE total_tokens END), 0)
           FROM public.corpus_stats
          WHERE tenant_id = p_tenant),
        p_elapsed_ms
            + extract(epoch FROM clock_timestamp() - statement_timestamp())::float8 * 1000);

    definitions := toolsift_definitions(p_tenant, chosen.ids, p_format);

    -- The response body, in `SelectResponse`'s field order.
    RETURN '{"selection_id":"' || p_selection::text
        || '","mode":' || to_json(p_mode)::text
        || ',"format":' || to_json(p_format)::text
        || ',"tools":[' || coalesce(definitions, '') || ']'
        || ',"tokens":' || chosen.tokens
        || ',"budget_tokens":' || p_budget
        || CASE WHEN p_debug THEN ',"query":' || to_json(p_query)::text
                    || CASE WHEN p_steps IS NOT NULL AND p_vector IS NOT NULL
                                 AND p_model = served AND p_mode <> 'bm25'
                            THEN ',"steps":' || cardinality(p_steps) ELSE '' END
                    || ',"candidates":[' || array_to_string(candidates, ',') || ']'
                    || CASE WHEN coverage IS NOT NULL
                            THEN ',"bm25_coverage":' || coverage ELSE '' END
                ELSE '' END
        || CASE WHEN missing IS NOT NULL THEN ',"missing_embeddings":' || missing ELSE '' END
        || '}';
END
$$
"""

SELECT_0033 = r"""

-- One agent turn's selection, in one round trip: the caller's roles become its permissions
-- (row-level security then hides every tool it may not use, before any score), the query is
-- scored by BM25 and by the vector, the lists are fused (`fusion` settings, see
-- toolsift.selection.dense.Fusion), the tools are taken within the token budget (core tools
-- first, then the conversation's, then by rank), and the turn is logged. Returns the served
-- JSON: definitions in registry order, so the prompt-cache prefix survives. `p_steps` are
-- the vectors of the request's steps (`toolsift.selection.query.steps`, of p_vector's
-- model), NULL where it reads as one; an API from before migration 0033 passes none.
CREATE OR REPLACE FUNCTION public.toolsift_select(
    p_tenant uuid,
    p_key uuid,
    p_key_hash text,
    p_roles text[],
    p_selection uuid,
    p_query text,
    p_config regconfig,
    p_k1 double precision,
    p_b double precision,
    p_fusion jsonb,
    p_pool integer,
    p_mode text,
    p_vector vector,
    p_model text,
    p_used text[],
    p_k integer,
    p_budget integer,
    p_format text,
    p_debug boolean,
    p_elapsed_ms double precision,
    p_steps vector[] DEFAULT NULL::vector[]
)
RETURNS text
LANGUAGE plpgsql
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
    f_usage float8;
    f_companion float8;
    f_leads float8;
    f_support float8;
    f_window float8;
    missing integer;
    -- Tools the query's words matched (BM25's candidates); NULL where words are not scored.
    matched integer;
    -- Hybrid: the idf-weighted share of the query's words BM25's first tool matched.
    coverage float8;
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
    -- The rows the budget needs, read a chunk of ranks at a time: c_*[i] is rank base + i.
    base integer := 0;
    fetched integer := 0;
    c_names text[];
    c_positions bigint[];
    c_costs integer[];
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
                   ROW(b.tool_id, b.score, b.terms, b.rnk, NULL, NULL, NULL)::toolsift_ranked
                   ORDER BY b.rnk), '{}')
          INTO ranked
          FROM (SELECT s.*, row_number() OVER (ORDER BY s.score DESC, s.position) AS rnk
                  FROM toolsift_bm25(p_tenant, p_query, p_config, p_k1, p_b, p_pool, p_debug) s) b;
    ELSE
        SELECT tn.embedding_model, tn.settings -> 'fusion' INTO served, fusion
          FROM public.tenants tn WHERE tn.id = p_tenant;
        -- The defaults are the caller's (toolsift.selection.dense.Fusion), checked as a
        -- tenant's values are; a tenant's own value, where it is in range, wins.
        f_k := toolsift_setting(p_fusion, 'k', 0, false, 'Infinity', NULL);
        f_bm25 := toolsift_setting(p_fusion, 'bm25_weight', 0, true, 'Infinity', NULL);
        f_dense := toolsift_setting(p_fusion, 'dense_weight', 0, true, 'Infinity', NULL);
        f_scale := toolsift_setting(p_fusion, 'bm25_scale', 0, false, 'Infinity', NULL);
        f_floor := toolsift_setting(p_fusion, 'bm25_floor', 0, true, 1, NULL);
        -- An API from before the usage list passes no `usage_weight`: it had none (0).
        f_usage := CASE WHEN p_fusion ? 'usage_weight'
                        THEN toolsift_setting(p_fusion, 'usage_weight', 0, true, 'Infinity', NULL)
                        ELSE 0 END;
        -- Nor tools called together: no lift.
        f_companion := CASE WHEN p_fusion ? 'companion_weight'
                            THEN toolsift_setting(p_fusion, 'companion_weight', 0, true,
                                                  'Infinity', NULL)
                            ELSE 0 END;
        f_leads := CASE WHEN p_fusion ? 'companion_leads'
                        THEN toolsift_setting(p_fusion, 'companion_leads', 1, true, 100, NULL)
                        ELSE 1 END;
        f_support := CASE WHEN p_fusion ? 'companion_support'
                          THEN toolsift_setting(p_fusion, 'companion_support', 1, true,
                                                'Infinity', NULL)
                          ELSE 1 END;
        f_window := CASE WHEN p_fusion ? 'companion_window'
                         THEN toolsift_setting(p_fusion, 'companion_window', 1, true, 1000, NULL)
                         ELSE 1 END;
        IF num_nulls(f_k, f_bm25, f_dense, f_scale, f_floor, f_usage, f_companion, f_leads,
                     f_support, f_window) > 0 THEN
            RAISE EXCEPTION 'p_fusion lacks a fusion default, or one is out of range: %', p_fusion
                USING ERRCODE = '22023';
        END IF;
        f_k := toolsift_setting(fusion, 'k', 0, false, 'Infinity', f_k);
        f_bm25 := toolsift_setting(fusion, 'bm25_weight', 0, true, 'Infinity', f_bm25);
        f_dense := toolsift_setting(fusion, 'dense_weight', 0, true, 'Infinity', f_dense);
        f_scale := toolsift_setting(fusion, 'bm25_scale', 0, false, 'Infinity', f_scale);
        f_floor := toolsift_setting(fusion, 'bm25_floor', 0, true, 1, f_floor);
        f_usage := toolsift_setting(fusion, 'usage_weight', 0, true, 'Infinity', f_usage);
        f_companion := toolsift_setting(fusion, 'companion_weight', 0, true, 'Infinity',
                                        f_companion);
        f_leads := floor(toolsift_setting(fusion, 'companion_leads', 1, true, 100, f_leads));
        f_support := toolsift_setting(fusion, 'companion_support', 1, true, 'Infinity',
                                      f_support);
        f_window := floor(toolsift_setting(fusion, 'companion_window', 1, true, 1000, f_window));
        -- Counted against the served model, under RLS: hidden tools are not counted.
        missing := toolsift_missing_embeddings(
            p_tenant, CASE WHEN p_model IS NULL THEN served
                           WHEN p_vector IS NOT NULL AND p_model = served THEN served
                           ELSE '' END);
        WITH lex AS (
            SELECT s.tool_id, s.score, s.terms, s.position, s.coverage,
                   row_number() OVER (ORDER BY s.score DESC, s.position)::integer AS rnk
              FROM toolsift_bm25(p_tenant, p_query, p_config, p_k1, p_b, p_pool, p_debug) s
             WHERE p_mode = 'hybrid'
        ),
        -- Vectors of another model than the tenant serves never mix in (a switch is on).
        -- The tools nearest by their own vector, cut to the pool: to the query's, or to the
        -- nearest of it and its steps' (a request of several steps is near none of its
        -- tools as a whole; docs/quality.md, "Steps of a request").
        own AS (
            SELECT e.tool_id,
                   CASE WHEN p_steps IS NULL THEN e.embedding <=> p_vector
                        ELSE (SELECT min(e.embedding <=> v)
                                FROM unnest(array_prepend(p_vector, p_steps)) v) END AS distance,
                   e.position
              FROM public.tool_embeddings e
             WHERE e.tenant_id = p_tenant AND e.model = p_model
               AND p_model = served AND p_vector IS NOT NULL
             ORDER BY distance, e.position
             LIMIT p_pool
        ),
        -- The tools nearest by the queries they were called for (`learned_queries`), each by
        -- its nearest one, cut to the pool; empty for a tenant that reported no calls.
        learned AS (
            SELECT q.tool_id, min(q.embedding <=> p_vector) AS distance,
                   min(q.position) AS position
              FROM public.learned_queries q
             WHERE q.tenant_id = p_tenant AND q.model = p_model
               AND p_model = served AND p_vector IS NOT NULL
             GROUP BY q.tool_id
             ORDER BY distance, position
             LIMIT p_pool
        ),
        -- A tool is as near as the nearest of its own vector and its learned queries: usage
        -- reaches it by the words its users use. A deleted tool's vectors are deleted with
        -- it (`embedding.service`). Each side's first p_pool tools hold every tool of the
        -- merged first p_pool at its nearest distance.
        near AS (
            SELECT x.tool_id, x.position, 1.0::float8 - x.distance AS similarity,
                   row_number() OVER (ORDER BY x.distance, x.position)::integer AS rnk
              FROM (SELECT v.tool_id, min(v.distance) AS distance, min(v.position) AS position
                      FROM (SELECT * FROM own UNION ALL SELECT * FROM learned) v
                     GROUP BY v.tool_id
                     ORDER BY distance, position
                     LIMIT p_pool) x
        ),
        -- Usage as a list of its own (hybrid): the tools called for queries like this one,
        -- ranked by the nearest such query, so that a tool learned for this kind of request
        -- counts twice against BM25's words (docs/quality.md, "The usage list").
        usage AS (
            SELECT l.tool_id, l.position,
                   row_number() OVER (ORDER BY l.distance, l.position)::integer AS rnk
              FROM learned l
             WHERE p_mode = 'hybrid'
        ),
        -- BM25's floor is kept in full only by a first tool that has every word of the query
        -- the catalog has: a match on one common word of several is nearly noise.
        best AS (
            SELECT lex.score, lex.coverage FROM lex WHERE lex.rnk = 1
        ),
        weights AS (
            SELECT CASE WHEN f.score IS NULL THEN 0.0::float8
                        ELSE greatest(greatest(f.score, 0) / (greatest(f.score, 0) + f_scale),
                                      f_floor * f.coverage) END AS lexical,
                   f.coverage
              FROM (SELECT 1) one LEFT JOIN best f ON true
        ),
        fused AS (
            SELECT coalesce(l.tool_id, n.tool_id, u.tool_id) AS tool_id,
                   CASE WHEN p_mode = 'dense' THEN n.similarity
                        -- As `dense.fuse` adds them: BM25's term, then dense's, then usage's.
                        ELSE coalesce(f_bm25 * w.lexical / (f_k + l.rnk), 0.0::float8)
                             + coalesce(f_dense * (1.0 - w.lexical) / (f_k + n.rnk), 0.0::float8)
                             + coalesce(f_usage * (1.0 - w.lexical) / (f_k + u.rnk), 0.0::float8)
                   END AS score,
                   coalesce(l.terms, '{}') AS terms, l.rnk AS bm25_rank, n.rnk AS dense_rank,
                   u.rnk AS usage_rank, coalesce(l.position, n.position, u.position) AS position
              FROM lex l FULL JOIN near n ON n.tool_id = l.tool_id
              FULL JOIN usage u ON u.tool_id = coalesce(l.tool_id, n.tool_id)
              CROSS JOIN weights w
        ),
        -- Tools called together (hybrid): each of the fused first `companion_leads` tools
        -- looks at the selections of its last `companion_window` calls; with at least
        -- `companion_support`, it lifts every other candidate called in some of them, by
        -- `companion_weight` times their share times its own score (`dense.lift_companions`).
        -- Only candidates move: a tool the caller may not see is never one. The calls are the
        -- logs', so they leave with them (retention).
        lead AS (
            SELECT f.tool_id, f.score, t.name,
                   row_number() OVER (ORDER BY f.score DESC, f.position) AS o
              FROM (SELECT * FROM fused f
                     WHERE p_mode = 'hybrid' AND f_companion > 0
                     ORDER BY f.score DESC, f.position
                     LIMIT f_leads::integer) f
              JOIN public.tools t ON t.tenant_id = p_tenant AND t.id = f.tool_id
        ),
        recent AS (
            SELECT l.tool_id, l.score, l.o, c.selection_id, c.selection_created_at,
                   count(*) OVER (PARTITION BY l.tool_id) AS n
              FROM lead l
              -- Its last calls, read backwards along the index and no further: a tool's
              -- history in the logs may be long.
              CROSS JOIN LATERAL (
                  SELECT DISTINCT c.selection_created_at, c.selection_id
                    FROM (SELECT c.selection_created_at, c.selection_id
                            FROM public.tool_calls c
                           WHERE c.tenant_id = p_tenant AND c.tool_name = l.name AND c.allowed
                             AND c.success IS DISTINCT FROM false
                           ORDER BY c.selection_created_at DESC, c.selection_id DESC
                           LIMIT f_window::integer) c) c
        ),
        together AS (
            SELECT t.id AS tool_id, w.o, w.score, w.n, count(DISTINCT w.selection_id) AS shared
              FROM recent w
              JOIN public.tool_calls c
                ON c.tenant_id = p_tenant AND c.selection_created_at = w.selection_created_at
               AND c.selection_id = w.selection_id AND c.allowed
               AND c.success IS DISTINCT FROM false
              JOIN public.tools t
                ON t.tenant_id = p_tenant AND t.name = c.tool_name AND t.deleted_at IS NULL
             WHERE w.n >= f_support AND t.id <> w.tool_id
             GROUP BY t.id, w.o, w.score, w.n
        ),
        -- Summed in the leads' order, as `dense.lift_companions` adds them.
        lift AS (
            SELECT t.tool_id,
                   sum(f_companion * t.shared::float8 / t.n::float8 * t.score ORDER BY t.o)
                       AS score
              FROM together t
             GROUP BY t.tool_id
        ),
        lifted AS (
            SELECT f.tool_id, f.score + coalesce(c.score, 0) AS score, f.terms, f.bm25_rank,
                   f.dense_rank, f.usage_rank, c.score AS lift, f.position
              FROM fused f LEFT JOIN lift c ON c.tool_id = f.tool_id
        )
        SELECT coalesce(array_agg(
                   ROW(f.tool_id, f.score, f.terms, f.bm25_rank, f.dense_rank,
                       f.usage_rank, f.lift)::toolsift_ranked
                   ORDER BY f.score DESC, f.position), '{}'),
               (SELECT w.coverage FROM weights w)
          INTO ranked, coverage
          FROM lifted f;
    END IF;
    -- In hybrid, dense ranks every embedded tool whatever the query says: the logs keep
    -- whether its words matched anything, which is what a catalog's gaps show in.
    matched := CASE p_mode
        WHEN 'bm25' THEN cardinality(ranked)
        WHEN 'hybrid' THEN (SELECT count(*) FROM unnest(ranked) x WHERE x.bm25_rank IS NOT NULL)
    END;

    -- The budget. Core tools always; then tools used in the conversation, still allowed,
    -- most recent first; then the ranked ones. What does not fit is skipped, and smaller
    -- ones are still tried.
    SELECT coalesce(array_agg(
               ROW(t.id, t.name, t.position,
                   CASE p_format WHEN 'openai' THEN t.openai_token_cost
                        WHEN 'openai_responses' THEN t.openai_responses_token_cost
                        WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END,
                   'core')::toolsift_pick
               ORDER BY t.position), '{}'),
           coalesce(array_agg(t.id ORDER BY t.position), '{}'),
           coalesce(sum(CASE p_format WHEN 'openai' THEN t.openai_token_cost
                             WHEN 'openai_responses' THEN t.openai_responses_token_cost
                             WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END), 0)
      INTO picks, pick_ids, spent
      FROM public.tools t
     WHERE t.tenant_id = p_tenant AND t.deleted_at IS NULL AND t.core;
    FOREACH used IN ARRAY p_used LOOP
        -- One index probe per name: a join would let the planner scan the whole catalog.
        SELECT t.id, t.name, t.position,
               CASE p_format WHEN 'openai' THEN t.openai_token_cost
                    WHEN 'openai_responses' THEN t.openai_responses_token_cost
                    WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END AS token_cost
          INTO tool
          FROM public.tools t
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
        -- What the budget needs of a candidate, read only for those it gets to, and a chunk
        -- of ranks per statement rather than a statement per rank: k plus the tools already
        -- picked plus a few that may not fit (every rank for debug output).
        IF rank > fetched THEN
            base := rank - 1;
            fetched := base + CASE WHEN p_debug THEN cardinality(ranked)
                                   ELSE p_k + cardinality(pick_ids) + 3 END;
            SELECT array_agg(t.name ORDER BY x.o), array_agg(t.position ORDER BY x.o),
                   array_agg(CASE p_format WHEN 'openai' THEN t.openai_token_cost
                                  WHEN 'openai_responses' THEN t.openai_responses_token_cost
                                  WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END
                             ORDER BY x.o)
              INTO c_names, c_positions, c_costs
              FROM unnest(ranked[rank:fetched]) WITH ORDINALITY
                       AS x(tool_id, score, terms, bm25_rank, dense_rank, usage_rank, lift, o)
              LEFT JOIN public.tools t
                ON t.tenant_id = p_tenant AND t.id = x.tool_id AND t.deleted_at IS NULL;
        END IF;
        CONTINUE WHEN c_names[rank - base] IS NULL;  -- deleted since it was ranked
        tool := ROW(r.tool_id, c_names[rank - base], c_positions[rank - base],
                    c_costs[rank - base], NULL)::toolsift_pick;
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
                'usage_rank', r.usage_rank, 'companion_lift', r.lift,
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
               'dense_rank', i.dense_rank, 'usage_rank', i.usage_rank,
               'companion_lift', i.lift) ORDER BY i.o),
               '[]') AS details,
           coalesce(sum(i.token_cost), 0)::integer AS tokens
      INTO chosen
      -- Component ranks from the whole ranked list, core and used tools included.
      FROM (SELECT u.*, x.bm25_rank, x.dense_rank, x.usage_rank, x.lift,
                   row_number() OVER (ORDER BY u.reason <> 'core', u.position) AS o
              FROM unnest(picks) u
              LEFT JOIN unnest(ranked) x ON x.tool_id = u.id
           ) i;

    INSERT INTO public.selection_logs (
        tenant_id, id, key_id, roles, mode, format, query, k, budget_tokens, tool_ids,
        tool_names, details, candidate_count, lexical_count, tokens, catalog_tokens,
        latency_ms)
    VALUES (
        p_tenant, p_selection, p_key, acting, p_mode, p_format, p_query, p_k, p_budget,
        chosen.ids, chosen.names, chosen.details::jsonb, cardinality(ranked), matched,
        chosen.tokens,
        -- The allowed catalog's tokens, from the RLS-filtered statistics buckets.
        (SELECT coalesce(sum(CASE p_format WHEN 'openai' THEN openai_total_tokens
                                     WHEN 'openai_responses' THEN openai_responses_total_tokens
                                     WHEN 'mcp' THEN mcp_total_tokens ELSE total_tokens END), 0)
           FROM public.corpus_stats
          WHERE tenant_id = p_tenant),
        p_elapsed_ms
            + extract(epoch FROM clock_timestamp() - statement_timestamp())::float8 * 1000);

    definitions := toolsift_definitions(p_tenant, chosen.ids, p_format);

    -- The response body, in `SelectResponse`'s field order.
    RETURN '{"selection_id":"' || p_selection::text
        || '","mode":' || to_json(p_mode)::text
        || ',"format":' || to_json(p_format)::text
        || ',"tools":[' || coalesce(definitions, '') || ']'
        || ',"tokens":' || chosen.tokens
        || ',"budget_tokens":' || p_budget
        || CASE WHEN p_debug THEN ',"query":' || to_json(p_query)::text
                    || CASE WHEN p_steps IS NOT NULL AND p_vector IS NOT NULL
                                 AND p_model = served AND p_mode <> 'bm25'
                            THEN ',"steps":' || cardinality(p_steps) ELSE '' END
                    || ',"candidates":[' || array_to_string(candidates, ',') || ']'
                    || CASE WHEN coverage IS NOT NULL
                            THEN ',"bm25_coverage":' || coverage ELSE '' END
                ELSE '' END
        || CASE WHEN missing IS NOT NULL THEN ',"missing_embeddings":' || missing ELSE '' END
        || '}';
END
$$
"""


def upgrade() -> None:
    op.execute(SELECT)


def downgrade() -> None:
    op.execute(SELECT_0033)
