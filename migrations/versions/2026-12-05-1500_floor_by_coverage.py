"""BM25's floor in the fusion is scaled by how much of the query its first tool matched.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-05 15:00:00+00:00

The hybrid fusion gives BM25 at least `bm25_floor` (0.45) of the weight, so that a tool found
by its words alone (one not embedded yet) stays within reach of the top. But the floor held
for any match at all: "find information about the elections" matched a filesystem tool on
"find" alone, and that list, nearly noise, still got 0.45 of the weight and pushed dense's
web search out of the first places (most of MCPToolBench++'s misses, docs/quality.md). The
floor is now multiplied by the query's coverage in BM25's first tool: the idf-weighted share
of the query's words that the tool contains, among the words some tool the caller may see
has. A tool that has every such word keeps the whole floor; a match on one common word of
several keeps little. Words no tool has (an order number, a city) do not count: they say
nothing about which tool the words point to, and counting them took the floor from a tool
found by all its words but not embedded yet, which is what the floor is for.

`toolsift_bm25` returns each tool's `coverage` (its return type changes, so it is dropped and
created again); `toolsift_select` is 0024's with the floor so scaled, the default
`bm25_scale` 13 instead of 10 (docs/quality.md, "A fourth round"), and, in debug output of a
hybrid select, `bm25_coverage`. Each idf is rounded to a multiple of 2^-32 before it is
summed, as the score's parts are (0010): the sums are exact, the same bits in any order, and
a tool that matches every word has a coverage of exactly 1.
"""

from collections.abc import Sequence
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "toolsift_app"
SIGNATURE = "toolsift_bm25(uuid, text, regconfig, float8, float8, integer, boolean)"

BM25 = """
CREATE FUNCTION toolsift_bm25(
    p_tenant uuid, p_query text, p_config regconfig, p_k1 float8, p_b float8, p_limit integer,
    p_terms boolean
) RETURNS TABLE (tool_id uuid, score float8, terms text[], "position" bigint, coverage float8)
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

# 0024's select, with the floor times the first BM25 tool's coverage, and that coverage in
# a hybrid select's debug output.
_LEX = """            SELECT s.tool_id, s.score, s.terms, s.position,
                   row_number() OVER (ORDER BY s.score DESC, s.position)::integer AS rnk
"""
_WEIGHTS = """        weights AS (
            SELECT CASE WHEN count(*) = 0 THEN 0.0::float8
                        ELSE greatest(greatest(max(lex.score), 0) / (greatest(max(lex.score), 0)
                                      + f_scale), f_floor) END AS lexical
              FROM lex
        ),
"""
_RANKED = """                   ORDER BY f.score DESC, f.position), '{}')
          INTO ranked
          FROM fused f;
"""
_DEBUG = """                    || ',"candidates":[' || array_to_string(candidates, ',') || ']'
"""
_DECLARE = """    matched integer;
"""
_SCALE = "toolsift_setting(fusion, 'bm25_scale', 0, false, 'Infinity', 10.0);"
EDITS = {
    _SCALE: _SCALE.replace("10.0", "13.0"),
    _DECLARE: _DECLARE
    + """    -- Hybrid: the idf-weighted share of the query's words BM25's first tool matched.
    coverage float8;
""",
    _LEX: _LEX.replace("s.position,\n", "s.position, s.coverage,\n"),
    _WEIGHTS: """        -- BM25's floor is kept in full only by a first tool that has every word of the query
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
""",
    _RANKED: """                   ORDER BY f.score DESC, f.position), '{}'),
               (SELECT w.coverage FROM weights w)
          INTO ranked, coverage
          FROM fused f;
""",
    _DEBUG: _DEBUG
    + """                    || CASE WHEN coverage IS NOT NULL
                            THEN ',"bm25_coverage":' || coverage ELSE '' END
""",
}


def _load(filename: str, name: str) -> ModuleType:
    path = Path(__file__).with_name(filename)
    spec = spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _select() -> str:
    text: str = _load(
        "2026-12-05-1400_words_matched_in_the_logs.py", "toolsift_migration_0024"
    ).SELECT
    for old, new in EDITS.items():
        if text.count(old) != 1:
            raise RuntimeError(f"0024's select no longer has {old!r} exactly once")
        text = text.replace(old, new)
    return text


# The whole function, as other revisions and `benchmarks/select_function_ab.py` read it.
SELECT = _select()


def _bm25(definition: str) -> None:
    op.execute(f"DROP FUNCTION {SIGNATURE}")
    op.execute(definition)
    op.execute(f"REVOKE ALL ON FUNCTION {SIGNATURE} FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {SIGNATURE} TO {APP_ROLE}")


def upgrade() -> None:
    # Selects call both functions: a lock queued behind a long one would hold them all.
    op.execute("SET LOCAL lock_timeout = '5s'")
    _bm25(BM25)
    op.execute(SELECT)


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    _bm25(_load("2026-12-04-0600_select_cheaper.py", "toolsift_migration_0010").BM25)
    op.execute(
        _load("2026-12-05-1400_words_matched_in_the_logs.py", "toolsift_migration_0024").SELECT
    )
