"""Ranking metrics with binary relevance, averaged over queries.

Every metric reads only the first `depth` names of a ranking (the k a select asked for), so
the served modes and the baselines are judged on the same cut.
"""

from __future__ import annotations

import math
from collections.abc import Sequence, Set
from dataclasses import dataclass

from ..bench.stats import Latency


def recall_at(ranking: Sequence[str], relevant: Set[str], k: int) -> float:
    """Fraction of the relevant tools found in the first k."""
    if not relevant:
        raise ValueError("a query needs at least one relevant tool")
    return len(set(ranking[:k]) & relevant) / len(relevant)


def ndcg_at(ranking: Sequence[str], relevant: Set[str], k: int) -> float:
    """DCG of the first k (gain 1 per relevant tool, 1/log2(rank + 1)) over the ideal DCG."""
    if not relevant:
        raise ValueError("a query needs at least one relevant tool")
    seen: set[str] = set()
    dcg = 0.0
    for rank, name in enumerate(ranking[:k], start=1):
        if name in relevant and name not in seen:
            dcg += 1 / math.log2(rank + 1)
        seen.add(name)
    ideal = sum(1 / math.log2(rank + 1) for rank in range(1, min(len(relevant), k) + 1))
    return dcg / ideal


def reciprocal_rank(ranking: Sequence[str], relevant: Set[str], depth: int) -> float:
    """1 / rank of the first relevant tool within `depth`, else 0 (MRR@depth)."""
    for rank, name in enumerate(ranking[:depth], start=1):
        if name in relevant:
            return 1 / rank
    return 0.0


@dataclass(frozen=True)
class Outcome:
    """One query answered by one mode or baseline."""

    ranking: list[str]
    relevant: frozenset[str]
    tokens: int
    latency_ms: float


NDCG_DEPTH = 10


def summarise(
    outcomes: Sequence[Outcome], *, ks: Sequence[int], catalog_tokens: int
) -> dict[str, float]:
    """The figures of one mode: recall@k for each k, nDCG@10, MRR@10, tokens and latency."""
    if not outcomes:
        raise ValueError("no outcomes to summarise")
    n = len(outcomes)
    result: dict[str, float] = {}
    for k in ks:
        result[f"recall@{k}"] = sum(recall_at(o.ranking, o.relevant, k) for o in outcomes) / n
    result["ndcg@10"] = sum(ndcg_at(o.ranking, o.relevant, NDCG_DEPTH) for o in outcomes) / n
    # MRR@10 whatever the k asked for, as nDCG@10: a figure that moved with --k would not
    # compare across runs.
    result["mrr"] = sum(reciprocal_rank(o.ranking, o.relevant, NDCG_DEPTH) for o in outcomes) / n
    tokens = sum(o.tokens for o in outcomes) / n
    result["tokens_mean"] = tokens
    result["catalog_tokens"] = float(catalog_tokens)
    result["tokens_fraction"] = tokens / catalog_tokens if catalog_tokens else math.nan
    latency = Latency.of(o.latency_ms for o in outcomes)
    result["latency_p50_ms"] = latency.p50
    result["latency_p95_ms"] = latency.p95
    result["queries"] = n
    return result
