"""BM25 recomputed in Python from the index tables, what the served scores are held to; and
a tool's postings, read back."""

from __future__ import annotations

import math
from typing import Any
from uuid import UUID

import psycopg

from toolsift.selection import bm25

OwnerConn = psycopg.Connection[tuple[Any, ...]]
PUBLIC_BUCKET = UUID(int=0)


def bm25_scores(
    owner_conn: OwnerConn,
    tenant_id: UUID,
    query: str,
    allowed: set[UUID],
    config: str = "english",
) -> dict[str, float]:
    """Scores recomputed in Python from the index tables, for a caller allowed `allowed`;
    `config`: the text search configuration the tenant chose."""
    buckets = allowed | {PUBLIC_BUCKET}
    corpus = owner_conn.execute(
        "SELECT permission_key, doc_count, total_length FROM corpus_stats WHERE tenant_id = %s",
        (tenant_id,),
    ).fetchall()
    n = sum(count for key, count, _ in corpus if key in buckets)
    avgdl = sum(length for key, _, length in corpus if key in buckets) / n
    terms = [
        row[0]
        for row in owner_conn.execute(
            "SELECT DISTINCT lexeme"
            " FROM unnest(to_tsvector(%s::regconfig, toolsift_cjk_bigrams(%s)))",
            (config, query),
        )
    ]
    df: dict[str, int] = {}
    for term, key, count in owner_conn.execute(
        "SELECT term, permission_key, df FROM term_stats WHERE tenant_id = %s AND term = ANY (%s)",
        (tenant_id, terms),
    ):
        if key in buckets:
            df[term] = df.get(term, 0) + count
    scores: dict[str, float] = {}
    for name, term, tf, length, permission in owner_conn.execute(
        "SELECT t.name, p.term, p.tf, p.doc_length, p.required_permission_id"
        " FROM tool_terms p JOIN tools t ON t.tenant_id = p.tenant_id AND t.id = p.tool_id"
        " WHERE p.tenant_id = %s AND p.term = ANY (%s)",
        (tenant_id, terms),
    ):
        if permission is not None and permission not in allowed:
            continue
        idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
        saturation = tf * (bm25.K1 + 1) / (tf + bm25.K1 * (1 - bm25.B + bm25.B * length / avgdl))
        scores[name] = scores.get(name, 0.0) + idf * saturation
    return scores


def tool_terms(owner_conn: OwnerConn, tenant_id: UUID, name: str) -> set[str]:
    """The terms of the tool of that name in the index."""
    return {
        term
        for (term,) in owner_conn.execute(
            "SELECT p.term FROM tool_terms p JOIN tools t"
            " ON t.tenant_id = p.tenant_id AND t.id = p.tool_id"
            " WHERE t.tenant_id = %s AND t.name = %s",
            (tenant_id, name),
        )
    }
