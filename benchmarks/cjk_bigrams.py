"""What `toolsift_cjk_bigrams` adds to the analysis of one query, per statement.

BM25 analyses the query once per select, in a statement of its own (`toolsift_bm25`), so a
function's cost there is its cost per statement, planning included. This times three
statements on one backend of an embedded PostgreSQL, interleaved in rounds: `to_tsvector`
of the query alone, of the query through the working tree's function, and through a git
ref's version of it (`--ref`, a file of that ref). Each is run `--calls` times per round,
unprepared, as a select's inner call is; a backend's CPU time comes from
/proc/PID/schedstat. Prints the median microseconds per statement, for an English query
(the fast path), a Chinese one, and the longest Chinese text a select reads a query from
(fewer calls).

    .venv/bin/python benchmarks/cjk_bigrams.py --ref 6d25bf4

Linux only (schedstat); nothing is kept.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from toolsift.dbobjects import PACKAGE
from toolsift.embedded.postgres import EmbeddedPostgres
from toolsift.selection.schemas import MAX_TEXT

FILE = "platform/toolsift/lexical/sql/toolsift_cjk_bigrams.sql"
_CHINESE = "帮我查一下明天从北京到上海的高铁票还有没有"
#: Each query, and by how much fewer than `--calls` it runs per round. The longest is the most text a
#: select reads a query from (`selection.schemas.MAX_TEXT`).
QUERIES = {
    "English": ("look up the customer account and the shipping status of its order", 1),
    "Chinese": (_CHINESE, 1),
    f"Chinese, {MAX_TEXT:,} characters": (
        (_CHINESE * (MAX_TEXT // len(_CHINESE) + 1))[:MAX_TEXT],
        250,
    ),
}


def _cpu_ns(connection: psycopg.Connection[Any]) -> int:
    with open(f"/proc/{connection.info.backend_pid}/schedstat") as stat:
        return int(stat.read().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", required=True, help="the git ref of the other version")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    other = subprocess.run(
        ["git", "show", f"{args.ref}:{FILE}"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.replace("public.toolsift_cjk_bigrams", "public.other_cjk_bigrams")
    current = (PACKAGE / "lexical" / "sql" / "toolsift_cjk_bigrams.sql").read_text()
    statements = {
        "none": "SELECT to_tsvector('english'::regconfig, %s)",
        "current": "SELECT to_tsvector('english'::regconfig, public.toolsift_cjk_bigrams(%s))",
        args.ref: "SELECT to_tsvector('english'::regconfig, public.other_cjk_bigrams(%s))",
    }
    with tempfile.TemporaryDirectory(prefix="toolsift-cjk-") as work:
        server = EmbeddedPostgres(Path(work), fast=True)
        try:
            with psycopg.connect(server.start(), autocommit=True) as connection:
                connection.execute(current)
                connection.execute(other)
                print(f"microseconds per statement, median of {args.rounds - 2} rounds")
                for language, (query, fewer) in QUERIES.items():
                    calls = max(1, args.calls // fewer)
                    times: dict[str, list[float]] = {label: [] for label in statements}
                    for _ in range(args.rounds):
                        for label, statement in statements.items():
                            before = _cpu_ns(connection)
                            for _ in range(calls):
                                connection.execute(statement, (query,), prepare=False)
                            times[label].append((_cpu_ns(connection) - before) / calls / 1e3)
                    cells = "  ".join(
                        f"{label} {statistics.median(t[2:]):.1f}" for label, t in times.items()
                    )
                    print(f"{language:28} {cells}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
