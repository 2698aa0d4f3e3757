"""The select path measured in layers, in this process, to show where HTTP time goes.

* `score`: just `bm25.score` (without matched terms, as a select without debug), the one SQL
  statement, inside a unit of work whose permissions are the agent's (RLS applies exactly as
  in production);
* `service`: `selection.select` plus its transaction (begin, the tenant's scope, the one
  `toolsift_select` statement, commit), i.e. everything except HTTP, JSON and the key check
  (which the HTTP path folds into that statement).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from toolsift.auth.deps import Principal
from toolsift.db import Database
from toolsift.lexical.analysis import TEXT_SEARCH_CONFIG
from toolsift.selection import bm25
from toolsift.selection.query import build_query
from toolsift.selection.schemas import Message, SelectRequest
from toolsift.selection.service import CANDIDATE_POOL, apply_roles, resolve_roles
from toolsift.selection.service import selection as selection_service

from .httpload import BUDGET_TOKENS, K
from .load import Tenant
from .stats import Latency
from .synthetic import Query


@dataclass
class LayerResult:
    score: Latency
    service: Latency

    def as_dict(self) -> dict[str, Any]:
        return {"score_ms": self.score.as_dict(), "service_ms": self.service.as_dict()}


def _request(query: Query) -> SelectRequest:
    return SelectRequest(
        messages=[Message(role="user", content=query.text)], k=K, budget_tokens=BUDGET_TOKENS
    )


def _principal(tenant: Tenant) -> Principal:
    return Principal(
        tenant.tenant_id, tenant.key_id, "agent", frozenset(tenant.catalog.agent_roles)
    )


def measure(
    database: Database, work: list[tuple[Tenant, Query]], *, max_queries: int, warmup: int = 20
) -> LayerResult:
    """Each query once per layer, one transaction each, after `warmup` untimed ones."""
    score_ms: list[float] = []
    service_ms: list[float] = []
    for n, (tenant, query) in enumerate([*work[:warmup], *work[:max_queries]]):
        principal = _principal(tenant)
        request = _request(query)
        with database.unit_of_work(tenant.tenant_id) as session:
            apply_roles(session, principal, resolve_roles(principal, None))
            text_query = build_query(request)
            started = time.perf_counter()
            bm25.score(session, tenant.tenant_id, text_query, limit=CANDIDATE_POOL, terms=False)
            elapsed = (time.perf_counter() - started) * 1000
        if n >= warmup:
            score_ms.append(elapsed)
        started = time.perf_counter()
        with database.unit_of_work(tenant.tenant_id) as session:
            selection_service.select(session, principal, request)
        elapsed = (time.perf_counter() - started) * 1000
        if n >= warmup:
            service_ms.append(elapsed)
    return LayerResult(Latency.of(score_ms), Latency.of(service_ms))


def explain(database: Database, tenant: Tenant, query: Query) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of the scoring statement, as the agent sees the tables."""
    principal = _principal(tenant)
    statement = text("EXPLAIN (ANALYZE, BUFFERS) " + bm25._SCORE.text)
    with database.unit_of_work(tenant.tenant_id) as session:
        apply_roles(session, principal, resolve_roles(principal, None))
        rows = session.execute(
            statement,
            {
                "tenant_id": tenant.tenant_id,
                "query": build_query(_request(query)),
                "config": TEXT_SEARCH_CONFIG,
                "k1": bm25.K1,
                "b": bm25.B,
                "limit": CANDIDATE_POOL,
            },
        )
        return [str(row[0]) for row in rows]


def embed_cost(
    work: list[tuple[Tenant, Query]], *, max_queries: int, model: str | None = None
) -> dict[str, float]:
    """ms to embed one query text with a local model (default: the default one), one thread
    and no cache: what a hybrid or dense select adds when the API process has not seen its
    text yet."""
    from toolsift.embedding import local

    backend = local.backend(model or local.DEFAULT_MODEL)
    texts = list(dict.fromkeys(build_query(_request(q)) for _, q in work))[:max_queries]
    backend.embed(texts[:5])  # the model loads once per process
    times = []
    for text_ in texts:
        started = time.perf_counter()
        backend.embed([text_])
        times.append((time.perf_counter() - started) * 1000)
    return Latency.of(times).as_dict()
