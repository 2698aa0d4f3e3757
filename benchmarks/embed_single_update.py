"""How long one update takes to become dense-searchable when nothing else is queued.

    .venv/bin/python benchmarks/embed_single_update.py [--relay-interval 1 0.25] [--updates 10]

For each relay interval: a private PostgreSQL, Redis and one solo Celery worker with the
relay's beat inside (as `bench embed` runs it), a 50-tool tenant embedded first; then
single description updates, one at a time, each waited for. A 5 ms poll of the outbox and
the vectors splits the delay into: commit -> the relay claims the job (`published_at`),
-> the vector is stored (`embedded_at`, the store transaction's start), -> the poll sees
it. Prints median and max per step, and the CPU the worker (relay included) and PostgreSQL
spend in 10 idle seconds: the price of a short relay interval.
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
from pathlib import Path

import psycopg

from toolsift.config import libpq_url
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.tools.schemas import ToolUpdate
from toolsift.tools.service import tool as tool_service
from toolsift_tooling.bench.load import LoadStats, load_tenant
from toolsift_tooling.bench.stack import Worker, postmaster_pid, start_database, start_redis
from toolsift_tooling.bench.stats import CpuMeter
from toolsift_tooling.bench.synthetic import generate_catalog


def run(interval: float, updates: int) -> dict[str, list[float]]:
    steps: dict[str, list[float]] = {"claimed": [], "stored": [], "seen": [], "idle": []}
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolsift-one-")))
        server, url = start_database(work / "pg", stack)
        _redis, redis_url = start_redis(work / "redis", stack)
        database = Database(url, pool_size=2)
        stack.callback(database.dispose)
        conn = stack.enter_context(psycopg.connect(libpq_url(url), autocommit=True))
        catalog = generate_catalog("one", 50, seed=7, queries=0)
        tenant = load_tenant(database, catalog, pepper=secrets.token_hex(16), stats=LoadStats())
        settings = {"outbox_relay_interval": str(interval), "embedding_threads": "1"}
        worker = Worker(url, redis_url, work, settings=settings, pool="solo")
        stack.callback(worker.stop)
        worker.start()
        while conn.execute("SELECT count(*) FROM outbox").fetchone() != (0,):
            time.sleep(0.1)
        assert worker.process is not None
        roots = {
            "worker": ([worker.process.pid], True),
            "pg": ([postmaster_pid(server) or -1], True),
        }
        meter = CpuMeter(roots)
        meter.start()
        time.sleep(10)
        steps["idle"].append(sum(meter.stop().values()) / 10)
        with database.unit_of_work(tenant.tenant_id, permissions=ALL_PERMISSIONS) as session:
            tools, _ = tool_service.list_page(session, after=None, limit=50)
        for i in range(updates):
            tool = tools[i % len(tools)]
            with database.unit_of_work(tenant.tenant_id, permissions=ALL_PERMISSIONS) as session:
                version = tool_service.update(
                    session, tool.id, ToolUpdate(description=f"{tool.description} [rev {i}]")
                ).version
            committed = time.time()
            claimed = None
            while True:
                row = conn.execute(
                    "SELECT published_at FROM outbox WHERE tool_id = %s", (tool.id,)
                ).fetchone()
                if claimed is None and row and row[0] is not None:
                    claimed = row[0].timestamp()
                vec = conn.execute(
                    "SELECT version, embedded_at FROM tool_embeddings WHERE tool_id = %s",
                    (tool.id,),
                ).fetchone()
                if vec and vec[0] >= version:
                    seen = time.time()
                    break
                time.sleep(0.005)
            if claimed is not None:
                steps["claimed"].append(claimed - committed)
            steps["stored"].append(vec[1].timestamp() - committed)
            steps["seen"].append(seen - committed)
            time.sleep(0.3 + (i % 3) * 0.17)  # land at different points of the relay's beat
    return steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--relay-interval", type=float, nargs="+", default=[1.0, 0.25])
    parser.add_argument("--updates", type=int, default=10)
    args = parser.parse_args(argv)
    out = sys.stdout
    out.write(
        "| relay interval s | claimed s (median / max) | stored | seen "
        "| idle CPU s per s (worker + PostgreSQL) | load average |\n"
    )
    out.write("|---:|---|---|---|---|---|\n")
    for interval in args.relay_interval:
        steps = run(interval, args.updates)
        cells = [f"{statistics.median(v):.3f} / {max(v):.3f}" if v else "-" for v in steps.values()]
        load = os.getloadavg()[0]
        out.write(f"| {interval:g} | " + " | ".join(cells) + f" | {load:.2f} |\n")
        out.flush()


if __name__ == "__main__":
    main()
