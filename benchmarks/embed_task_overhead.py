"""What an embed task costs besides the model: its two transactions, per task size.

    .venv/bin/python benchmarks/embed_task_overhead.py [--tools 512] [--sizes 1 4 8 16 32 64]

Loads `toolsift bench embed`'s synthetic catalog into a private embedded PostgreSQL, then
runs `service.embed_jobs` over all of its jobs in tasks of each size with a backend that
returns a fixed unit vector at once (no model), so the time is the read, the store (vector
literals, FOR SHARE, upsert), the job deletion and the model-switch check. Sizes are
interleaved over rounds; each round re-queues the jobs with `reindex(force=True)`. Also
times the bench poller's count of current vectors, which shares the cores with the worker.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

import psycopg
from sqlalchemy import text

from toolsift.config import libpq_url
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.embedding import service
from toolsift_tooling.bench.load import LoadStats, load_tenant
from toolsift_tooling.bench.stack import start_database
from toolsift_tooling.bench.synthetic import generate_catalog


class _Constant:
    model = "constant"
    dimension = 384

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * 383 for _ in texts]


def _jobs(database: Database, tenant_id: UUID) -> list[UUID]:
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        service.reindex(session, tenant_id, force=True)
        rows = session.execute(text("SELECT id FROM outbox ORDER BY created_at, id")).all()
    return [r.id for r in rows]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", type=int, default=512)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 8, 16, 32, 64])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    out = sys.stdout
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolsift-oh-")))
        _server, url = start_database(work / "pg", stack)
        database = Database(url, pool_size=2)
        stack.callback(database.dispose)
        catalog = generate_catalog("embed", args.tools, seed=7, queries=0)
        tenant = load_tenant(database, catalog, pepper=secrets.token_hex(16), stats=LoadStats())
        backend = _Constant()
        per_task: dict[int, list[float]] = {s: [] for s in args.sizes}
        for r in range(args.rounds):
            sizes = args.sizes[r % len(args.sizes) :] + args.sizes[: r % len(args.sizes)]
            for size in sizes:
                jobs = _jobs(database, tenant.tenant_id)
                started = time.perf_counter()
                for i in range(0, len(jobs), size):
                    service.embed_jobs(database, backend, tenant.tenant_id, jobs[i : i + size])
                seconds = time.perf_counter() - started
                per_task[size].append(seconds / -(-len(jobs) // size))
            out.write(f"round {r + 1}, load average {os.getloadavg()[0]:.2f}\n")
        out.write("| tools a task | ms a task (median) | ms a tool |\n|---:|---:|---:|\n")
        for size in args.sizes:
            ms = statistics.median(per_task[size]) * 1000
            out.write(f"| {size} | {ms:.1f} | {ms / size:.2f} |\n")
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            started = time.perf_counter()
            for _ in range(100):
                conn.execute(
                    "SELECT count(*) FROM tools t JOIN tool_embeddings e"
                    " ON e.tenant_id = t.tenant_id AND e.tool_id = t.id AND e.version = t.version"
                    " WHERE t.tenant_id = %s AND t.deleted_at IS NULL",
                    (tenant.tenant_id,),
                ).fetchone()
            ms = (time.perf_counter() - started) * 10
            out.write(
                f"bench poller's count of current vectors ({args.tools} tools): {ms:.2f} ms\n"
            )


if __name__ == "__main__":
    main()
