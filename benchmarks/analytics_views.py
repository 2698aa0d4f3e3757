"""Time each `analytics` view for one tenant, as the app role, on an embedded PostgreSQL.

    .venv/bin/python benchmarks/analytics_views.py --tools 1000 --selections 100000

Tools, vectors (384-d, random), selection logs (5 tools each, over 30 days) and tool calls
(one for every second select) are written straight into the tables by the owner login: the
views read only those rows, so how they got there does not change what is measured.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import psycopg
from sqlalchemy import text

from toolsift.analytics.service import VIEWS
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.embedded.postgres import EmbeddedPostgres
from toolsift.migrate import ensure_database, upgrade
from toolsift.tenants.schemas import TenantCreate
from toolsift.tenants.service import tenant as tenant_service

SEED = """
SELECT setseed(0.42);
INSERT INTO tools (tenant_id, id, position, name, description, input_schema, examples, core,
                   token_cost, content_hash, version, source, doc_length)
SELECT %(t)s, gen_random_uuid(), i,
       (ARRAY['get','list','create','update','delete','search','export','sync'])[1 + i %% 8]
       || '_' || (ARRAY['order','invoice','customer','ticket','refund','shipment','user',
                        'report','payment','product','account','subscription'])[1 + (i / 8) %% 12]
       || '_' || i,
       'tool ' || i, '{}', '[]', i < 3, 80 + i %% 200, md5(i::text), 1, 'manual', 10
FROM generate_series(0, %(tools)s - 1) AS i;
INSERT INTO tool_embeddings (tenant_id, tool_id, model, version, dimension, embedding, position)
SELECT t.tenant_id, t.id, 'bench', 1, 384,
       (SELECT array_agg(random() - 0.5) FROM generate_series(1, 384) WHERE t.id IS NOT NULL)::vector,
       t.position
FROM tools t WHERE t.tenant_id = %(t)s;
WITH ids AS (SELECT array_agg(id) AS a, array_agg(name) AS n, count(*) AS c FROM tools
             WHERE tenant_id = %(t)s)
INSERT INTO selection_logs (tenant_id, id, roles, mode, format, query, k, budget_tokens,
                            tool_ids, tool_names, details, candidate_count, tokens,
                            catalog_tokens, latency_ms, created_at)
SELECT %(t)s, gen_random_uuid(), '{}', (ARRAY['bm25','hybrid'])[1 + s %% 2], 'anthropic',
       'query ' || (s %% 5000), 5, 4000, picked.a, picked.n,
       '[{"reason": "core"}, {"reason": "ranked"}]', s %% 40, 400, 90000,
       random() * 20, now() - random() * interval '30 days'
FROM generate_series(1, %(selections)s) AS s, ids,
LATERAL (SELECT array_agg(ids.a[j]) AS a, array_agg(ids.n[j]) AS n
         FROM (SELECT 1 + floor(random() * least(ids.c, %(picked)s))::int AS j
               FROM generate_series(1, 5) WHERE s IS NOT NULL) r) picked;
INSERT INTO tool_calls (tenant_id, id, selection_id, selection_created_at, tool_name, allowed)
SELECT tenant_id, gen_random_uuid(), id, created_at, tool_names[1 + (random() * 5)::int %% 5], true
FROM selection_logs WHERE tenant_id = %(t)s AND random() < 0.5;
ANALYZE;
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--selections", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--picked", type=int, default=0, help="Selects offer only the first N tools (0: all)."
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        server = EmbeddedPostgres(Path(folder) / "data", fast=True)
        url = ensure_database(server.start(), "bench")
        try:
            upgrade(url)
            database = Database(url, pool_size=1)
            with database.unit_of_work(None) as session:
                tenant_id = tenant_service.create(
                    session, TenantCreate(name="bench"), pepper="bench"
                ).tenant.id
            plain = url.replace("postgresql+psycopg://", "postgresql://")
            started = time.perf_counter()
            with psycopg.connect(plain, autocommit=True) as owner:
                params = {
                    "t": tenant_id,
                    "tools": args.tools,
                    "selections": args.selections,
                    "picked": args.picked or args.tools,
                }
                for statement in filter(str.strip, SEED.split(";\n")):
                    owner.execute(statement, params if "%(" in statement else None)
            print(f"seeded {args.tools} tools, {args.selections} selects"
                  f" in {time.perf_counter() - started:.0f} s")  # fmt: skip
            print(f"{'view':32} {'rows':>8} {'median ms':>10}")
            for view in VIEWS:
                times = []
                for _ in range(args.runs):
                    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
                        begin = time.perf_counter()
                        rows = session.scalar(text(f"SELECT count(*) FROM analytics.{view}"))  # noqa: S608 - view names are constants
                        times.append((time.perf_counter() - begin) * 1000)
                print(f"{view:32} {rows:>8} {statistics.median(times):>10.0f}")
            database.dispose()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
