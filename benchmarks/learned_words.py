"""What indexing learned queries' words costs a BM25 select: one tenant, two states, interleaved.

    .venv/bin/python benchmarks/learned_words.py [--learned 8] [--rounds 10] [--calls 100]

Loads the bench's synthetic tenants into a private embedded PostgreSQL at head (as
select_function_ab.py does: 98 small ones, one of 1,000 tools, one of 10,000, sizes the
options change), gives each tool of the 1,000-tool tenant `--learned` learned queries (the bench's queries in turn; no
vectors, BM25 needs none), then alternates two states of the same rows:

- **words**: the learned queries' words indexed, by `lexical.index.relearn` as the worker
  runs it;
- **none**: the learned queries set aside, the tools indexed again without them, the queries
  put back.

After each switch the index tables are analysed, so both states plan from fresh statistics.
In each state one connection calls `toolsift_select` in bm25 mode `--calls` times, as the
HTTP path does; its backend's CPU time comes from /proc/PID/schedstat. Prints the postings of
each state, the median CPU per select of each and the median of the rounds' ratios. A hybrid
select makes the same `toolsift_bm25` call, so its BM25 part moves the same way. Linux only;
nothing is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics

import psycopg
from select_function_ab import PEPPER, _connect, _cpu_ms, loaded, select_call
from sqlalchemy import text

from toolsift.auth import keys
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.lexical.index import relearn
from toolsift.selection.service import _SELECT
from toolsift_tooling.bench.load import Tenant
from toolsift_tooling.bench.synthetic import Sizes

STATES = ("none", "words")


def _learn(url: str, tenant: Tenant, per_tool: int) -> int:
    """`per_tool` learned queries for every tool, the bench's queries in turn."""
    texts = [q.text for q in tenant.catalog.queries]
    with psycopg.connect(url) as owner:
        owner.execute(
            "INSERT INTO learned_queries (tenant_id, tool_id, query_hash, query,"
            " required_permission_id, position)"
            " SELECT t.tenant_id, t.id, sha256(convert_to(q.query, 'UTF8')), q.query,"
            " t.required_permission_id, t.position"
            " FROM (SELECT *, row_number() OVER (ORDER BY position) - 1 AS i FROM tools"
            "       WHERE tenant_id = %s) t,"
            " generate_series(0, %s - 1) j,"
            " LATERAL (SELECT (%s::text[])[((t.i * %s + j) %% %s) + 1] || ' #' || j AS query) q",
            (tenant.tenant_id, per_tool, texts, per_tool, len(texts)),
        )
        row = owner.execute(
            "SELECT count(*) FROM learned_queries WHERE tenant_id = %s", (tenant.tenant_id,)
        ).fetchone()
    return int(row[0]) if row else 0


def _switch(database: Database, url: str, tenant: Tenant, state: str) -> int:
    """Index the tenant's tools in `state`; its postings."""
    with database.unit_of_work(tenant.tenant_id, permissions=ALL_PERMISSIONS) as session:
        ids = list(session.scalars(text("SELECT id FROM tools WHERE deleted_at IS NULL")))
        if state == "none":
            session.execute(
                text("CREATE TEMP TABLE set_aside ON COMMIT DROP AS SELECT * FROM learned_queries")
            )
            session.execute(text("DELETE FROM learned_queries"))
        relearn(session, tenant.tenant_id, ids)
        if state == "none":
            session.execute(text("INSERT INTO learned_queries SELECT * FROM set_aside"))
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute("ANALYZE tool_terms, term_stats, corpus_stats")
        row = owner.execute(
            "SELECT count(*) FROM tool_terms WHERE tenant_id = %s", (tenant.tenant_id,)
        ).fetchone()
    return int(row[0]) if row else 0


def _rounds(
    database: Database, url: str, tenant: Tenant, rounds: int, calls: int
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """CPU ms per select in each state, one figure per round, and each state's postings."""
    key_hash = keys.hash_key(tenant.agent_key, PEPPER)
    queries = [q.text for q in tenant.catalog.queries]
    conn, pid = _connect(url, "current")
    per_select: dict[str, list[float]] = {state: [] for state in STATES}
    postings: dict[str, int] = {}
    offset = 0
    try:
        for n in range(rounds):
            # Alternate which state goes first: a round can warm the cache for the next.
            for state in STATES if n % 2 == 0 else STATES[::-1]:
                postings[state] = _switch(database, url, tenant, state)
                for query in queries[:20]:  # the plan cache settles after five calls
                    conn.execute(_SELECT, select_call(tenant, key_hash, query))
                started = _cpu_ms(pid)
                for i in range(calls):
                    query = queries[(offset + i) % len(queries)]
                    conn.execute(_SELECT, select_call(tenant, key_hash, query))
                per_select[state].append((_cpu_ms(pid) - started) / calls)
            offset += calls
    finally:
        conn.close()
    return per_select, postings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learned", type=int, default=8, help="learned queries per tool")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=100, help="selects per state and round")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--small-tenants", type=int, default=98)
    parser.add_argument("--big", type=int, default=1000, help="tools of the measured tenant")
    parser.add_argument("--huge", type=int, default=10000)
    args = parser.parse_args()
    sizes = Sizes(small_tenants=args.small_tenants, big=args.big, huge=args.huge)
    with contextlib.ExitStack() as stack:
        _, _, url, database, tenants = loaded(stack, sizes, args.seed, "learned-words-")
        plain = url.replace("postgresql+psycopg://", "postgresql://")
        tenant = next(t for t in tenants if t.catalog.name == "big")
        learned = _learn(plain, tenant, args.learned)
        print(f"{len(tenant.catalog.tools):,d} tools, {learned:,d} learned queries")
        print(f"{args.rounds} rounds of {args.calls} bm25 selects per state")
        cpu, postings = _rounds(database, plain, tenant, args.rounds, args.calls)
        ratio = statistics.median(w / n for w, n in zip(cpu["words"], cpu["none"], strict=True))
        for state in STATES:
            print(
                f"{state:6s} postings {postings[state]:8,d}"
                f"  CPU per select {statistics.median(cpu[state]):7.3f} ms"
            )
        print(f"words / none: {ratio:.3f} (median of the rounds' ratios)")


if __name__ == "__main__":
    main()
