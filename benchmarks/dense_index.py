"""Exact pgvector search against HNSW, under row-level security, on the bench catalogs.

    .venv/bin/python benchmarks/dense_index.py [--big 1000] [--huge 10000] [--queries 200]

Loads the benchmark's synthetic tenants into a private embedded PostgreSQL, embeds them with
the default ONNX model, and then, for the big, the huge and a few small tenants, times the
dense list of the select path (`toolsift_select`, migration 0008, LIMIT 100, as the
agent: RLS on, a prepared statement) in three set-ups:

1. exact: as migrated, the primary key (tenant_id, tool_id, model) narrows to one tenant;
2. HNSW (m 16, ef_construction 64) on `embedding::vector(384)` for the served model, with the
   ORDER BY on that expression, `hnsw.iterative_scan` off, relaxed_order and strict_order;
3. the same with `plan_cache_mode = force_custom_plan`, since generic plans of a prepared
   statement may ignore the index.

For each: p50/p95 ms, rows returned (LIMIT 100) and recall of the exact top 100. Prints a
table; nothing is kept. The index is built on the throwaway database only.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from toolsift.db import Database
from toolsift.embedding.base import EmbeddingConfig, get_backend
from toolsift_tooling.bench.load import Tenant, analyze, embed_all, load_all
from toolsift_tooling.bench.stack import start_database
from toolsift_tooling.bench.synthetic import Sizes, generate

PEPPER = "dense-index-pepper-0123456789abcdef"  # production wants 32+ characters
LIMIT = 100
DIMENSION = 384
HNSW_ORDER = "e.embedding::vector(384) <=> CAST(%(query)s AS vector(384))"


# What roles the agent acts in, applied to the transaction as the select path does.
APPLY_ROLES = """
    SELECT set_config('app.permissions',
                      coalesce(string_agg(DISTINCT rp.permission_id::text, ','), ''), true)
    FROM role_permissions rp JOIN roles r ON r.tenant_id = rp.tenant_id AND r.id = rp.role_id
    WHERE r.tenant_id = %(tenant_id)s AND r.name = ANY(%(roles)s::text[])
"""
# The dense list of `toolsift_select` (migration 0008), with a tool column to compare by.
DENSE = """
    SELECT e.tool_id::text, e.embedding <=> CAST(%(query)s AS vector) AS distance
    FROM tool_embeddings e
    WHERE e.tenant_id = %(tenant_id)s AND e.model = %(model)s
    ORDER BY distance, e.position
    LIMIT %(limit)s
"""


def _statement(hnsw: bool) -> str:
    sql = DENSE
    if hnsw:
        # The expression the index is built on; the distance column is the same value.
        sql = sql.replace("ORDER BY distance, e.position", f"ORDER BY {HNSW_ORDER}")
    return sql


def _literal(vector: list[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _measure(
    conn: psycopg.Connection[Any],
    tenant: Tenant,
    vectors: list[str],
    model: str,
    *,
    hnsw: bool,
    settings: dict[str, str],
    exact: list[list[str]] | None,
) -> dict[str, Any]:
    statement = _statement(hnsw)
    times: list[float] = []
    found: list[list[str]] = []
    uses_index = False
    for n, vector in enumerate([*vectors[:10], *vectors]):
        with conn.transaction():
            conn.execute("SELECT set_config('app.tenant_id', %s, true)", (str(tenant.tenant_id),))
            conn.execute(
                APPLY_ROLES,
                {"tenant_id": tenant.tenant_id, "roles": list(tenant.catalog.agent_roles)},
            )
            for name, value in settings.items():
                conn.execute("SELECT set_config(%s, %s, true)", (name, value))
            params = {
                "tenant_id": tenant.tenant_id,
                "model": model,
                "query": vector,
                "limit": LIMIT,
            }
            started = time.perf_counter()
            rows = conn.execute(statement, params, prepare=True).fetchall()
            elapsed = (time.perf_counter() - started) * 1000
            if n >= 10:
                times.append(elapsed)
                found.append([r[0] for r in rows])
            if n == 10:
                plan = conn.execute("EXPLAIN " + statement, params).fetchall()
                uses_index = any("hnsw" in str(r[0]).lower() for r in plan)
    times.sort()
    recall = None
    if exact is not None:
        recall = statistics.mean(
            len(set(f) & set(e)) / len(e) if e else 1.0 for f, e in zip(found, exact, strict=True)
        )
    return {
        "p50": times[len(times) // 2],
        "p95": times[int(len(times) * 0.95)],
        "rows": statistics.mean(len(f) for f in found),
        "recall": recall,
        "index": uses_index,
        "found": found,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", type=int, default=1000)
    parser.add_argument("--huge", type=int, default=10_000)
    parser.add_argument("--small-tenants", type=int, default=20)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    sizes = Sizes(small_tenants=args.small_tenants, big=args.big, huge=args.huge, queries=400)
    catalogs = generate(sizes, seed=args.seed)
    backend = get_backend(EmbeddingConfig())
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dense-index-")))
        _server, url = start_database(work / "pg", stack)
        database = Database(url, pool_size=2)
        stack.callback(database.dispose)
        started = time.perf_counter()
        tenants, _ = load_all(database, catalogs, pepper=PEPPER)
        _, embedded = embed_all(database, tenants)
        analyze(url)
        print(f"loaded and embedded {embedded:,} tools in {time.perf_counter() - started:.0f} s")
        chosen = [t for t in tenants if t.catalog.name in ("big", "huge")]
        chosen += [t for t in tenants if t.catalog.name.startswith("small-")][:3]
        plain = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(plain) as conn:
            conn.execute("SET ROLE toolsift_app")
            conn.commit()
            results: dict[str, dict[str, dict[str, Any]]] = {}
            queries: dict[str, list[str]] = {}
            for tenant in chosen:
                texts = [q.text for q in tenant.catalog.queries[: args.queries]]
                queries[tenant.catalog.name] = [_literal(v) for v in backend.embed(texts)]
            variants: list[tuple[str, bool, dict[str, str]]] = [("exact", False, {})]
            for tenant in chosen:
                vectors = queries[tenant.catalog.name]
                exact = _measure(
                    conn, tenant, vectors, backend.model, hnsw=False, settings={}, exact=None
                )
                results.setdefault(tenant.catalog.name, {})["exact"] = exact
            with psycopg.connect(plain, autocommit=True) as owner:
                started = time.perf_counter()
                owner.execute(
                    "CREATE INDEX tool_embeddings_hnsw ON tool_embeddings USING hnsw "
                    f"((embedding::vector({DIMENSION})) vector_cosine_ops) "
                    f"WHERE model = '{backend.model}'"
                )
                owner.execute("ANALYZE tool_embeddings")
                print(f"HNSW index built in {time.perf_counter() - started:.1f} s")
            for scan in ("off", "relaxed_order", "strict_order"):
                for plans in ("auto", "force_custom_plan"):
                    settings = {"hnsw.iterative_scan": scan, "plan_cache_mode": plans}
                    variants.append((f"hnsw {scan}, plans {plans}", True, settings))
            for name, hnsw, settings in variants[1:]:
                for tenant in chosen:
                    key = tenant.catalog.name
                    exact_found = results[key]["exact"]["found"]
                    results[key][name] = _measure(
                        conn, tenant, queries[key], backend.model, hnsw=hnsw, settings=settings,
                        exact=exact_found,
                    )  # fmt: skip
        print(
            f"\n{'tenant':<10} {'tools':>6} {'variant':<42} {'p50 ms':>7} {'p95 ms':>7} "
            f"{'rows':>6} {'recall':>7} index"
        )
        for tenant in chosen:
            key = tenant.catalog.name
            for name, _, _ in variants:
                r = results[key][name]
                recall = "-" if r["recall"] is None else f"{r['recall']:.3f}"
                print(
                    f"{key:<10} {len(tenant.catalog.tools):>6} {name:<42} {r['p50']:>7.2f} "
                    f"{r['p95']:>7.2f} {r['rows']:>6.1f} {recall:>7} {r['index']}"
                )


if __name__ == "__main__":
    main()
