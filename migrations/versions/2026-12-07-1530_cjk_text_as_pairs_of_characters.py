"""Chinese, Japanese and Korean text is indexed and searched as pairs of characters.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-07 15:30:00+00:00

The text search parser keeps a run of CJK characters, often a whole sentence, as one word,
so BM25 matched a tool described in Chinese only by a query holding that very run. The new
`toolsift_cjk_bigrams` rewrites such runs as overlapping pairs of characters, each a word,
and is applied wherever text is analysed: the query (`toolsift_bm25`, replaced in place,
same signature and grants) and a tool's fields and learned queries (`lexical.index`, in the
app). Text without CJK characters comes back as it was, so no other tool's postings move.
The live tools whose text or learned queries hold CJK characters get a `learn` job each,
which indexes them again the new way; the way down queues them again for the old way. The
texts are `platform/toolsift/lexical/sql/toolsift_cjk_bigrams.sql`'s and
`platform/toolsift/selection/sql/toolsift_bm25.sql`'s, written out; the way down is 0034's.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "toolsift_app"
SIGNATURE = "public.toolsift_cjk_bigrams(text)"

CJK_BIGRAMS = r"""
-- Chinese, Japanese and Korean text as overlapping pairs of characters, each pair a word
-- ("查询天气预报" -> "查询 询天 天气 气预 预报"), as Lucene's CJK analyser indexes it: the
-- text search parser keeps a run of these characters, often a whole sentence, as one word,
-- which only that same run matches. Their punctuation ("。", "，", "「") separates words.
-- Text without either comes back as it was.
-- Letters: Hangul Jamo, Hiragana and Katakana, Hangul compatibility Jamo, CJK ideographs
-- (extension A, unified, compatibility), Hangul syllables, half-width Katakana.
-- Punctuation: CJK symbols and punctuation, full-width punctuation.
-- PL/pgSQL, not SQL: a session keeps its plans, where a SQL function's body (not inlined,
-- for its subquery) is planned in every statement (docs/benchmarks.md, "What reading CJK
-- as pairs costs a select").
CREATE FUNCTION public.toolsift_cjk_bigrams(p_text text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    -- Ranges of a regular expression's bracket expression.
    letters CONSTANT text := '\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f';
    punctuation CONSTANT text := '\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65';
BEGIN
    IF p_text !~ ('[' || letters || punctuation || ']') THEN
        RETURN p_text;
    END IF;
    RETURN (
        SELECT string_agg(
                   CASE WHEN char_length(m.part[1]) = 1 OR m.part[1] !~ ('^[' || letters || ']')
                        THEN m.part[1]
                        -- Each character with the next, in one pass: substr(run, i, 2)
                        -- walks the run from its start for every i, quadratic in its length.
                        ELSE (SELECT string_agg(c.pair, ' ' ORDER BY c.n)
                              FROM (SELECT s.ch || lead(s.ch) OVER (ORDER BY s.n) AS pair, s.n
                                    FROM regexp_split_to_table(m.part[1], '')
                                         WITH ORDINALITY AS s(ch, n)) AS c
                              WHERE c.pair IS NOT NULL)
                   END,
                   ' ' ORDER BY m.n)
        FROM regexp_matches(
                 regexp_replace(p_text, '[' || punctuation || ']', ' ', 'g'),
                 '[' || letters || ']+|[^' || letters || ']+',
                 'g'
             ) WITH ORDINALITY AS m(part, n)
    );
END
$$
"""

BM25 = r"""
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

BM25_0034 = r"""
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

# Each tenant's live tools whose text the new function changes (any field, the schema's
# descriptions included, or a learned query), as that tenant.
QUEUE_CJK = r"""
DO $$
DECLARE
    tenant uuid;
BEGIN
    PERFORM set_config('app.permissions', '*', true);
    FOR tenant IN SELECT id FROM tenants ORDER BY id LOOP
        PERFORM set_config('app.tenant_id', tenant::text, true);
        INSERT INTO outbox (tenant_id, id, kind, tool_id, attempts)
        SELECT tenant, gen_random_uuid(), 'learn', t.id, 0
        FROM tools t,
             LATERAL (SELECT concat_ws(' ', t.name, t.title, t.description,
                                       t.input_schema::text, t.examples::text) AS body) b
        WHERE t.tenant_id = tenant AND t.deleted_at IS NULL
          AND (public.toolsift_cjk_bigrams(b.body) <> b.body
               OR EXISTS (SELECT 1 FROM learned_queries q
                          WHERE q.tenant_id = tenant AND q.tool_id = t.id
                            AND public.toolsift_cjk_bigrams(q.query) <> q.query));
    END LOOP;
    PERFORM set_config('app.tenant_id', '', true);
    PERFORM set_config('app.permissions', '', true);
END
$$
"""


def upgrade() -> None:
    op.execute(CJK_BIGRAMS)
    op.execute(f"REVOKE ALL ON FUNCTION {SIGNATURE} FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {SIGNATURE} TO {APP_ROLE}")
    op.execute(BM25)
    op.execute(QUEUE_CJK)


def downgrade() -> None:
    op.execute(BM25_0034)
    op.execute(QUEUE_CJK)
    op.execute(f"DROP FUNCTION {SIGNATURE}")
