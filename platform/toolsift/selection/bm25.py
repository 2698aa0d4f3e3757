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

# The statement itself is `toolsift_bm25` (migration 0010), which the select function calls
# too: one text, so these scores are the served ones, bit for bit.
_SCORE = text(
    "SELECT tool_id, score, terms, position FROM toolsift_bm25("
    "CAST(:tenant_id AS uuid), :query, CAST(:config AS regconfig), CAST(:k1 AS float8),"
    " CAST(:b AS float8), CAST(:limit AS integer), CAST(:terms AS boolean))"
)


@dataclass(frozen=True)
class Scored:
    tool_id: UUID
    score: float
    terms: list[str]  # empty unless asked for


def score(
    session: Session,
    tenant_id: UUID,
    query: str,
    *,
    limit: int,
    k1: float = K1,
    b: float = B,
    config: str = TEXT_SEARCH_CONFIG,
    terms: bool = True,
) -> list[Scored]:
    """`terms=False` skips collecting the matched terms, as a select without debug does."""
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
            "terms": terms,
        },
    )
    return [Scored(tool_id, float(s), list(matched or [])) for tool_id, s, matched, _ in rows]
