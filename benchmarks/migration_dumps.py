"""The schema every migration step leaves, compared between a baseline ref and the working tree.

    .venv/bin/python benchmarks/migration_dumps.py [--baseline-ref HEAD~] [--current-ref REF]
        [--keep DIR]

For a change that must not change what the migrations do (a refactoring of the migration
files, say): the baseline is a temporary `git worktree` of `--baseline-ref`, the current side
the working tree (or a worktree of `--current-ref`, to leave out files not committed yet).
One private embedded PostgreSQL serves both. Per side, in a database of its own and in a
subprocess whose `TOOLSIFT_PROJECT_DIR` and `PYTHONPATH` are that side's (so its own
`migrations/env.py` and `toolsift` package run), the migrations go from base to head one
revision at a time, then from head back to base one at a time; after every step (and once
before the first) the database is dumped with the bundled `pg_dump`: `--schema-only
--no-owner`, and the rows of the tables the data migrations rewrite (`DATA_TABLES`).

The data migrations need rows to do anything: right after `SEED_AFTER` (the revision before
the first one that rewrites tools) a tenant is written with a few tools of the demo catalog,
three made to reach the rewrites' special cases (a top-level `anyOf` and written-out floats,
a description beyond OpenAI's limit with an output schema and annotations, a deleted tool),
their statistics buckets and one reviewed MCP entry. Every value, timestamps included, is
fixed, so both sides' rows can be compared byte for byte. The rows a dump shows are sorted
within each table, so the physical order of updated rows does not matter.

Prints one line per step (`same`, or `DIFFERENT` and in what) and exits 1 on any difference,
after a unified diff of the first one. It also says, for the current side, which downgrades
do not give back the schema their predecessor's upgrade made (for information: it does not
change the exit status). `\\restrict` / `\\unrestrict` lines (PostgreSQL 18's pg_dump, a new
random key each run) are left out of the dumps.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
CATALOG = Path("platform/toolsift/demo/catalog.jsonl")
#: The rows are written after this revision: 0011 is the first to rewrite tools.
SEED_AFTER = "0010"
SEED_TOOLS = 6  # of the demo catalog, besides the three made for the rewrites
#: The tables whose rows the data migrations read or write.
DATA_TABLES = ("tenants", "permissions", "tools", "corpus_stats", "mcp_sources", "mcp_tools")
SEED_TIME = "2026-01-01 00:00:00+00"
PUBLIC_BUCKET = "00000000-0000-0000-0000-000000000000"
SIDES = ("baseline", "current")


def _id(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"toolsift-migration-dumps/{name}"))


@dataclass(frozen=True)
class Dump:
    step: str
    schema: str
    data: str


# -- one side, in its own process ---------------------------------------------------------


def _pg_dump(pg_dump: Path, url: str, *args: str) -> str:
    proc = subprocess.run(
        [str(pg_dump), "--no-owner", f"--dbname={url}", *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"pg_dump failed: {proc.stderr.strip()}")
    return "".join(
        line
        for line in proc.stdout.splitlines(keepends=True)
        if not line.startswith(("\\restrict", "\\unrestrict"))
    )


def _sorted_rows(dump: str) -> str:
    """The dump with each COPY block's rows sorted."""
    out: list[str] = []
    rows: list[str] | None = None
    for line in dump.splitlines(keepends=True):
        if rows is None:
            out.append(line)
            if line.startswith("COPY "):
                rows = []
        elif line == "\\.\n":
            out.extend(sorted(rows))
            out.append(line)
            rows = None
        else:
            rows.append(line)
    return "".join(out)


def _dump(pg_dump: Path, url: str, step: str) -> Dump:
    schema = _pg_dump(pg_dump, url, "--schema-only")
    with psycopg.connect(url) as conn:
        present = [
            table
            for table in DATA_TABLES
            if conn.execute("SELECT to_regclass(%s)", (f"public.{table}",)).fetchone() != (None,)
        ]
    data = ""
    if present:
        tables = [f"--table=public.{table}" for table in present]
        data = _sorted_rows(_pg_dump(pg_dump, url, "--data-only", *tables))
    return Dump(step, schema, data)


def _seed_tools(permission_id: str) -> list[dict[str, Any]]:
    """A few demo tools, then three that reach the rewrites' special cases."""
    lines = (ROOT / CATALOG).read_text().splitlines()[:SEED_TOOLS]
    tools: list[dict[str, Any]] = []
    for line in lines:
        item = json.loads(line)
        tools.append(
            {
                "name": item["name"],
                "title": item.get("title"),
                "description": item["description"],
                "input_schema": item["parameters"],
                "examples": item.get("examples", []),
                "permission_id": permission_id if item.get("required_permission") else None,
                "core": bool(item.get("core")),
            }
        )
    tools.append(
        {
            "name": "pick_one",
            "title": None,
            "description": "Look a record up by one of two keys.",
            # Top-level combinators (the model APIs' rule) and floats jsonb spells out.
            "input_schema": {
                "type": "object",
                "properties": {"limit": {"type": "number", "default": 1e-07, "maximum": 0.0}},
                "anyOf": [
                    {"properties": {"id": {"type": "string"}}, "required": ["id"]},
                    {"properties": {"email": {"type": "string", "minLength": 1.5}}},
                ],
            },
            "examples": ["find record 12"],
            "permission_id": None,
            "core": False,
        }
    )
    tools.append(
        {
            "name": "long_story",
            "title": "A long description",
            "description": "Tells a long story. " * 60,  # beyond OpenAI's 1,024 characters
            "input_schema": {"type": "object", "properties": {"topic": {"type": "string"}}},
            "examples": [],
            "permission_id": None,
            "core": False,
            "output_schema": {"type": "object", "properties": {"story": {"type": "string"}}},
            "annotations": {"readOnlyHint": True, "title": "Story"},
        }
    )
    tools.append(
        {
            "name": "gone",
            "title": None,
            "description": "A tool deleted before the migrations ran.",
            "input_schema": {"type": "object", "oneOf": [{"properties": {"a": {}}}]},
            "examples": [],
            "permission_id": None,
            "core": False,
            "deleted": True,
        }
    )
    return tools


def _seed(url: str) -> None:
    """Rows for the data migrations, every value fixed; the columns are those of SEED_AFTER."""
    tenant, permission = _id("tenant"), _id("permission")
    tools = _seed_tools(permission)
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO tenants (id, name, settings, next_position, created_at)"
            " VALUES (%s, 'seed', '{}', %s, %s)",
            (tenant, len(tools) + 1, SEED_TIME),
        )
        conn.execute(
            "INSERT INTO permissions (tenant_id, id, name, description, created_at)"
            " VALUES (%s, %s, 'crm.read', 'Read the CRM', %s)",
            (tenant, permission, SEED_TIME),
        )
        for position, tool in enumerate(tools, start=1):
            conn.execute(
                "INSERT INTO tools (tenant_id, id, position, name, title, description,"
                " input_schema, examples, required_permission_id, core, token_cost,"
                " content_hash, version, source, doc_length, updated_at, deleted_at,"
                " created_at, output_schema, annotations)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s, %s, %s, %s, 1,"
                " 'manual', %s, %s, %s, %s, %s::jsonb, %s::jsonb)",
                (
                    tenant, _id(f"tool/{tool['name']}"), position, tool["name"], tool["title"],
                    tool["description"], json.dumps(tool["input_schema"]),
                    json.dumps(tool["examples"]), tool["permission_id"], tool["core"],
                    len(tool["description"]) // 4, f"seed-{position}", float(position + 4),
                    SEED_TIME, SEED_TIME if tool.get("deleted") else None, SEED_TIME,
                    json.dumps(tool["output_schema"]) if "output_schema" in tool else None,
                    json.dumps(tool["annotations"]) if "annotations" in tool else None,
                ),
            )  # fmt: skip
        # The statistics buckets the totals are recounted into (their figures are rewritten).
        for key in (PUBLIC_BUCKET, permission):
            conn.execute(
                "INSERT INTO corpus_stats"
                " (tenant_id, permission_key, doc_count, total_length, total_tokens)"
                " VALUES (%s, %s, 1, 1.0, 1)",
                (tenant, key),
            )
        source = _id("source")
        conn.execute(
            "INSERT INTO mcp_sources (tenant_id, id, name, prefix, transport, url, args,"
            " header_names, env_names, has_bearer_token, enabled, listen,"
            " sync_interval_seconds, health, consecutive_failures, tool_count, updated_at,"
            " created_at)"
            " VALUES (%s, %s, 'stories', 'stories', 'http', 'http://127.0.0.1:9/mcp', '[]',"
            " '[]', '[]', false, true, false, 3600, 'healthy', 0, 1, %s, %s)",
            (tenant, source, SEED_TIME, SEED_TIME),
        )
        story = next(tool for tool in tools if tool["name"] == "long_story")
        definition = {
            "name": "story",
            "description": story["description"],
            "inputSchema": story["input_schema"],
            "_meta": {"fetchedAt": "2026-01-01T00:00:00Z"},
        }
        # Approved at the definition's current hash: the review pin follows the new hash.
        conn.execute(
            "INSERT INTO mcp_tools (tenant_id, source_id, remote_name, tool_id, definition,"
            " definition_hash, review_state, findings, approved_hash, reviewed_at,"
            " permission_override, first_seen_at, updated_at)"
            " VALUES (%s, %s, 'story', %s, %s::jsonb, 'seed-hash', 'approved', '[]',"
            " 'seed-hash', %s, false, %s, %s)",
            (tenant, source, _id("tool/long_story"), json.dumps(definition), *[SEED_TIME] * 3),
        )


def run_side(root: Path, url: str, pg_dump: Path, out: Path) -> None:
    """Base to head and back, a revision at a time, dumping after each step into `out`."""
    from alembic import command
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config(str(root / "alembic.ini"))
    config.set_main_option("script_location", str(root / "migrations"))
    config.attributes["database_url"] = url
    script = ScriptDirectory.from_config(config)
    heads = script.get_heads()
    if len(heads) != 1:
        raise SystemExit(f"{root}: {len(heads)} heads; the migrations must be one line")
    revisions = list(reversed(list(script.walk_revisions("base", heads[0]))))
    dumps = [_dump(pg_dump, url, "base")]
    for revision in revisions:
        command.upgrade(config, revision.revision)
        if revision.revision == SEED_AFTER:
            _seed(url)
        dumps.append(_dump(pg_dump, url, f"up {revision.revision}"))
    for revision in reversed(revisions):
        target = revision.down_revision
        if not isinstance(target, str | None):
            raise SystemExit(f"{revision.revision}: a merge revision; not supported")
        command.downgrade(config, target or "base")
        dumps.append(_dump(pg_dump, url, f"down {revision.revision} -> {target or 'base'}"))
    out.write_text(json.dumps([d.__dict__ for d in dumps]))


# -- the comparison -------------------------------------------------------------------------


def _git(*args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


@contextlib.contextmanager
def _worktree(ref: str, path: Path) -> Iterator[Path]:
    commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    _git("worktree", "add", "--detach", "--quiet", str(path), commit)
    try:
        yield path
    finally:
        _git("worktree", "remove", "--force", str(path))


def _fresh_database(server_url: str, name: str) -> str:
    with psycopg.connect(server_url, autocommit=True) as conn:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        conn.execute(drop)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return server_url.rsplit("/", 1)[0] + f"/{name}"


def _dumps_of(root: Path, url: str, pg_dump: Path, out: Path) -> list[Dump]:
    """One side's dumps, made by a subprocess running that side's migrations and package."""
    env = dict(os.environ)
    env["TOOLSIFT_PROJECT_DIR"] = str(root)
    env["PYTHONPATH"] = os.pathsep.join([str(root / "platform"), str(root)])
    argv = [
        sys.executable, str(Path(__file__).resolve()), "--run-side", str(root),
        "--url", url, "--pg-dump", str(pg_dump), "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"migrations of {root} failed:\n{proc.stdout}{proc.stderr}")
    return [Dump(**d) for d in json.loads(out.read_text())]


def _differences(baseline: Dump, current: Dump) -> list[str]:
    return [
        part for part in ("schema", "data") if getattr(baseline, part) != getattr(current, part)
    ]


def _diff(baseline: Dump, current: Dump, part: str) -> str:
    return "".join(
        difflib.unified_diff(
            getattr(baseline, part).splitlines(keepends=True),
            getattr(current, part).splitlines(keepends=True),
            fromfile=f"baseline: {baseline.step} ({part})",
            tofile=f"current: {current.step} ({part})",
        )
    )


def _round_trips(dumps: Sequence[Dump]) -> list[str]:
    """Downgrades whose schema is not the one their target's upgrade made (`base`: the
    empty database, which has no alembic_version table yet, so that one is left out)."""
    upgraded = {d.step.removeprefix("up "): d.schema for d in dumps if d.step.startswith("up ")}
    return [
        d.step
        for d in dumps
        if d.step.startswith("down ")
        and not d.step.endswith(" base")
        and upgraded.get(d.step.rsplit(" ", 1)[1]) != d.schema
    ]


def compare(baseline_ref: str, current_ref: str | None, keep: Path | None) -> int:
    from toolsift.embedded.postgres import EmbeddedPostgres, postgres_bin_dir

    pg_dump = postgres_bin_dir() / "pg_dump"
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolsift-dumps-")))
        roots = {
            "baseline": stack.enter_context(_worktree(baseline_ref, tmp / "baseline")),
            "current": (
                ROOT
                if current_ref is None
                else stack.enter_context(_worktree(current_ref, tmp / "current"))
            ),
        }
        server = EmbeddedPostgres(tmp / "pg", fast=True)
        server_url = server.start()
        stack.callback(server.stop)
        dumps: dict[str, list[Dump]] = {}
        for side in SIDES:
            url = _fresh_database(server_url, f"migration_dumps_{side}")
            dumps[side] = _dumps_of(roots[side], url, pg_dump, tmp / f"{side}.json")
            if keep is not None:
                for number, dump in enumerate(dumps[side]):
                    name = f"{number:03d}_{dump.step.replace(' -> ', '_to_').replace(' ', '_')}"
                    for part in ("schema", "data"):
                        path = keep / side / f"{name}.{part}.sql"
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_text(getattr(dump, part))

    described = current_ref or "the working tree"
    print(
        f"baseline {baseline_ref} ({_git('rev-parse', '--short', baseline_ref)}), current {described}"
    )
    print(
        f"rows written after {SEED_AFTER}; compared: schema, and rows of {', '.join(DATA_TABLES)}"
    )
    by_step = {side: {d.step: d for d in dumps[side]} for side in SIDES}
    steps = [d.step for d in dumps["current"]]
    steps += [d.step for d in dumps["baseline"] if d.step not in by_step["current"]]
    first: tuple[Dump, Dump, str] | None = None
    differing = 0
    for step in steps:
        baseline, current = by_step["baseline"].get(step), by_step["current"].get(step)
        if baseline is None or current is None:
            print(f"{step:20s} only in {'current' if baseline is None else 'baseline'}")
            continue
        parts = _differences(baseline, current)
        print(f"{step:20s} {'DIFFERENT (' + ', '.join(parts) + ')' if parts else 'same'}")
        if parts:
            differing += 1
            first = first or (baseline, current, parts[0])
    compared = sum(1 for step in steps if all(step in by_step[side] for side in SIDES))
    print(f"{compared} steps compared: {differing or 'none'} different")
    trips = _round_trips(dumps["current"])
    print(
        "current side: every downgrade gives back its target's schema"
        if not trips
        else f"current side: downgrades not giving back their target's schema: {', '.join(trips)}"
    )
    if first is not None:
        print(f"\nfirst difference, {first[0].step}:")
        print(_diff(*first), end="")
        return 1
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-ref", default="HEAD~", help="git ref (default HEAD~)")
    parser.add_argument(
        "--current-ref", help="git ref for the current side (default: the working tree)"
    )
    parser.add_argument("--keep", type=Path, help="also write every dump into this directory")
    # One side's run, in the subprocess the comparison starts.
    parser.add_argument("--run-side", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--pg-dump", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.run_side is not None:
        run_side(options.run_side, options.url, options.pg_dump, options.out)
        return
    sys.exit(compare(options.baseline_ref, options.current_ref, options.keep))


if __name__ == "__main__":
    main()
