"""A git ref's select function beside the working tree's, on one database, interleaved.

    .venv/bin/python benchmarks/select_function_ab.py HEAD~ [--rounds 30] [--http-rounds 4]
    .venv/bin/python benchmarks/select_function_ab.py path/to/folder/  # its two .sql files

`toolsift bench select --baseline-ref` serves an older API on the same database, so it cannot
compare changes to the SQL functions themselves. This loads the bench's synthetic tenants
(as `bench select` loads them: 98 small ones, which only shape the statistics the planner
sees, one of 1,000 tools and one of 10,000) into a private embedded PostgreSQL migrated to
head, and creates the ref's `toolsift_bm25` and `toolsift_select` (its `selection/sql/`
files; the same signatures as the working tree's, which calls them), and its
`toolsift_text_search` (`lexical/sql/`, from 0036 on; its BM25 function calls that one) in a
schema `baseline`. A connection whose search_path puts that schema first runs the baseline; the
rest of the schema is shared. Then, for the 1,000- and 10,000-tool tenants:

1. **function**: one connection per side calls its `toolsift_select` as the HTTP path does
   (the agent's key hash, no debug, k 5, budget 4000, mode bm25), the sides alternating in
   rounds of `--calls` selects. A backend's CPU time comes from /proc/PID/schedstat
   (nanoseconds), so the figure is the database's own work whatever else the machine runs.
   Prints the median CPU per select of each side and the median of the rounds' ratios.
   With `--hybrid`, the 1,000-tool tenant is embedded (the default ONNX model, in-process)
   and compared the same way in hybrid mode; `--learned N` first gives each of its tools N
   learned queries (`learned_queries`, with vectors), as reported calls would, and
   `--called N` has each of its tools called in about N logged selections, three tools per
   selection (`tool_calls`: what the tools called together are counted from).
   With `--controls N`, each figure is followed by N runs of the current functions against
   themselves, each on a new pair of connections: identical functions spread by several
   per cent from one pair to the next, and a figure inside that spread shows no difference.
2. **http**: the current API served twice (`uvicorn`, 2 workers), one of them on the
   baseline's search_path. First both answer the same selects (`--compare-queries` per
   tenant, in five request shapes, in bm25 mode), compared field by field but for the selection id and
   debug scores; then 8 closed-loop clients (`bench select`'s client) load them in turn for
   `--http-seconds`, in the order baseline, current, current, baseline, ... Prints how many
   answers differed, and selects/s and CPU per select of PostgreSQL and the API per run.

With `--isolation` and no migration, the two sides are the current functions under READ
COMMITTED (baseline) and REPEATABLE READ (current, as the API's select connections run them
since the select reads one snapshot), compared per call only:

    .venv/bin/python benchmarks/select_function_ab.py --isolation --http-rounds 0

Linux only (schedstat); nothing is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
from psycopg.types.json import Jsonb

from toolsift.auth import keys
from toolsift.db import Database
from toolsift.embedded.postgres import EmbeddedPostgres
from toolsift.embedding.base import EmbeddingConfig, get_backend
from toolsift.selection import bm25, dense
from toolsift.selection.service import _SELECT, CANDIDATE_POOL
from toolsift_tooling.bench import httpload
from toolsift_tooling.bench.load import Tenant, analyze, embed_all, load_all
from toolsift_tooling.bench.stack import ApiServer, postmaster_pid, start_database
from toolsift_tooling.bench.stats import CpuMeter
from toolsift_tooling.bench.synthetic import Sizes, generate

ROOT = Path(__file__).resolve().parents[1]
PEPPER = "select-function-ab-pepper-0123456789"  # production wants 32+ characters
SIDES = ("baseline", "current")
CONCURRENCY = 8

Conn = psycopg.Connection[tuple[Any, ...]]


# The functions a select runs that a baseline brings its own of: (domain, name, required).
# The text search function came with 0036; a ref from before it has none.
_FUNCTIONS = (
    ("lexical", "toolsift_text_search", False),
    ("selection", "toolsift_bm25", True),
    ("selection", "toolsift_select", True),
)


def _baseline_file(source: str, domain: str, name: str) -> str | None:
    if Path(source).is_dir():
        path = Path(source) / f"{name}.sql"
        return path.read_text() if path.is_file() else None
    shown = subprocess.run(
        ["git", "show", f"{source}:platform/toolsift/{domain}/sql/{name}.sql"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return shown.stdout if shown.returncode == 0 else None


def _baseline_sql(source: str) -> list[str]:
    """The select's functions of the baseline: a folder holding their `.sql` files, or a git
    ref (its `selection/sql/` and `lexical/sql/` files). The BM25 function calls the text
    search function by its qualified name: a baseline's calls its own."""
    statements = []
    own_text_search = False
    for domain, name, required in _FUNCTIONS:
        text = _baseline_file(source, domain, name)
        if text is None:
            if required:
                raise SystemExit(f"{source}: no {name}.sql")
            continue
        # Created in schema baseline, beside the working tree's in public.
        text = text.replace("CREATE FUNCTION public.", "CREATE FUNCTION ", 1)
        if name == "toolsift_text_search":
            own_text_search = True
        elif name == "toolsift_bm25" and own_text_search:
            text = text.replace("public.toolsift_text_search(", "baseline.toolsift_text_search(")
        statements.append(_with_steps(text) if name == "toolsift_select" else text)
    return statements


_LAST_PARAMETER = "    p_elapsed_ms double precision\n)"


def _with_steps(select: str) -> str:
    """A select from before 0033 given today's last parameter, `p_steps`, which it ignores:
    today's call (21 arguments) would otherwise resolve to today's function in public."""
    if "\n    p_steps vector[]" in select:
        return select
    if _LAST_PARAMETER not in select:
        raise SystemExit("the baseline's toolsift_select does not end in p_elapsed_ms")
    return select.replace(
        _LAST_PARAMETER,
        "    p_elapsed_ms double precision,\n    p_steps vector[] DEFAULT NULL::vector[]\n)",
        1,
    )


# The ranked row of a select as each release wrote it: 0030 added `usage_rank`, 0032 `lift`.
_RANKED = "(tool_id uuid, score float8, terms text[], bm25_rank integer, dense_rank integer"


def _ranked_type(statements: list[str]) -> str | None:
    """The ranked row type a baseline's select was written for, if not today's."""
    text = "\n".join(statements)
    if "companion_lift" in text:
        return None
    usage = ", usage_rank integer" if "usage_rank" in text else ""
    return f"CREATE TYPE toolsift_ranked AS {_RANKED}{usage})"


def _install_baseline(owner_url: str, statements: list[str]) -> None:
    """The baseline's functions, under their own names, in schema baseline; a baseline from
    before 0032 gets the ranked row type it was written for there too (plpgsql resolves
    the type by the search_path, as it does the functions)."""
    with psycopg.connect(owner_url, autocommit=True) as owner:
        owner.execute("CREATE SCHEMA baseline")
        owner.execute("SET search_path = baseline, public")  # CREATE FUNCTION lands there
        ranked = _ranked_type(statements)
        if ranked is not None:
            owner.execute(ranked)
            owner.execute("GRANT USAGE ON TYPE toolsift_ranked TO toolsift_app")
        for statement in statements:
            owner.execute(statement)
        owner.execute("GRANT USAGE ON SCHEMA baseline TO toolsift_app")
        owner.execute("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA baseline TO toolsift_app")


def _url(url: str, side: str) -> str:
    """The baseline side resolves `toolsift_select` and `toolsift_bm25` in schema baseline."""
    if side == "current":
        return url
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options={quote('-csearch_path=baseline,public')}"


# Per side, the default isolation of its connection (`--isolation`); None: the server's.
ISOLATION: dict[str, str | None] = dict.fromkeys(SIDES)


def _connect(url: str, side: str) -> tuple[Conn, int]:
    conn: Conn = psycopg.connect(url, autocommit=True)
    conn.execute("SET ROLE toolsift_app")
    if (isolation := ISOLATION[side]) is not None:
        conn.execute(f"SET default_transaction_isolation = '{isolation}'")
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return conn, int(row[0])


def _cpu_ms(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e6


def select_call(
    tenant: Tenant,
    key_hash: str,
    query: str,
    vectors: dict[str, str] | None = None,
    model: str | None = None,
    steps: str | None = None,
) -> dict[str, Any]:
    """`_SELECT`'s parameters as the HTTP path passes them: bm25, or hybrid with `vectors`
    (and `steps`, a vector[] literal)."""
    return {
        "tenant_id": tenant.tenant_id, "key_id": tenant.key_id, "key_hash": key_hash,
        "roles": None, "selection_id": uuid.uuid4(), "query": query, "config": "english",
        "k1": bm25.K1, "b": bm25.B, "fusion": Jsonb(dense.DEFAULTS), "pool": CANDIDATE_POOL,
        "mode": "bm25" if vectors is None else "hybrid",
        "vector": None if vectors is None else vectors[query],
        "model": model, "used": [], "k": 5, "budget": 4000, "format": "anthropic",
        "debug": False, "elapsed_ms": 0.0, "steps": steps,
    }  # fmt: skip


def _functions(
    url: str,
    tenant: Tenant,
    rounds: int,
    calls: int,
    vectors: dict[str, str] | None = None,
    steps: int = 0,
    control: bool = False,
) -> dict[str, list[float]]:
    """Database CPU ms per select of each side, one figure per round; hybrid with `vectors`,
    each query with the vectors of the `steps` queries after it as its steps. A `control`
    runs the current functions on both sides, each on a connection of its own."""
    key_hash = keys.hash_key(tenant.agent_key, PEPPER)
    queries = [q.text for q in tenant.catalog.queries]
    model = None
    if vectors is not None:
        with psycopg.connect(url) as owner:
            row = owner.execute(
                "SELECT embedding_model FROM tenants WHERE id = %s", (tenant.tenant_id,)
            ).fetchone()
        model = row[0] if row else None
    runs = {side: "current" if control else side for side in SIDES}  # whose functions
    links = {side: _connect(_url(url, runs[side]), runs[side]) for side in SIDES}
    per_select: dict[str, list[float]] = {side: [] for side in SIDES}

    def call(query: str) -> dict[str, Any]:
        steps_of = None
        if vectors is not None and steps:
            after = queries.index(query) + 1
            chosen = [queries[(after + i) % len(queries)] for i in range(steps)]
            steps_of = "{" + ",".join(f'"{vectors[q]}"' for q in chosen) + "}"
        return select_call(tenant, key_hash, query, vectors, model, steps_of)

    try:
        for conn, _ in links.values():
            for query in queries[:20]:  # the plan cache settles after five calls
                conn.execute(_SELECT, call(query))
        offset = 0
        for n in range(rounds):
            # Alternate who goes first: a round can warm the cache for the next.
            for side in SIDES if n % 2 == 0 else SIDES[::-1]:
                conn, pid = links[side]
                started = _cpu_ms(pid)
                for i in range(calls):
                    conn.execute(_SELECT, call(queries[(offset + i) % len(queries)]))
                per_select[side].append((_cpu_ms(pid) - started) / calls)
            offset += calls
    finally:
        for conn, _ in links.values():
            conn.close()
    return per_select


def _ratio(cpu: dict[str, list[float]]) -> float:
    """Current over baseline: the median of the rounds' ratios."""
    return statistics.median(a / b for a, b in zip(cpu["current"], cpu["baseline"], strict=True))


def _compare(
    url: str,
    tenant: Tenant,
    label: str,
    rounds: int,
    calls: int,
    controls: int,
    vectors: dict[str, str] | None = None,
    steps: int = 0,
) -> None:
    """One tenant's figure, then `controls` runs of the current functions against
    themselves: identical functions spread by several per cent from one pair of connections
    to the next (docs/benchmarks.md), and a figure inside that spread is no difference."""
    cpu = _functions(url, tenant, rounds, calls, vectors, steps)
    ratio = _ratio(cpu)
    print(
        f"{tenant.catalog.name:7s} {label:>7s}  {statistics.median(cpu['baseline']):11.3f}"
        f"  {statistics.median(cpu['current']):10.3f}  {ratio:.3f}",
        flush=True,
    )
    if controls:
        spread = [
            _ratio(_functions(url, tenant, rounds, calls, vectors, steps, control=True))
            for _ in range(controls)
        ]
        low, high = min(spread), max(spread)
        where = "inside" if low <= ratio <= high else "outside"
        print(
            f"{'':16s}controls ({controls}, current against itself): {low:.3f} to {high:.3f};"
            f" the figure is {where} them",
            flush=True,
        )


# Request shapes whose answers must not change: defaults, debug with a tight budget, recent
# tools, one role, a budget that cuts. All in the `anthropic` format: since migration 0011
# an `openai` or `mcp` select counts that format's tokens, so against an older migration
# their answers differ by design. All in `bm25` mode: since 0025 the fusion scales BM25's
# floor by the query's coverage, so an older migration's hybrid answers differ by design too.
SHAPES: list[dict[str, Any]] = [
    {"k": 5, "budget_tokens": 4000, "mode": "bm25"},
    {"k": 8, "budget_tokens": 600, "debug": True, "mode": "bm25"},
    {"k": 3, "budget_tokens": 4000, "task": {"recent_tools": ["search_help"]}, "mode": "bm25"},
    {"k": 5, "budget_tokens": 3000, "roles": ["viewer"], "mode": "bm25"},
    {"k": 5, "budget_tokens": 250, "mode": "bm25"},
]


def _same_answers(servers: dict[str, ApiServer], tenants: list[Tenant], queries: int) -> int:
    """Both sides' answers, compared: equal but for the selection id and debug scores."""
    compared = differ = 0
    largest = 0.0
    with httpx.Client(timeout=30.0) as client:
        for tenant in tenants:
            headers = {"Authorization": f"Bearer {tenant.agent_key}"}
            for query in tenant.catalog.queries[:queries]:
                for shape in SHAPES:
                    body = {"messages": [{"role": "user", "content": query.text}], **shape}
                    answers = []
                    for side in SIDES:
                        response = client.post(
                            f"{servers[side].url}/v1/select", json=body, headers=headers
                        )
                        answer = {"status": response.status_code, **response.json()}
                        answer.pop("selection_id", None)
                        answers.append(answer)
                    scores = [[c.pop("score") for c in a.get("candidates", [])] for a in answers]
                    largest = max([largest, *(abs(x - y) for x, y in zip(*scores, strict=False))])
                    compared += 1
                    differ += answers[0] != answers[1]
    print(
        f"answers: {compared} compared, {differ} differ (selection ids and debug scores aside);"
        f" largest debug score difference {largest:.3g}"
    )
    return differ


def _http(
    servers: dict[str, ApiServer], postgres: int, tenant: Tenant, rounds: int, seconds: float
) -> None:
    jobs = [httpload.job(tenant.agent_key, query) for query in tenant.catalog.queries]
    order = [side for n in range(rounds) for side in (SIDES if n % 2 == 0 else SIDES[::-1])]
    for side in order:
        server = servers[side]
        meter = CpuMeter(
            {
                "postgres": ([postgres], True),
                "api": (server.pids(), True),
                "client": ([os.getpid()], False),
            }
        )
        result = httpload.run(
            server.url, jobs, concurrency=CONCURRENCY, duration=seconds,
            max_requests=10**9, warmup=2.0, meter=meter,
        )  # fmt: skip
        cpu = result.as_dict()["cpu_ms_per_select"]
        print(
            f"  {side:8s} {result.throughput:6.0f} selects/s  p50 {result.latency.p50:5.1f} ms"
            f"  CPU per select: PostgreSQL {cpu['postgres']:.2f}, API {cpu['api']:.2f},"
            f" client {cpu['client']:.2f} ms  errors {result.errors}"
        )


def _learn(url: str, tenant: Tenant, per_tool: int, vectors: dict[str, str]) -> int:
    """`per_tool` learned queries for every tool of `tenant`, the bench's queries in turn
    (a vector each, of the tenant's model), as reported calls would leave them."""
    texts = list(vectors)
    with psycopg.connect(url) as owner:
        tools = owner.execute(
            "SELECT id FROM tools WHERE tenant_id = %s ORDER BY position", (tenant.tenant_id,)
        ).fetchall()
        rows = [
            (tool_id, f"{texts[(i * per_tool + j) % len(texts)]} #{j}",
             vectors[texts[(i * per_tool + j) % len(texts)]])
            for i, (tool_id,) in enumerate(tools) for j in range(per_tool)
        ]  # fmt: skip
        with owner.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO learned_queries (tenant_id, tool_id, query_hash, query, model,"
                " embedding, required_permission_id, position)"
                " SELECT t.tenant_id, t.id, sha256(convert_to(%s, 'UTF8')), %s,"
                " tn.embedding_model, %s::vector, t.required_permission_id, t.position"
                " FROM tools t JOIN tenants tn ON tn.id = t.tenant_id"
                " WHERE t.tenant_id = %s AND t.id = %s",
                [(q, q, v, tenant.tenant_id, tool_id) for tool_id, q, v in rows],
            )
        owner.execute("ANALYZE learned_queries")
    return len(rows)


def _call(url: str, tenant: Tenant, per_tool: int) -> int:
    """Each tool of `tenant` called in about `per_tool` logged selections, three tools per
    selection (a tool and the next two by position, so the same tools recur together), as
    agents' reports would leave them; the calls made."""
    together = 3
    tools = len(tenant.catalog.tools)
    selections = tools * per_tool // together
    with psycopg.connect(url) as owner:
        owner.execute(
            "INSERT INTO selection_logs (tenant_id, id, key_id, roles, mode, format, query, k,"
            " budget_tokens, tool_ids, tool_names, details, candidate_count, tokens,"
            " catalog_tokens, latency_ms, created_at)"
            " SELECT %(tenant)s, gen_random_uuid(), %(key)s, '{}', 'hybrid', 'anthropic',"
            " 'selection ' || s, 5, 4000, '{}', '{}', '[]', 0, 0, 0, 1,"
            " now() - make_interval(secs => %(n)s - s)"
            " FROM generate_series(1, %(n)s) s",
            {"tenant": tenant.tenant_id, "key": tenant.key_id, "n": selections},
        )
        owner.execute(
            "INSERT INTO tool_calls (tenant_id, id, selection_id, selection_created_at,"
            " tool_name, allowed, success)"
            " SELECT l.tenant_id, gen_random_uuid(), l.id, l.created_at,"
            " n.names[((l.s * %(together)s + j) %% %(tools)s) + 1], true, true"
            " FROM (SELECT *, row_number() OVER (ORDER BY created_at) AS s FROM selection_logs"
            "       WHERE tenant_id = %(tenant)s) l,"
            " (SELECT array_agg(name ORDER BY position) AS names FROM tools"
            "   WHERE tenant_id = %(tenant)s) n,"
            " generate_series(0, %(together)s - 1) j",
            {"tenant": tenant.tenant_id, "together": together, "tools": tools},
        )
        owner.execute("ANALYZE selection_logs, tool_calls")
    return selections * together


def _hybrid(
    database: Database,
    url: str,
    measured: list[Tenant],
    rounds: int,
    calls: int,
    learned: int,
    called: int = 0,
    steps: int = 0,
    controls: int = 0,
) -> None:
    """The same per-call comparison in hybrid mode, on the 1,000-tool tenant, embedded here
    (with `learned` learned queries per tool, tools called in `called` selections each, and
    `steps` step vectors per select)."""
    tenant = next(t for t in measured if t.catalog.name == "big")
    embed_all(database, [tenant])
    backend = get_backend(EmbeddingConfig())
    texts = [q.text for q in tenant.catalog.queries]
    vectors = {
        text: "[" + ",".join(repr(float(x)) for x in vector) + "]"
        for text, vector in zip(texts, backend.embed(texts), strict=True)
    }
    if learned:
        print(f"{_learn(url, tenant, learned, vectors):,d} learned queries ({learned} per tool)")
    if called:
        print(f"{_call(url, tenant, called):,d} tool calls (each tool in ~{called} selections)")
    label = f"hybrid+{steps}" if steps else "hybrid"
    _compare(url, tenant, label, rounds, calls, controls, vectors, steps)


def loaded(
    stack: contextlib.ExitStack, sizes: Sizes, seed: int, prefix: str
) -> tuple[Path, EmbeddedPostgres, str, Database, list[Tenant]]:
    """A private embedded PostgreSQL at head in a temporary folder, with the bench's
    synthetic tenants loaded and analysed, all undone by `stack`: (folder, server, URL,
    database, tenants)."""
    work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
    server, url = start_database(work / "pg", stack)
    database = Database(url, pool_size=2)
    stack.callback(database.dispose)
    tenants, _ = load_all(database, generate(sizes, seed=seed), pepper=PEPPER)
    analyze(url)
    return work, server, url, database, tenants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", nargs="?", help="the git ref whose select functions to compare")
    parser.add_argument(
        "--isolation",
        action="store_true",
        help="no migration: READ COMMITTED against REPEATABLE READ, per call",
    )
    parser.add_argument("--small-tenants", type=int, default=98)
    parser.add_argument("--big", type=int, default=1000)
    parser.add_argument("--huge", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=30, help="function rounds")
    parser.add_argument("--calls", type=int, default=100, help="selects per function round")
    parser.add_argument("--http-rounds", type=int, default=4, help="0: no HTTP runs")
    parser.add_argument("--http-seconds", type=float, default=15.0)
    parser.add_argument("--compare-queries", type=int, default=60, help="per tenant and shape")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--hybrid", action="store_true", help="also hybrid, per call, at 1,000")
    parser.add_argument(
        "--learned", type=int, default=0, help="with --hybrid: learned queries per tool"
    )
    parser.add_argument(
        "--called", type=int, default=0, help="with --hybrid: logged selections per tool"
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=0,
        help="with --hybrid: step vectors per select (a request of several steps)",
    )
    parser.add_argument(
        "--controls",
        type=int,
        default=0,
        help="runs of the current functions against themselves after each figure",
    )
    args = parser.parse_args()
    if args.isolation:
        if args.baseline is not None or args.http_rounds:
            parser.error("--isolation compares per call only: no migration, --http-rounds 0")
        ISOLATION.update(baseline="read committed", current="repeatable read")
        baseline = None
    elif args.baseline is None:
        parser.error("a git ref to compare, or --isolation")
    else:
        baseline = _baseline_sql(args.baseline)
    sizes = Sizes(small_tenants=args.small_tenants, big=args.big, huge=args.huge)
    with contextlib.ExitStack() as stack:
        work, server, url, database, tenants = loaded(stack, sizes, args.seed, "select-ab-")
        plain = url.replace("postgresql+psycopg://", "postgresql://")
        if baseline is not None:
            _install_baseline(plain, baseline)
        measured = [t for t in tenants if t.catalog.name in ("big", "huge")]

        against = "READ COMMITTED" if baseline is None else args.baseline
        print(f"baseline: {against}; {args.rounds} rounds of {args.calls} selects")
        print("tenant  tools   baseline ms  current ms  current / baseline (median of rounds)")
        for tenant in measured:
            size = f"{len(tenant.catalog.tools):,d}"
            _compare(plain, tenant, size, args.rounds, args.calls, args.controls)
        if args.hybrid:
            _hybrid(
                database,
                plain,
                measured,
                args.rounds,
                args.calls,
                args.learned,
                args.called,
                args.steps,
                args.controls,
            )
        if args.http_rounds <= 0:
            return
        postgres = postmaster_pid(server)
        assert postgres is not None
        servers = {}
        for side in SIDES:
            (work / side).mkdir()
            servers[side] = ApiServer(
                _url(url, side), workers=2, pepper=PEPPER, work_dir=work / side
            )
            stack.callback(servers[side].stop)
            servers[side].start()
        small = [t for t in tenants if t not in measured][:3]
        _same_answers(servers, [*measured, *small], args.compare_queries)
        for tenant in measured:
            tools = len(tenant.catalog.tools)
            print(f"{tenant.catalog.name} ({tools:,} tools), HTTP, {CONCURRENCY} clients")
            _http(servers, postgres, tenant, args.http_rounds, args.http_seconds)


if __name__ == "__main__":
    main()
