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
    """Reciprocal rank fusion parameters; a tenant overrides them in settings["fusion"]."""

    k: float = 60.0
    bm25_weight: float = 1.0
    dense_weight: float = 1.0

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None) -> Fusion:
        """Valid values from settings["fusion"]; anything invalid falls back to its default."""
        raw = (settings or {}).get("fusion")
        if not isinstance(raw, Mapping):
            return cls()
        values: dict[str, float] = {}
        for name, low in (("k", 0.0), ("bm25_weight", 0.0), ("dense_weight", 0.0)):
            value = raw.get(name)
            if (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and math.isfinite(value)
                and (value > low if name == "k" else value >= low)
            ):
                values[name] = float(value)
        return cls(**values)


def fuse(bm25_ids: Sequence[str], dense_ids: Sequence[str], fusion: Fusion) -> dict[str, float]:
    """RRF: weight / (k + rank) summed over the lists a tool appears in."""
    fused: dict[str, float] = {}
    for weight, ids in ((fusion.bm25_weight, bm25_ids), (fusion.dense_weight, dense_ids)):
        for rank, tool_id in enumerate(ids, start=1):
            fused[tool_id] = fused.get(tool_id, 0.0) + weight / (fusion.k + rank)
    return fused
