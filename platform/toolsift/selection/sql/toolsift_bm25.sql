-- BM25 of the query against the caller's allowed catalog: its statistics buckets are the
-- ones row-level security leaves, so idf and average length come from what it may use.
-- The query is analysed as the tenant's tools are: with its text search configuration
-- (p_config, the app's default, unless the tenant chose another).
CREATE FUNCTION public.toolsift_bm25(
    p_tenant uuid,
    p_query text,
    p_config regconfig,
    p_k1 double precision,
    p_b double precision,
    p_limit integer,
    p_terms boolean
)
RETURNS TABLE(
    tool_id uuid,
    score double precision,
    terms text[],
    "position" bigint,
    coverage double precision
)
LANGUAGE sql
STABLE PARALLEL SAFE
AS $$
    WITH q AS (
        SELECT DISTINCT lexeme AS term
        FROM unnest(to_tsvector(public.toolsift_text_search(p_tenant, p_config),
                                public.toolsift_cjk_bigrams(p_query)))
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
    -- Each word's idf, and rounded (once per word) for the coverage's exact sums; `known`:
    -- the sum of those, what a tool that has every word the catalog has would cover.
    w AS (
        SELECT t.term, t.idf, t.rounded, sum(t.rounded) OVER () AS known
        FROM (SELECT s.term, ln(1 + (c.n - sum(s.df) + 0.5) / (sum(s.df) + 0.5)) AS idf,
                     round(ln(1 + (c.n - sum(s.df) + 0.5) / (sum(s.df) + 0.5)) * 4294967296.0)
                         / 4294967296.0 AS rounded
              FROM public.term_stats s JOIN q ON q.term = s.term CROSS JOIN c
              WHERE s.tenant_id = p_tenant
              GROUP BY s.term, c.n) t
    ),
    scored AS (
        SELECT p.tool_id,
               -- Each part rounded to a multiple of 2^-32: parts and partial sums stay exact
               -- in a float8 while the score is below 2^21 (a part is at most idf x (k1 + 1),
               -- about 30 at a million tools), so the sum is the same bits in any order.
               sum(round(w.idf * p.tf * (p_k1 + 1)
                         / (p.tf + p_k1 * (1 - p_b + p_b * p.doc_length / c.avgdl))
                         * 4294967296.0) / 4294967296.0) AS score,
               sum(w.rounded) AS matched, min(w.known) AS known,
               array_agg(p.term) FILTER (WHERE p_terms) AS terms,
               min(p.position) AS position
        FROM public.tool_terms p JOIN w ON w.term = p.term CROSS JOIN c
        WHERE p.tenant_id = p_tenant
        GROUP BY p.tool_id
        ORDER BY score DESC, position
        LIMIT p_limit
    )
    SELECT s.tool_id, s.score,
           CASE WHEN p_terms THEN ARRAY(SELECT x FROM unnest(s.terms) x ORDER BY x) END,
           s.position, s.matched / s.known
    FROM scored s
    ORDER BY s.score DESC, s.position
$$
