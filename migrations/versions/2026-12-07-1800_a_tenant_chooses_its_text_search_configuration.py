"""A tenant chooses the text search configuration its text is analysed with.

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-07 18:00:00+00:00

Every tenant's tools and queries were analysed with `english`: a catalog in Spanish, German
or Russian got English stemming and stop words. A tenant's `text_search` setting may now
name another of PostgreSQL's own configurations. The new `toolsift_text_search` reads it
(falling back to the app's default) wherever text is analysed: the query in `toolsift_bm25`,
replaced in place (same signature and grants), and a tool's fields and learned queries in
`lexical.index`, in the app. The app indexes a tenant's catalog again in the transaction
that changes the setting; a tenant that already held a `text_search` naming a configuration
other than `english` (kept as an unknown setting before) gets a `learn` job for each live
tool, up and down. The texts are `platform/toolsift/lexical/sql/toolsift_text_search.sql`'s
and `platform/toolsift/selection/sql/toolsift_bm25.sql`'s, written out; the way down is
0035's.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "toolsift_app"
SIGNATURE = "public.toolsift_text_search(uuid, regconfig)"

TEXT_SEARCH = r"""
-- The text search configuration a tenant's text is analysed with, its tools' and its
-- queries' alike: its `text_search` setting where that names one of PostgreSQL's own
-- configurations (a language's stemmer and stop words, or `simple`), else p_default, the
-- app's. Read where the text is analysed, so a tool write and a select can never use
-- different ones: a change of the setting indexes the catalog again in its transaction.
CREATE FUNCTION public.toolsift_text_search(
    p_tenant uuid,
    p_default regconfig
)
RETURNS regconfig
LANGUAGE sql
STABLE PARALLEL SAFE
AS $$
    SELECT coalesce(
        (SELECT c.oid::regconfig
           FROM public.tenants tn
           JOIN pg_catalog.pg_ts_config c ON c.cfgname = tn.settings ->> 'text_search'
          WHERE tn.id = p_tenant AND c.cfgnamespace = 'pg_catalog'::regnamespace),
        p_default)
$$
"""

BM25 = r"""
-- BM25 of the query against the caller's allowed catalog: its statistics buckets are the
-- ones row-level security leaves, so idf and average length come from what it may use.
-- The query is analysed as the tenant's tools are: with its text search configuration
-- (p_config, the app's default, unless the tenant chose another).
CREATE OR REPLACE FUNCTION public.toolsift_bm25(
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
"""

BM25_0035 = r"""
-- BM25 of the query against the caller's allowed catalog: its statistics buckets are the
-- ones row-level security leaves, so idf and average length come from what it may use.
CREATE OR REPLACE FUNCTION public.toolsift_bm25(
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
        FROM unnest(to_tsvector(p_config, public.toolsift_cjk_bigrams(p_query)))
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
"""

# Each live tool of the tenants whose setting names another configuration than `english`,
# as that tenant (its row, and the function's read of it, under row-level security).
QUEUE_CHOSEN = r"""
DO $$
DECLARE
    tenant uuid;
BEGIN
    PERFORM set_config('app.permissions', '*', true);
    FOR tenant IN SELECT id FROM tenants ORDER BY id LOOP
        PERFORM set_config('app.tenant_id', tenant::text, true);
        IF public.toolsift_text_search(tenant, 'english') <> 'english'::regconfig THEN
            INSERT INTO outbox (tenant_id, id, kind, tool_id, attempts)
            SELECT tenant, gen_random_uuid(), 'learn', t.id, 0
            FROM tools t
            WHERE t.tenant_id = tenant AND t.deleted_at IS NULL;
        END IF;
    END LOOP;
    PERFORM set_config('app.tenant_id', '', true);
    PERFORM set_config('app.permissions', '', true);
END
$$
"""


def upgrade() -> None:
    op.execute(TEXT_SEARCH)
    op.execute(f"REVOKE ALL ON FUNCTION {SIGNATURE} FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {SIGNATURE} TO {APP_ROLE}")
    op.execute(BM25)
    op.execute(QUEUE_CHOSEN)


def downgrade() -> None:
    op.execute(QUEUE_CHOSEN)
    op.execute(BM25_0035)
    op.execute(f"DROP FUNCTION {SIGNATURE}")
