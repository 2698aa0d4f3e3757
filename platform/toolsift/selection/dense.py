"""Dense scores: pgvector cosine distance over the vectors the caller may see, and fusion.

Exact search, not HNSW, by measurement (docs/decisions.md, `benchmarks/dense_index.py`):
at 1,000 tools the planner keeps exact search even with an index; at 10,000 HNSW is about
9x faster but, under RLS, returns a third of the rows without iterative scans and misses
5-12% of the top 100 with them. With the primary key on (tenant_id, ...) the planner reads
only this tenant's rows: recall 1.
The RESTRICTIVE permission policy on `tool_embeddings` drops forbidden vectors first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

# The nearest vectors of a model, with what the budget needs of each tool.
SCORE_ENTRIES = text(
    """
    SELECT e.tool_id::text, e.embedding <=> CAST(:query AS vector) AS distance,
           t.name, t.position, t.token_cost, t.core
    FROM tool_embeddings e
    JOIN tools t ON t.tenant_id = e.tenant_id AND t.id = e.tool_id AND t.deleted_at IS NULL
    WHERE e.tenant_id = :tenant_id AND e.model = :model
    ORDER BY distance, e.position
    LIMIT :limit
    """
)

# Live tools the caller may see (RLS) without a vector of the tenant's served model.
MISSING_SERVED = text(
    """
    SELECT count(*) FROM tools t
    WHERE t.tenant_id = :tenant_id AND t.deleted_at IS NULL AND NOT EXISTS (
        SELECT 1 FROM tool_embeddings e
        WHERE e.tenant_id = t.tenant_id AND e.tool_id = t.id
          AND e.model = (SELECT embedding_model FROM tenants WHERE id = :tenant_id))
    """
)

TENANT = text("SELECT embedding_model, settings FROM tenants WHERE id = :tenant_id")


@dataclass(frozen=True)
class Fusion:
    """Reciprocal rank fusion, gated by lexical evidence; a tenant overrides it in
    settings["fusion"].

    How much a query shares with the catalog's words differs from catalog to catalog and
    from query to query: a request that repeats a tool's rare words is answered by BM25, a
    paraphrase by meaning. So the lists are weighted by the best BM25 score of the query:
    BM25 gets `top / (top + bm25_scale)` of the weight, but never less than `bm25_floor`,
    and dense the rest, each times its own weight. The floor keeps a tool found by its
    words alone (one not embedded yet, say) within reach of the top however weak the match;
    no lexical match at all leaves dense alone. A small `k` lets the first ranks of each
    list count more than agreement deep down both (docs/quality.md measured these choices).
    """

    k: float = 3.0
    bm25_weight: float = 1.0
    dense_weight: float = 1.0
    bm25_scale: float = 10.0
    bm25_floor: float = 0.45

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None) -> Fusion:
        """Valid values from settings["fusion"]; anything invalid falls back to its default."""
        raw = (settings or {}).get("fusion")
        if not isinstance(raw, Mapping):
            return cls()
        values: dict[str, float] = {}
        # name -> (lowest value, whether the lowest itself is allowed, highest)
        bounds = {
            "k": (0.0, False, math.inf),
            "bm25_weight": (0.0, True, math.inf),
            "dense_weight": (0.0, True, math.inf),
            "bm25_scale": (0.0, False, math.inf),
            "bm25_floor": (0.0, True, 1.0),
        }
        for name, (low, closed, high) in bounds.items():
            value = raw.get(name)
            if (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and math.isfinite(value)
                and (value >= low if closed else value > low)
                and value <= high
            ):
                values[name] = float(value)
        return cls(**values)


def fuse(
    bm25_ids: Sequence[str],
    dense_ids: Sequence[str],
    fusion: Fusion,
    *,
    bm25_top: float = 0.0,
) -> dict[str, float]:
    """Weighted RRF: weight / (k + rank) summed over the lists a tool appears in.

    `bm25_top` is the best BM25 score of the query: it splits the weight (see `Fusion`).
    """
    top = max(bm25_top, 0.0)
    lexical = max(top / (top + fusion.bm25_scale), fusion.bm25_floor) if bm25_ids else 0.0
    fused: dict[str, float] = {}
    for weight, ids in (
        (fusion.bm25_weight * lexical, bm25_ids),
        (fusion.dense_weight * (1.0 - lexical), dense_ids),
    ):
        for rank, tool_id in enumerate(ids, start=1):
            fused[tool_id] = fused.get(tool_id, 0.0) + weight / (fusion.k + rank)
    return fused
