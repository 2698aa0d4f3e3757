"""What a catalog-wide change that leaves the embedded text alone costs the worker.

    .venv/bin/python benchmarks/embed_carry.py [--tools 1000] [--rounds 3]

Loads `toolsift bench embed`'s synthetic catalog into a private embedded PostgreSQL and embeds
it with the default ONNX model. Then, in each round, two things in turn, both run through
`service.embed_jobs` in tasks of 64 as the worker runs them, timed on the wall and in this
process's CPU (the model runs here):

1. **carried**: every tool's required permission moves to another one (one upsert per 500
   tools, as `bench select` loads them): a new version of each tool with the same text;
2. **computed**: `reindex --force` queues every tool again, so the model computes each vector
   anew: what every version cost before vectors kept the digest of their text (0018).

Prints the per-tool cost of each and their ratio, per round and as the median.
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
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

from sqlalchemy import text

from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.embedding import service
from toolsift.embedding.base import EmbeddingConfig, get_backend
from toolsift.tools.service import tool as tool_service
from toolsift_tooling.bench.load import BATCH, LoadStats, load_tenant
from toolsift_tooling.bench.stack import start_database
from toolsift_tooling.bench.synthetic import generate_catalog

TASK = 64


def _due(database: Database, tenant_id: UUID) -> list[UUID]:
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        rows = session.execute(text("SELECT id FROM outbox ORDER BY created_at, id")).all()
    return [r.id for r in rows]


def _run(
    database: Database, run: Callable[[list[UUID]], int], jobs: list[UUID]
) -> tuple[float, float, int]:
    """Wall and CPU seconds of running `jobs` in tasks, and what the tasks stored or moved."""
    wall, cpu = time.perf_counter(), time.process_time()
    done = sum(run(jobs[i : i + TASK]) for i in range(0, len(jobs), TASK))
    return time.perf_counter() - wall, time.process_time() - cpu, done


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    out = sys.stdout
    backend = get_backend(EmbeddingConfig())
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolsift-carry-")))
        _server, url = start_database(work / "pg", stack)
        database = Database(url, pool_size=2)
        stack.callback(database.dispose)
        catalog = generate_catalog("carry", args.tools, seed=7, queries=0)
        tenant = load_tenant(database, catalog, pepper=secrets.token_hex(16), stats=LoadStats())
        tenant_id = tenant.tenant_id

        def run(jobs: list[UUID]) -> int:
            result = service.embed_jobs(database, backend, tenant_id, jobs)
            return result.embedded + result.carried

        _run(database, run, _due(database, tenant_id))  # the first vectors, and a warm model
        permissions = sorted(catalog.permissions)
        ratios = []
        out.write(
            f"{len(catalog.tools)} tools, {backend.model}\n\n"
            "| round | carried: ms a tool (CPU) | computed: ms a tool (CPU) | CPU ratio |\n"
            "|---:|---:|---:|---:|\n"
        )
        for r in range(args.rounds):
            moved = [
                t.model_copy(update={"required_permission": permissions[r % len(permissions)]})
                for t in catalog.tools
                if not t.core
            ]
            for first in range(0, len(moved), BATCH):
                with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
                    tool_service.upsert(session, tenant_id, moved[first : first + BATCH])
            carried = _run(database, run, _due(database, tenant_id))
            with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
                service.reindex(session, tenant_id, force=True)
            computed = _run(database, run, _due(database, tenant_id))
            ratio = carried[1] / computed[1]
            ratios.append(ratio)
            out.write(
                f"| {r + 1} | {carried[0] / carried[2] * 1000:.2f} ({carried[1] / carried[2] * 1000:.2f})"
                f" | {computed[0] / computed[2] * 1000:.2f} ({computed[1] / computed[2] * 1000:.2f})"
                f" | {ratio:.3f} |\n"
            )
        out.write(
            f"\nmedian CPU ratio carried / computed: {statistics.median(ratios):.3f}"
            f" (load average {os.getloadavg()[0]:.2f})\n"
        )


if __name__ == "__main__":
    main()
