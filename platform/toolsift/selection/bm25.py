"""BM25 in one statement over the postings the caller may see.

Row-level security on `tool_terms` drops other tenants' postings and forbidden tools'
postings before the sum: a forbidden tool is never scored, so it can never take a slot. The
same policy on the statistics makes idf and average length those of the allowed catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..lexical.analysis import TEXT_SEARCH_CONFIG

K1 = 1.2
B = 0.75

_SCORE = text(
    """
    WITH q AS (
        SELECT DISTINCT lexeme AS term
        FROM unnest(to_tsvector(CAST(:config AS regconfig), :query))
    ),
    -- Statistics of the caller's allowed catalog: RLS keeps only the permission buckets
    -- it may use. Sums run in bucket order, for the same floats whatever the plan.
    c AS (
        SELECT sum(doc_count)::float8 AS n,
               CASE WHEN sum(doc_count) > 0
                    THEN sum(total_length ORDER BY permission_key) / sum(doc_count)
                    ELSE 1 END AS avgdl
        FROM corpus_stats WHERE tenant_id = :tenant_id
    ),
    w AS (
        SELECT s.term, ln(1 + (c.n - sum(s.df) + 0.5) / (sum(s.df) + 0.5)) AS idf
        FROM term_stats s JOIN q ON q.term = s.term CROSS JOIN c
        WHERE s.tenant_id = :tenant_id
        GROUP BY s.term, c.n
    )
    SELECT p.tool_id,
           -- ORDER BY term: the same float sum whatever plan the planner picks.
           sum(w.idf * p.tf * (:k1 + 1) / (p.tf + :k1 * (1 - :b + :b * p.doc_length / c.avgdl))
               ORDER BY p.term) AS score,
           array_agg(p.term ORDER BY p.term) AS terms,
           min(p.position) AS position
    FROM tool_terms p JOIN w ON w.term = p.term CROSS JOIN c
    WHERE p.tenant_id = :tenant_id
    GROUP BY p.tool_id
    ORDER BY score DESC, position
    LIMIT :limit
    """
)


@dataclass(frozen=True)
class Scored:
    tool_id: UUID
    score: float
    terms: list[str]


def score(
    session: Session,
    tenant_id: UUID,
    query: str,
    *,
    limit: int,
    k1: float = K1,
    b: float = B,
    config: str = TEXT_SEARCH_CONFIG,
) -> list[Scored]:
    if not query.strip():
        return []
    rows = session.execute(
        _SCORE,
        {
            "tenant_id": tenant_id,
            "query": query,
            "config": config,
            "k1": k1,
            "b": b,
            "limit": limit,
        },
    )
    return [Scored(tool_id, float(s), list(terms)) for tool_id, s, terms, _ in rows]
