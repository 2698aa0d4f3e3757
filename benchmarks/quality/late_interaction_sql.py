"""What late interaction would cost inside the select: MaxSim over stored token vectors, in
PostgreSQL with pgvector, for the first 20 candidates of a query.

`late_interaction.py` found a rerank stage worth serving but for its cost: encoding 20 tool
texts a select is about 100 ms of CPU. Stored token vectors avoid that, and the query's own
come free with its embedding (one model run gives both). Then the stage is a query that
`toolsift_select` could run before its budget, with the query's token vectors passed as a
`vector[]` (as `p_steps` is). This measures that query on real token vectors of one
dataset's tools, in two layouts:

- `rows`: one row per tool token (`tool`, `position`, `vector`), an index on `tool`;
- `arrays`: one row per tool, its token vectors as one `halfvec[]`, unnested per select.

For each, the median server time (`EXPLAIN ANALYZE`'s execution time) of the MaxSim query
for the first 20 tools of hybrid's ranking, over `--queries` queries, with the table's
size. The ranking it returns is checked against numpy's.

    python benchmarks/quality/late_interaction_sql.py /path/to/datasets/bfcl_pooled
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tune
from late_interaction import TokenVectors, maxsim

N = 20

LAYOUTS = {
    "rows": (
        "CREATE TABLE tokens (tool integer, position integer, v vector(384));"
        " CREATE INDEX ON tokens (tool)",
        "INSERT INTO tokens SELECT %s, p - 1, v"
        " FROM unnest(%s::vector[]) WITH ORDINALITY AS u(v, p)",
        """
        SELECT c.tool, avg(best) AS score
        FROM (
            SELECT t.tool, q.o, max(1 - (q.v <=> t.v)) AS best
            FROM unnest(%(query)s::vector[]) WITH ORDINALITY AS q(v, o)
            CROSS JOIN tokens t
            WHERE t.tool = ANY(%(tools)s::integer[])
            GROUP BY t.tool, q.o
        ) c
        GROUP BY c.tool
        """,
    ),
    "arrays": (
        "CREATE TABLE tokens (tool integer PRIMARY KEY, vs halfvec(384)[])",
        "INSERT INTO tokens VALUES (%s, %s::halfvec(384)[])",
        """
        SELECT c.tool, avg(best) AS score
        FROM (
            SELECT t.tool, q.o, max(1 - (q.v <=> d.v)) AS best
            FROM tokens t
            CROSS JOIN LATERAL unnest(t.vs) AS d(v)
            CROSS JOIN unnest(%(query)s::halfvec(384)[]) WITH ORDINALITY AS q(v, o)
            WHERE t.tool = ANY(%(tools)s::integer[])
            GROUP BY t.tool, q.o
        ) c
        GROUP BY c.tool
        """,
    ),
}


def literal(vectors: np.ndarray) -> list[str]:
    return ["[" + ",".join(f"{x:.6g}" for x in row) + "]" for row in vectors]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    encode = TokenVectors()
    config = tune.Config()
    with tune.session(args.cache) as tuner:
        connection = tuner.analyser.connection
        connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        ((_, prepared),) = list(tune.each_dataset(tuner, [args.dataset]))
        lexical = tuner.bm25_scored(prepared, config)
        hybrid = tuner.hybrid(lexical, tuner.dense(prepared, config), config.fusion)
        documents = encode([config.document(t) for t in prepared.dataset.tools])
        queries = tuner._queries(prepared, config)[: args.queries]
        print(f"{args.dataset.name}: {len(documents)} tools, {len(queries)} queries, first {N}")
        for layout, (create, insert, select) in LAYOUTS.items():
            connection.execute("DROP TABLE IF EXISTS tokens")
            connection.execute(create)
            with connection.cursor() as cursor:
                cursor.executemany(
                    insert, [(i, literal(vectors)) for i, (vectors, _) in enumerate(documents)]
                )
            connection.execute("VACUUM ANALYZE tokens")
            row = connection.execute("SELECT pg_total_relation_size('tokens')").fetchone()
            size = int(row[0]) if row else 0
            times, agree = [], 0
            for q, text in enumerate(queries):
                ((query, _),) = encode([text])
                tools = hybrid[q][:N]
                params = {"query": literal(query), "tools": tools}
                plan = connection.execute(
                    "EXPLAIN (ANALYZE, FORMAT JSON) " + select, params
                ).fetchone()
                assert plan is not None
                found = plan[0] if isinstance(plan[0], list) else json.loads(plan[0])
                times.append(float(found[0]["Execution Time"]))
                scores = dict(connection.execute(select, params).fetchall())
                mine = maxsim(query, [documents[t] for t in tools], np.ones(len(query)))
                agree += sorted(tools, key=lambda t: -scores[t]) == [
                    tools[i] for i in np.argsort(-np.array(mine), kind="stable")
                ]
            print(
                f"{layout:6s}: table {size / 2**20:.1f} MB ({size / len(documents) / 1024:.1f} KB"
                f" a tool); MaxSim of {N} tools, median {statistics.median(times):.2f} ms,"
                f" 90th percentile {statistics.quantiles(times, n=10)[-1]:.2f} ms;"
                f" numpy's order in {agree} of {len(queries)} queries",
                flush=True,
            )


if __name__ == "__main__":
    main()
