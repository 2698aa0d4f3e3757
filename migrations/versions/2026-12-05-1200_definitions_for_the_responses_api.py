"""Definitions for OpenAI's Responses API: the `openai_responses` format.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05 12:00:00+00:00

The `openai` format is the Chat Completions shape, a `function` object inside the tool. The
Responses API takes the same fields at the tool's top, and its `strict` defaults to true,
under which it refuses any schema outside its strict subset: every definition of this format
says `"strict": false`, so that it works for every schema, as Chat Completions does.

`tools` gets `openai_responses_token_cost`, `corpus_stats` its total, `toolsift_definition`
the new shape, and `toolsift_select` counts the new cost (0017's function with the format's
cost added to its choice of cost). The analyst group may read the new cost, as the others.
"""

import json
import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ANALYST_ROLE = "toolsift_analyst"
# Locked together before any is changed, as in 0020.
TABLES = ("tools", "corpus_stats")
LOCK = f"LOCK TABLE {', '.join(TABLES)} IN ACCESS EXCLUSIVE MODE"

# 0020's toolsift_definition with a branch for the new format before its last one (`mcp`):
# `json_build_object('type', 'function', 'name', ..., 'strict', false)`, the description cut
# at 1,024 characters as OpenAI's limit requires.
DEFINITION = r"""
CREATE OR REPLACE FUNCTION toolsift_definition(
    p_name text, p_title text, p_description text, p_input json, p_output json,
    p_annotations json, p_format text
) RETURNS text
-- STABLE, as json_build_object is: an IMMUTABLE label would keep it from being inlined.
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE p_format
        WHEN 'anthropic' THEN json_build_object(
            'name', p_name, 'description', p_description,
            'input_schema', toolsift_served_schema(p_input))::text
        WHEN 'anthropic_tool_reference' THEN json_build_object(
            'type', 'tool_reference', 'tool_name', p_name)::text
        WHEN 'openai' THEN json_build_object(
            'type', 'function', 'function', json_build_object(
                'name', p_name,
                'description', CASE WHEN char_length(p_description) > 1024
                                    THEN left(p_description, 1023) || U&'\2026'
                                    ELSE p_description END,
                'parameters', toolsift_served_schema(p_input)))::text
        WHEN 'openai_responses' THEN json_build_object(
            'type', 'function', 'name', p_name,
            'description', CASE WHEN char_length(p_description) > 1024
                                THEN left(p_description, 1023) || U&'\2026'
                                ELSE p_description END,
            'parameters', toolsift_served_schema(p_input),
            'strict', false)::text
        ELSE '{"name":' || to_json(p_name)::text
            || CASE WHEN coalesce(p_title, '') <> ''
                    THEN ',"title":' || to_json(p_title)::text ELSE '' END
            || ',"description":' || to_json(p_description)::text
            || ',"inputSchema":' || p_input::text
            -- A JSON null is no schema, as an SQL NULL is.
            || CASE WHEN json_typeof(p_output) <> 'null'
                    THEN ',"outputSchema":' || p_output::text ELSE '' END
            || CASE WHEN json_typeof(p_annotations) <> 'null'
                    THEN ',"annotations":' || p_annotations::text ELSE '' END
            || '}'
    END
$$
"""

# The way down: 0020's function, a frozen copy of its text (as a CREATE OR REPLACE).
DEFINITION_0020 = r"""
CREATE OR REPLACE FUNCTION toolsift_definition(
    p_name text, p_title text, p_description text, p_input json, p_output json,
    p_annotations json, p_format text
) RETURNS text
-- STABLE, as json_build_object is: an IMMUTABLE label would keep it from being inlined.
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE p_format
        WHEN 'anthropic' THEN json_build_object(
            'name', p_name, 'description', p_description,
            'input_schema', toolsift_served_schema(p_input))::text
        WHEN 'anthropic_tool_reference' THEN json_build_object(
            'type', 'tool_reference', 'tool_name', p_name)::text
        WHEN 'openai' THEN json_build_object(
            'type', 'function', 'function', json_build_object(
                'name', p_name,
                'description', CASE WHEN char_length(p_description) > 1024
                                    THEN left(p_description, 1023) || U&'\2026'
                                    ELSE p_description END,
                'parameters', toolsift_served_schema(p_input)))::text
        ELSE '{"name":' || to_json(p_name)::text
            || CASE WHEN coalesce(p_title, '') <> ''
                    THEN ',"title":' || to_json(p_title)::text ELSE '' END
            || ',"description":' || to_json(p_description)::text
            || ',"inputSchema":' || p_input::text
            -- A JSON null is no schema, as an SQL NULL is.
            || CASE WHEN json_typeof(p_output) <> 'null'
                    THEN ',"outputSchema":' || p_output::text ELSE '' END
            || CASE WHEN json_typeof(p_annotations) <> 'null'
                    THEN ',"annotations":' || p_annotations::text ELSE '' END
            || '}'
    END
$$
"""

# 0017's toolsift_select with the format's cost added to its choice of cost: each
# `CASE p_format ...` of the tools' and the catalog's tokens has a
# `WHEN 'openai_responses' THEN ...` branch.
SELECT = r"""CREATE OR REPLACE FUNCTION toolsift_select(
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
                   ROW(b.tool_id, b.score, b.terms, b.rnk, NULL)::toolsift_ranked
                   ORDER BY b.rnk), '{}')
          INTO ranked
          FROM (SELECT s.*, row_number() OVER (ORDER BY s.score DESC, s.position) AS rnk
                  FROM toolsift_bm25(p_tenant, p_query, p_config, p_k1, p_b, p_pool, p_debug) s) b;
    ELSE
        SELECT tn.embedding_model, tn.settings -> 'fusion' INTO served, fusion
          FROM public.tenants tn WHERE tn.id = p_tenant;
        f_k := toolsift_setting(fusion, 'k', 0, false, 'Infinity', 3.0);
        f_bm25 := toolsift_setting(fusion, 'bm25_weight', 0, true, 'Infinity', 1.0);
        f_dense := toolsift_setting(fusion, 'dense_weight', 0, true, 'Infinity', 1.0);
        f_scale := toolsift_setting(fusion, 'bm25_scale', 0, false, 'Infinity', 10.0);
        f_floor := toolsift_setting(fusion, 'bm25_floor', 0, true, 1, 0.45);
        -- Counted against the served model, under RLS: hidden tools are not counted.
        missing := toolsift_missing_embeddings(
            p_tenant, CASE WHEN p_model IS NULL THEN served
                           WHEN p_vector IS NOT NULL AND p_model = served THEN served
                           ELSE '' END);
        WITH lex AS (
            SELECT s.tool_id, s.score, s.terms, s.position,
                   row_number() OVER (ORDER BY s.score DESC, s.position)::integer AS rnk
              FROM toolsift_bm25(p_tenant, p_query, p_config, p_k1, p_b, p_pool, p_debug) s
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
               ROW(t.id, t.name, t.position, CASE p_format WHEN 'openai' THEN t.openai_token_cost WHEN 'openai_responses' THEN t.openai_responses_token_cost WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END, 'core')::toolsift_pick
               ORDER BY t.position), '{}'),
           coalesce(array_agg(t.id ORDER BY t.position), '{}'),
           coalesce(sum(CASE p_format WHEN 'openai' THEN t.openai_token_cost WHEN 'openai_responses' THEN t.openai_responses_token_cost WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END), 0)
      INTO picks, pick_ids, spent
      FROM public.tools t
     WHERE t.tenant_id = p_tenant AND t.deleted_at IS NULL AND t.core;
    FOREACH used IN ARRAY p_used LOOP
        -- One index probe per name: a join would let the planner scan the whole catalog.
        SELECT t.id, t.name, t.position, CASE p_format WHEN 'openai' THEN t.openai_token_cost WHEN 'openai_responses' THEN t.openai_responses_token_cost WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END AS token_cost INTO tool FROM public.tools t
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
                   array_agg(CASE p_format WHEN 'openai' THEN t.openai_token_cost WHEN 'openai_responses' THEN t.openai_responses_token_cost WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END ORDER BY x.o)
              INTO c_names, c_positions, c_costs
              FROM unnest(ranked[rank:fetched]) WITH ORDINALITY
                       AS x(tool_id, score, terms, bm25_rank, dense_rank, o)
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
        (SELECT coalesce(sum(CASE p_format WHEN 'openai' THEN openai_total_tokens WHEN 'openai_responses' THEN openai_responses_total_tokens WHEN 'mcp' THEN mcp_total_tokens ELSE total_tokens END), 0) FROM public.corpus_stats
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
                    || ',"candidates":[' || array_to_string(candidates, ',') || ']'
                ELSE '' END
        || CASE WHEN missing IS NOT NULL THEN ',"missing_embeddings":' || missing ELSE '' END
        || '}';
END
$$
"""

# The way down: 0017's function, a frozen copy of its text.
SELECT_0017 = r"""CREATE OR REPLACE FUNCTION toolsift_select(
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
                   ROW(b.tool_id, b.score, b.terms, b.rnk, NULL)::toolsift_ranked
                   ORDER BY b.rnk), '{}')
          INTO ranked
          FROM (SELECT s.*, row_number() OVER (ORDER BY s.score DESC, s.position) AS rnk
                  FROM toolsift_bm25(p_tenant, p_query, p_config, p_k1, p_b, p_pool, p_debug) s) b;
    ELSE
        SELECT tn.embedding_model, tn.settings -> 'fusion' INTO served, fusion
          FROM public.tenants tn WHERE tn.id = p_tenant;
        f_k := toolsift_setting(fusion, 'k', 0, false, 'Infinity', 3.0);
        f_bm25 := toolsift_setting(fusion, 'bm25_weight', 0, true, 'Infinity', 1.0);
        f_dense := toolsift_setting(fusion, 'dense_weight', 0, true, 'Infinity', 1.0);
        f_scale := toolsift_setting(fusion, 'bm25_scale', 0, false, 'Infinity', 10.0);
        f_floor := toolsift_setting(fusion, 'bm25_floor', 0, true, 1, 0.45);
        -- Counted against the served model, under RLS: hidden tools are not counted.
        missing := toolsift_missing_embeddings(
            p_tenant, CASE WHEN p_model IS NULL THEN served
                           WHEN p_vector IS NOT NULL AND p_model = served THEN served
                           ELSE '' END);
        WITH lex AS (
            SELECT s.tool_id, s.score, s.terms, s.position,
                   row_number() OVER (ORDER BY s.score DESC, s.position)::integer AS rnk
              FROM toolsift_bm25(p_tenant, p_query, p_config, p_k1, p_b, p_pool, p_debug) s
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
               ROW(t.id, t.name, t.position, CASE p_format WHEN 'openai' THEN t.openai_token_cost WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END, 'core')::toolsift_pick
               ORDER BY t.position), '{}'),
           coalesce(array_agg(t.id ORDER BY t.position), '{}'),
           coalesce(sum(CASE p_format WHEN 'openai' THEN t.openai_token_cost WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END), 0)
      INTO picks, pick_ids, spent
      FROM public.tools t
     WHERE t.tenant_id = p_tenant AND t.deleted_at IS NULL AND t.core;
    FOREACH used IN ARRAY p_used LOOP
        -- One index probe per name: a join would let the planner scan the whole catalog.
        SELECT t.id, t.name, t.position, CASE p_format WHEN 'openai' THEN t.openai_token_cost WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END AS token_cost INTO tool FROM public.tools t
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
                   array_agg(CASE p_format WHEN 'openai' THEN t.openai_token_cost WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END ORDER BY x.o)
              INTO c_names, c_positions, c_costs
              FROM unnest(ranked[rank:fetched]) WITH ORDINALITY
                       AS x(tool_id, score, terms, bm25_rank, dense_rank, o)
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
        (SELECT coalesce(sum(CASE p_format WHEN 'openai' THEN openai_total_tokens WHEN 'mcp' THEN mcp_total_tokens ELSE total_tokens END), 0) FROM public.corpus_stats
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
                    || ',"candidates":[' || array_to_string(candidates, ',') || ']'
                ELSE '' END
        || CASE WHEN missing IS NOT NULL THEN ',"missing_embeddings":' || missing ELSE '' END
        || '}';
END
$$
"""

TOOLS = sa.text(
    "SELECT tenant_id, id, name, description, input_schema FROM tools"
).execution_options(stream_results=True, max_row_buffer=1000)
UPDATE = sa.text(
    "UPDATE tools SET openai_responses_token_cost = :cost WHERE tenant_id = :tenant_id AND id = :id"
)
TOTALS = """
UPDATE corpus_stats c
   SET openai_responses_total_tokens = s.tokens
  FROM (SELECT tenant_id,
               coalesce(required_permission_id, '00000000-0000-0000-0000-000000000000')
                   AS permission_key,
               sum(openai_responses_token_cost) AS tokens
          FROM tools WHERE deleted_at IS NULL
         GROUP BY 1, 2) s
 WHERE c.tenant_id = s.tenant_id AND c.permission_key = s.permission_key
"""


# Frozen copies of the application's rules as of this revision (a migration must not import
# the application): the definition, and what its numbers cost where the model APIs' rule
# rewrites the schema in jsonb (0019's rule).
def _model_schema(schema: dict[str, Any]) -> dict[str, Any]:
    if not any(key in schema for key in ("oneOf", "anyOf", "allOf", "enum", "not")):
        return schema
    merged: dict[str, Any] = {}
    for key in ("oneOf", "anyOf", "allOf"):
        branches = schema.get(key)
        for branch in branches if isinstance(branches, list) else []:
            properties = branch.get("properties") if isinstance(branch, dict) else None
            for name, value in (properties if isinstance(properties, dict) else {}).items():
                merged.setdefault(name, value)
    kept = {k: v for k, v in schema.items() if k not in ("oneOf", "anyOf", "allOf", "enum", "not")}
    if merged:
        top = kept.get("properties")
        kept["properties"] = {**merged, **(top if isinstance(top, dict) else {})}
    return kept


def _numbers_written_out(value: Any) -> int:
    if isinstance(value, float):
        written_out = format(Decimal(repr(value)) + 0 if value == 0 else Decimal(repr(value)), "f")
        return len(written_out) - len(repr(value))
    if isinstance(value, dict):
        return sum(_numbers_written_out(v) for v in value.values())
    if isinstance(value, list):
        return sum(_numbers_written_out(v) for v in value)
    return 0


def _cost(row: Any) -> int:
    schema = _model_schema(row.input_schema)
    extra = _numbers_written_out(schema) if schema is not row.input_schema else 0
    description = row.description
    if len(description) > 1024:
        description = description[:1023] + "\u2026"
    definition = {
        "type": "function",
        "name": row.name,
        "description": description,
        "parameters": schema,
        "strict": False,
    }
    body = json.dumps(definition, separators=(",", ":"), ensure_ascii=False)
    return math.ceil((len(body.encode()) + extra) / 4)


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute(LOCK)
    op.add_column("tools", sa.Column("openai_responses_token_cost", sa.Integer(), nullable=True))
    op.add_column(
        "corpus_stats",
        sa.Column(
            "openai_responses_total_tokens", sa.BigInteger(), nullable=False, server_default="0"
        ),
    )
    op.alter_column("corpus_stats", "openai_responses_total_tokens", server_default=None)
    # Every tenant's rows: row-level security lifted for this transaction only.
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
    bind = op.get_bind()
    rows = bind.execute(TOOLS)
    while batch := rows.fetchmany(1000):
        bind.execute(
            UPDATE,
            [{"tenant_id": r.tenant_id, "id": r.id, "cost": _cost(r)} for r in batch],
        )
    op.execute(TOTALS)
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    op.alter_column("tools", "openai_responses_token_cost", nullable=False)
    op.execute(DEFINITION)
    op.execute(SELECT)
    op.execute(f"GRANT SELECT (openai_responses_token_cost) ON tools TO {ANALYST_ROLE}")


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute(LOCK)
    op.execute(SELECT_0017)
    op.execute(DEFINITION_0020)
    op.drop_column("corpus_stats", "openai_responses_total_tokens")
    op.drop_column("tools", "openai_responses_token_cost")
