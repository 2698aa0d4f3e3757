"""What a tenant's change of `text_search` costs: its catalog indexed again in one request.

`PATCH /admin/v1/tenant {"settings": {"text_search": ...}}` analyses every live tool again
(`lexical.index.reanalyse_catalog`) in the transaction that changes the setting. This loads
the bench's synthetic catalogs of 1,000 and 10,000 tools into a private embedded PostgreSQL
migrated to head (through the service layer, as PUT /admin/v1/tools writes them, in batches
of 1,000: the baseline, measured in the same run), then changes each tenant's setting to
German and back `--rounds` times, through the same service call the endpoint makes. Prints
the load's seconds, the median seconds of a change, and their ratio.

    .venv/bin/python benchmarks/text_search_change.py [--rounds 3]

Wall-clock time on a shared machine: read the ratio, not the seconds. Nothing is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from uuid import UUID

from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.tenants.schemas import TenantSettings, TenantUpdate
from toolsift.tenants.service import tenant as tenant_service
from toolsift_tooling.bench.load import LoadStats, load_tenant
from toolsift_tooling.bench.stack import start_database
from toolsift_tooling.bench.synthetic import generate_catalog


def _change(database: Database, tenant_id: UUID, text_search: str | None) -> float:
    update = TenantUpdate(settings=TenantSettings(text_search=text_search))
    started = time.perf_counter()
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        tenant_service.update(session, update)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--rounds", type=int, default=3, help="changes there and back")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="text-search-")))
        _server, url = start_database(work / "pg", stack)
        database = Database(url, pool_size=1)
        stack.callback(database.dispose)
        print(f"{'tools':>7} {'load s':>8} {'change s':>9} {'change / load':>14}  (each change)")
        for size in args.sizes:
            catalog = generate_catalog(f"tenant-{size}", size, seed=args.seed, queries=0)
            stats = LoadStats()
            tenant = load_tenant(database, catalog, pepper="bench", stats=stats)
            changes = []
            for _ in range(args.rounds):
                changes.append(_change(database, tenant.tenant_id, "german"))
                changes.append(_change(database, tenant.tenant_id, None))
            median = statistics.median(changes)
            each = " ".join(f"{c:.2f}" for c in changes)
            print(
                f"{size:>7,} {stats.upsert_seconds:>8.2f} {median:>9.2f}"
                f" {median / stats.upsert_seconds:>14.2f}  ({each})"
            )


if __name__ == "__main__":
    main()
