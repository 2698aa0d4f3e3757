"""What serving schemas as written (`json`, migration 0020) costs the database per definition.

    .venv/bin/python benchmarks/definition_order.py [--rounds 20] [--tools 1000]

Loads the bench's 1,000-tool synthetic tenant (`bench select`'s "big" catalog) into a private
embedded PostgreSQL at head, copies its rows into a table with the schemas in `jsonb`, and
creates 0019's `toolsift_definition` for that table (the `jsonb` overload, which 0020 dropped).
Then, per format, one connection renders every tool of the tenant both ways, alternating in
rounds: the current function over the `json` columns, 0019's over the `jsonb` copy. A backend's
CPU time comes from /proc/PID/schedstat, so the figure is the database's own work whatever else
the machine runs. Prints microseconds of CPU per definition of each side and the median of the
rounds' ratios. A select renders only the tools it returns (k of them, 5 by default).

Linux only (schedstat); nothing is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

import psycopg

from toolsift.db import Database
from toolsift_tooling.bench.load import LoadStats, load_tenant
from toolsift_tooling.bench.stack import start_database
from toolsift_tooling.bench.synthetic import generate_catalog

ROOT = Path(__file__).resolve().parents[1]
MIGRATION = ROOT / "migrations/versions/2026-12-05-0930_definitions_the_model_apis_accept.py"
FORMATS = ("anthropic", "openai", "mcp")
RENDER = (
    "SELECT sum(length(toolsift_definition("
    "name, title, description, input_schema, output_schema, annotations, %s))) FROM {table}"
)


def _before_0020() -> str:
    """0019's `toolsift_definition`, the `jsonb` overload."""
    spec = spec_from_file_location("toolsift_migration_0019", MIGRATION)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {MIGRATION}")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.DEFINITION)


def _cpu_us(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tools", type=int, default=1000)
    options = parser.parse_args()
    with contextlib.ExitStack() as stack:
        data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolsift-def-")))
        _, url = start_database(data_dir, stack)
        database = Database(url, pool_size=1)
        stack.callback(database.dispose)
        catalog = generate_catalog("big", options.tools, seed=1, queries=0)
        tenant = load_tenant(database, catalog, pepper="bench", stats=LoadStats())
        plain = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE defs_jsonb AS SELECT name, title, description,"
                " input_schema::jsonb AS input_schema, output_schema::jsonb AS output_schema,"
                " annotations::jsonb AS annotations FROM tools WHERE tenant_id = %s",
                (tenant.tenant_id,),
            )
            conn.execute(
                "CREATE TABLE defs_json AS SELECT name, title, description, input_schema,"
                " output_schema, annotations FROM tools WHERE tenant_id = %s",
                (tenant.tenant_id,),
            )
            conn.execute(_before_0020())
            conn.execute("VACUUM ANALYZE defs_jsonb")
            conn.execute("VACUUM ANALYZE defs_json")
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            sides = {"json (0020)": "defs_json", "jsonb (0019)": "defs_jsonb"}
            print(f"{options.tools} tools, {options.rounds} rounds per format")
            for fmt in FORMATS:
                per_tool: dict[str, list[float]] = {side: [] for side in sides}
                for table in sides.values():  # warm both
                    conn.execute(RENDER.format(table=table), (fmt,))
                for n in range(options.rounds):
                    order = list(sides.items()) if n % 2 == 0 else list(sides.items())[::-1]
                    for side, table in order:
                        started = _cpu_us(pid)
                        conn.execute(RENDER.format(table=table), (fmt,))
                        per_tool[side].append((_cpu_us(pid) - started) / options.tools)
                ratios = [
                    a / b
                    for a, b in zip(per_tool["json (0020)"], per_tool["jsonb (0019)"], strict=True)
                ]
                figures = ", ".join(
                    f"{side} {statistics.median(values):.2f} us"
                    for side, values in per_tool.items()
                )
                print(
                    f"{fmt:9s} CPU per definition (median): {figures};"
                    f" ratio json/jsonb {statistics.median(ratios):.2f}"
                    f" (rounds {min(ratios):.2f}-{max(ratios):.2f})"
                )


if __name__ == "__main__":
    main()
