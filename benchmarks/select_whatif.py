"""What-if measurements behind the proposals in docs/benchmarks.md, on a private stack.

    .venv/bin/python benchmarks/select_whatif.py [--duration 8] [--load-experiment]

Run from the repository root, so `benchmarks/` is on sys.path as the script's own folder.

1. Loads the benchmark's big (1k) and huge (10k) tenants, VACUUM ANALYZE, then, for the
   row-level-security policies as migrated and for a variant that evaluates the permission array
   once per statement (an InitPlan) instead of once per row, measures: the per-statement split
   of `selection.select` in-process, and POST /v1/select over HTTP (concurrency 1 and 8).
   The variant is applied with DROP/CREATE POLICY to this throwaway database only.
2. Times alternatives to the two other heavy statements of the select path with
   EXPLAIN ANALYZE: fetching candidate tools by primary key instead of `core OR id IN OR name
   IN`, and the whole-catalog token sum.
3. The same, plus a partial index on core tools and `lean_select` (see that file) swapped
   into the service in-process and in every uvicorn worker (`whatif_app.py`).
4. With --load-experiment: loads 98 small tenants then the big and huge ones into two fresh
   clusters, as-is and with ANALYZE before each big tenant, and prints per-batch seconds.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lean_select
import psycopg
from sqlalchemy import event, text
from sqlalchemy.engine import Connection

from toolsift.bench import httpload, inprocess
from toolsift.bench.load import LoadStats, Tenant, analyze, load_all, load_tenant
from toolsift.bench.stack import ApiServer, start_database
from toolsift.bench.synthetic import Sizes, generate
from toolsift.db import Database
from toolsift.selection.service import CANDIDATE_POOL, apply_roles, resolve_roles

PEPPER = "whatif-pepper"
HERE = Path(__file__).resolve().parent
ARRAY_PER_ROW = (
    "string_to_array(NULLIF((SELECT current_setting('app.permissions', true)), '*'), ',')::uuid[]"
)
ARRAY_ONCE = (
    "(SELECT string_to_array(NULLIF(current_setting('app.permissions', true), '*'), ',')"
    "::uuid[])::uuid[]"
)


def set_policy(owner_url: str, array: str) -> None:
    """Recreate the tool_permission policies (tools, postings, both statistics tables) with
    `array` as the permitted ids; the rest of each policy is as migrated."""
    public_bucket = "00000000-0000-0000-0000-000000000000"
    tables = {
        "tools": ("required_permission_id", "required_permission_id IS NULL"),
        "tool_terms": ("required_permission_id", "required_permission_id IS NULL"),
        "term_stats": ("permission_key", f"permission_key = '{public_bucket}'::uuid"),
        "corpus_stats": ("permission_key", f"permission_key = '{public_bucket}'::uuid"),
    }
    with psycopg.connect(owner_url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        for table, (column, public) in tables.items():
            using = (
                f"({public} OR (SELECT current_setting('app.permissions', true)) = '*'"
                f" OR {column} = ANY ({array}))"
            )
            conn.execute(f"DROP POLICY tool_permission ON {table}")
            conn.execute(
                f"CREATE POLICY tool_permission ON {table} AS RESTRICTIVE"
                f" USING {using} WITH CHECK {using}"
            )


@contextlib.contextmanager
def statement_timer(database: Database) -> Iterator[dict[str, list[float]]]:
    """Wall ms per statement (first 70 characters), client side, as psycopg sees it."""
    timings: dict[str, list[float]] = collections.defaultdict(list)

    def before(conn: Connection, *_args: Any) -> None:
        conn.info["whatif_t0"] = time.perf_counter()

    def after(conn: Connection, _cursor: Any, statement: str, *_args: Any) -> None:
        key = " ".join(statement.split())[:70]
        timings[key].append((time.perf_counter() - conn.info["whatif_t0"]) * 1000)

    event.listen(database.engine, "before_cursor_execute", before)
    event.listen(database.engine, "after_cursor_execute", after)
    try:
        yield timings
    finally:
        event.remove(database.engine, "before_cursor_execute", before)
        event.remove(database.engine, "after_cursor_execute", after)


def layers(database: Database, tenant: Tenant, queries: int) -> None:
    work = [(tenant, q) for q in tenant.catalog.queries]
    inprocess.measure(database, work, max_queries=20)
    with statement_timer(database) as timings:
        result = inprocess.measure(database, work, max_queries=queries, warmup=0)
    print(
        f"  in-process: SQL score p50 {result.score.p50:.2f} ms, "
        f"service p50 {result.service.p50:.2f} ms (p95 {result.service.p95:.2f})"
    )
    for statement, ms in sorted(timings.items(), key=lambda kv: -sum(kv[1]))[:6]:
        print(f"    {statistics.median(ms):7.2f} ms p50 x{len(ms):4d}  {statement}")


def http(url: str, tenant: Tenant, duration: float) -> None:
    jobs = [httpload.job(tenant.agent_key, q) for q in tenant.catalog.queries]
    for concurrency in (1, 8):
        r = httpload.run(
            url, jobs, concurrency=concurrency, duration=duration, max_requests=10**6, warmup=1.0
        )
        print(
            f"  HTTP c={concurrency}: {r.throughput:6.0f} selects/s, p50 {r.latency.p50:6.1f} ms, "
            f"p99 {r.latency.p99:6.1f} ms, errors {r.errors}"
        )


def explain_ms(database: Database, tenant: Tenant, sql: str, params: dict[str, Any]) -> float:
    principal = inprocess._principal(tenant)
    with database.unit_of_work(tenant.tenant_id) as session:
        apply_roles(session, principal, resolve_roles(principal, None))
        plan = [r[0] for r in session.execute(text("EXPLAIN (ANALYZE) " + sql), params)]
    return float(next(line for line in plan if line.startswith("Execution Time")).split()[2])


def alternatives(database: Database, tenant: Tenant) -> None:
    """Candidate fetch and catalog total, as written today and as proposed."""
    ids = [str(r[0]) for r in _top_ids(database, tenant)]
    params = {"ids": ids, "names": ["nothing_used"]}
    statements = {
        "today: core OR id IN (100 ids) OR name IN (used), all columns": (
            "SELECT * FROM tools WHERE deleted_at IS NULL AND (core OR id = ANY(CAST(:ids AS uuid[]))"
            " OR name = ANY(CAST(:names AS text[])))"
        ),
        "proposed: id = ANY(100 ids) UNION core UNION name, all columns": (
            "SELECT * FROM tools WHERE deleted_at IS NULL AND id = ANY(CAST(:ids AS uuid[]))"
            " UNION ALL SELECT * FROM tools WHERE deleted_at IS NULL AND core"
            " UNION ALL SELECT * FROM tools WHERE deleted_at IS NULL"
            " AND name = ANY(CAST(:names AS text[]))"
        ),
        "proposed: id = ANY(100 ids), budget columns only": (
            "SELECT id, name, position, token_cost, core FROM tools"
            " WHERE deleted_at IS NULL AND id = ANY(CAST(:ids AS uuid[]))"
        ),
        "today: sum(token_cost) over the visible catalog": (
            "SELECT coalesce(sum(token_cost), 0) FROM tools WHERE deleted_at IS NULL"
        ),
    }
    for label, sql in statements.items():
        runs = sorted(explain_ms(database, tenant, sql, params) for _ in range(7))
        print(f"    {runs[3]:7.2f} ms  {label}")


def _top_ids(database: Database, tenant: Tenant) -> list[tuple[Any, ...]]:
    from toolsift.selection import bm25

    principal = inprocess._principal(tenant)
    query = next(q for q in tenant.catalog.queries if q.target)
    with database.unit_of_work(tenant.tenant_id) as session:
        apply_roles(session, principal, resolve_roles(principal, None))
        scored = bm25.score(session, tenant.tenant_id, query.text, limit=CANDIDATE_POOL)
    return [(s.tool_id,) for s in scored]


def load_experiment() -> None:
    catalogs = generate(Sizes(), seed=7)
    for label, analyze_first in (("as-is", False), ("ANALYZE before each big tenant", True)):
        with contextlib.ExitStack() as stack:
            work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            _server, url = start_database(work_dir / "pg", stack)
            database = Database(url, pool_size=2)
            stack.callback(database.dispose)
            stats = LoadStats()
            for catalog in catalogs:
                if analyze_first and len(catalog.tools) >= 1000:
                    analyze(url)
                load_tenant(database, catalog, pepper=PEPPER, stats=stats)
            big = [round(s, 2) for _, _, batches in stats.tenant_batches[-2:] for s in batches]
            print(
                f"  {label}: {stats.tools_per_second:.0f} tools/s overall; "
                f"last 11 batches (1k, then 10k) s: {big}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=8.0, help="HTTP seconds per run")
    parser.add_argument("--queries", type=int, default=150, help="in-process queries per run")
    parser.add_argument("--load-experiment", action="store_true")
    args = parser.parse_args()
    catalogs = generate(Sizes(small_tenants=0), seed=7)
    with contextlib.ExitStack() as stack:
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        _server, url = start_database(work_dir / "pg", stack)
        database = Database(url, pool_size=2)
        stack.callback(database.dispose)
        tenants, stats = load_all(database, catalogs, pepper=PEPPER)
        analyze(url)
        print(f"loaded {stats.tools:,} tools at {stats.tools_per_second:.0f} tools/s")
        configs = (
            ("as migrated", ARRAY_PER_ROW, False),
            ("InitPlan array", ARRAY_ONCE, False),
            ("InitPlan array + core index + lean select", ARRAY_ONCE, True),
        )
        for label, array, lean in configs:
            set_policy(url, array)
            if lean:
                with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as c:
                    c.execute(
                        "CREATE INDEX IF NOT EXISTS ix_whatif_core ON tools (tenant_id) WHERE core"
                    )
                lean_select.install()
            database.engine.dispose()
            api = ApiServer(
                url, workers=2, pepper=PEPPER, work_dir=work_dir,
                factory="whatif_app:create_app" if lean else "toolsift.app:create_app",
                app_dir=HERE if lean else None,
            )  # fmt: skip
            stack.callback(api.stop)
            api.start()
            for tenant in tenants:
                print(f"\n[{label}] {tenant.catalog.name} ({len(tenant.catalog.tools):,} tools)")
                layers(database, tenant, args.queries)
                http(api.url, tenant, args.duration)
                if not lean:
                    alternatives(database, tenant)
            api.stop()
            lean_select.uninstall()
    if args.load_experiment:
        print("\nload experiment (98 small tenants, then 1k, then 10k):")
        load_experiment()


if __name__ == "__main__":
    main()
