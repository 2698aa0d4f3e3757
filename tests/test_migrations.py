"""The migrations and the ORM models describe the same schema; the last one can be undone."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID, uuid4

import psycopg
from alembic import command
from psycopg import sql
from sqlalchemy import select

from tests.fixtures.jsontext import compact_json
from toolsift.config import libpq_url
from toolsift.migrate import alembic_config, ensure_database, upgrade


def _schema(url: str) -> tuple[str, set[tuple[str, ...]]]:
    """The revision, and the app's functions (with their bodies) and columns."""
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        rows = conn.execute(
            "SELECT oid::regprocedure::text, md5(prosrc), coalesce(proconfig::text, '')"
            " FROM pg_proc WHERE proname LIKE 'toolsift%%'"
            " UNION ALL SELECT table_name::text, column_name::text, data_type::text"
            " FROM information_schema.columns WHERE table_schema = 'public'"
        )
        return str(revision[0] if revision else None), {tuple(row) for row in rows}


def test_the_last_migration_downgrades_and_upgrades_again(pg_server: str, worker_id: str) -> None:
    """Undone, it leaves the schema its predecessor makes; redone, the schema of head."""
    plain = pg_server.replace("postgresql+psycopg://", "postgresql://")
    names = [f"toolsift_downgrade_{worker_id}", f"toolsift_previous_{worker_id}"]

    def drop_all() -> None:
        with psycopg.connect(plain, autocommit=True) as conn:
            for name in names:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )

    drop_all()
    url, previous_url = (ensure_database(pg_server, name) for name in names)
    try:
        upgrade(url)
        at_head = _schema(url)
        command.downgrade(alembic_config(url), "-1")
        undone = _schema(url)
        upgrade(previous_url, undone[0])
        assert undone != at_head
        assert undone == _schema(previous_url)
        upgrade(url)
        assert _schema(url) == at_head
    finally:
        drop_all()


@contextmanager
def _scratch_database(pg_server: str, name: str) -> Iterator[str]:
    """A database of its own, migrated to head, dropped afterwards."""
    plain = pg_server.replace("postgresql+psycopg://", "postgresql://")

    def drop() -> None:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    drop()
    url = ensure_database(pg_server, name)
    try:
        upgrade(url)
        yield url
    finally:
        drop()


@contextmanager
def _every_row(url: str) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """The owner's connection with row-level security off: every tenant's rows."""
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute("SET row_security = off")
        yield conn


def _write_tools(url: str, items: list[Any], *, delete: str | None = None) -> UUID:
    """A tenant with these tools, written by the application at head (`delete`: one of them
    deleted afterwards); its id."""
    from toolsift.db import ALL_PERMISSIONS, Database
    from toolsift.tenants.schemas import TenantCreate
    from toolsift.tenants.service import tenant as tenant_service
    from toolsift.tools.service import tool as tool_service

    database = Database(url, pool_size=1)
    try:
        with database.unit_of_work(None) as session:
            created = tenant_service.create(session, TenantCreate(name="t"), pepper="p")
        tenant_id = created.tenant.id
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            tool_service.upsert(session, tenant_id, items)
        if delete is not None:
            with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
                tools = tool_service.list_page(session, after=None, limit=100)[0]
                tool_service.delete(session, next(t for t in tools if t.name == delete).id)
    finally:
        database.dispose()
    return tenant_id


# Functions the app's analysis calls that an old revision lacked, as what it did instead:
# CJK text as it was, and the app's default configuration.
_STAND_INS = {
    "toolsift_cjk_bigrams(text)": "RETURNS text LANGUAGE sql IMMUTABLE STRICT AS 'SELECT $1'",
    "toolsift_text_search(uuid, regconfig)": "RETURNS regconfig LANGUAGE sql STABLE AS 'SELECT $2'",
}


def _stand_ins(conn: Any, *, create: bool, only: Sequence[str] = tuple(_STAND_INS)) -> None:
    for signature in only:
        if create:
            conn.execute(f"CREATE FUNCTION {signature} {_STAND_INS[signature]}")
            conn.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO toolsift_app")
        else:
            conn.execute(f"DROP FUNCTION {signature}")


def _queued(url: str) -> list[tuple[Any, ...]]:
    """The outbox's jobs: (tenant, kind, tool name, job id), by tool name."""
    with _every_row(url) as conn:
        return conn.execute(
            "SELECT o.tenant_id, o.kind, t.name, o.id FROM outbox o"
            " JOIN tools t ON t.tenant_id = o.tenant_id AND t.id = o.tool_id"
            " ORDER BY t.name"
        ).fetchall()


@contextmanager
def _after_jobs(url: str, jobs: list[tuple[Any, ...]]) -> Iterator[Any]:
    """The app's database once the worker's code has run the queued `jobs`, one at a time."""
    from toolsift.db import Database
    from toolsift.embedding.base import EmbeddingConfig, get_backend
    from toolsift.embedding.service import embed_jobs

    database = Database(url, pool_size=1)
    try:
        backend = get_backend(EmbeddingConfig())
        for tenant, _, _, job in jobs:
            embed_jobs(database, backend, tenant, [job])
        yield database
    finally:
        database.dispose()


def _upsert(url: str, tenant_id: UUID, items: list[Any]) -> dict[str, str]:
    """Each tool's upsert status (created, updated, unchanged), by name."""
    from toolsift.db import ALL_PERMISSIONS, Database
    from toolsift.tools.service import tool as tool_service

    database = Database(url, pool_size=1)
    try:
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            result = tool_service.upsert(session, tenant_id, items)
            return {t.name: t.status for t in result.tools}
    finally:
        database.dispose()


def _costs(url: str) -> set[tuple[Any, ...]]:
    """Every tool's three token costs and every statistics bucket's three totals."""
    with _every_row(url) as conn:
        tools = conn.execute(
            "SELECT name, token_cost, openai_token_cost, mcp_token_cost FROM tools"
        ).fetchall()
        stats = conn.execute(
            "SELECT permission_key::text, total_tokens, openai_total_tokens, mcp_total_tokens"
            " FROM corpus_stats"
        ).fetchall()
        return {("tool", *row) for row in tools} | {("bucket", *row) for row in stats}


def test_0011_fills_the_per_format_costs_the_application_computes(
    pg_server: str, worker_id: str
) -> None:
    """Tools and statistics written at head, the columns dropped (downgrade) and filled
    again by the migration: the same figures as the application's own."""
    from toolsift.tools.schemas import ToolCreate

    with _scratch_database(pg_server, f"toolsift_backfill_{worker_id}") as url:
        output = {"type": "object", "properties": {"rows": {"type": "array"}}}
        items = [
            ToolCreate(name="plain", description="Get an order."),
            ToolCreate(
                name="rich",
                title="Export the ledger",
                description="Export it.",
                output_schema=output,
                annotations={"readOnlyHint": True},
            ),
            ToolCreate(name="gone", description="Deleted before the migration."),
        ]
        _write_tools(url, items, delete="gone")
        written = _costs(url)
        rich = next(row for row in written if row[:2] == ("tool", "rich"))
        assert rich[4] > rich[2] + 20  # the MCP definition carries title and output schema
        command.downgrade(alembic_config(url), "0010")
        upgrade(url)
        assert _costs(url) == written


def test_0019_counts_the_definitions_the_model_apis_accept(pg_server: str, worker_id: str) -> None:
    """Undone, the costs of the full schemas and descriptions; redone, the application's."""
    from toolsift.tools.schemas import ToolCreate

    with _scratch_database(pg_server, f"toolsift_model_apis_{worker_id}") as url:
        either = {
            "type": "object",
            "properties": {"id": {"type": "string"}, "name": {"type": "string"}},
            "anyOf": [{"required": ["id"]}, {"required": ["name"]}],
        }
        items = [
            ToolCreate(name="plain", description="Get an order."),
            ToolCreate(name="either", description="Get an order.", input_schema=either),
            ToolCreate(name="long", description="w" * 3000),
        ]
        _write_tools(url, items)
        written = _costs(url)
        command.downgrade(alembic_config(url), "0018")
        before = {row[1]: row for row in _costs(url) if row[0] == "tool"}
        now = {row[1]: row for row in written if row[0] == "tool"}
        assert before["plain"] == now["plain"]
        # The anyOf was counted, in both formats.
        assert before["either"][2] > now["either"][2]
        assert before["either"][3] > now["either"][3]
        assert before["long"][3] > now["long"][3] + 400  # 3,000 characters, not 1,024
        assert before["long"][2] == now["long"][2]  # Anthropic takes the long description
        upgrade(url)
        assert _costs(url) == written


def test_0020_keeps_the_order_written_and_hashes_what_is_stored(
    pg_server: str, worker_id: str
) -> None:
    """Undone, the schemas in jsonb's order; redone, every hash is the application's hash of
    the schema as stored, so the same catalog written again in that order changes nothing
    and in the author's order is a new version (which restores that order)."""
    from toolsift.tools.schemas import ToolCreate

    def stored(url: str) -> tuple[list[str], str]:
        with _every_row(url) as conn:
            row = conn.execute("SELECT input_schema, content_hash FROM tools").fetchone()
            assert row is not None
            return list(row[0]["properties"]), row[1]

    with _scratch_database(pg_server, f"toolsift_order_{worker_id}") as url:
        written = {"type": "object", "properties": {"query": {}, "id": {}}}
        tenant_id = _write_tools(
            url, [ToolCreate(name="search", description="Search.", input_schema=written)]
        )
        assert stored(url)[0] == ["query", "id"]
        command.downgrade(alembic_config(url), "0019")
        assert stored(url)[0] == ["id", "query"]
        upgrade(url)
        keys, content_hash = stored(url)
        assert keys == ["id", "query"]  # the order jsonb left
        as_stored = {"type": "object", "properties": {"id": {}, "query": {}}}
        tool = ToolCreate(name="search", description="Search.", input_schema=as_stored)
        assert _upsert(url, tenant_id, [tool]) == {"search": "unchanged"}
        assert stored(url)[1] == content_hash
        tool = ToolCreate(name="search", description="Search.", input_schema=written)
        assert _upsert(url, tenant_id, [tool]) == {"search": "updated"}
        assert stored(url)[0] == ["query", "id"]


# Each format's stored cost, by the revision that brought it.
COST_COLUMNS = {
    "anthropic": "token_cost",
    "openai": "openai_token_cost",
    "mcp": "mcp_token_cost",
    "openai_responses": "openai_responses_token_cost",  # 0022
}


def _served_against_stored(
    url: str, formats: tuple[str, ...] = ("anthropic", "openai", "mcp")
) -> dict[str, dict[str, tuple[int, int]]]:
    """Per tool and format: the cost of what `toolsift_definition` serves (compacted) and
    the stored cost."""
    served: dict[str, dict[str, tuple[int, int]]] = {}
    with _every_row(url) as conn:
        for fmt in formats:
            column = COST_COLUMNS[fmt]
            rows = conn.execute(
                "SELECT name, toolsift_definition(name, title, description, input_schema,"
                f" output_schema, annotations, %s), {column} FROM tools",
                (fmt,),
            )
            for name, text, stored in rows:
                cost = math.ceil(len(compact_json(text).encode()) / 4)
                served.setdefault(name, {})[fmt] = (cost, stored)
    return served


def _stored_as_written(url: str) -> None:
    """Every stored schema and MCP definition is the text the application writes (compact,
    UTF-8 as is), and every statistics bucket's totals are its live tools' costs."""
    from toolsift.models.base import json_text

    with _every_row(url) as conn:
        texts = conn.execute(
            "SELECT input_schema::text, output_schema::text, annotations::text FROM tools"
            " UNION ALL SELECT definition::text, NULL, NULL FROM mcp_tools"
        ).fetchall()
        for row in texts:
            for text_ in filter(None, row):
                assert text_ == json_text(json.loads(text_))
        mismatched = conn.execute(
            "SELECT c.permission_key FROM corpus_stats c LEFT JOIN ("
            "  SELECT coalesce(required_permission_id, '00000000-0000-0000-0000-000000000000')"
            "         AS permission_key, tenant_id, sum(token_cost) AS a,"
            "         sum(openai_token_cost) AS o, sum(mcp_token_cost) AS m"
            "  FROM tools WHERE deleted_at IS NULL GROUP BY 1, 2) s"
            " ON s.tenant_id = c.tenant_id AND s.permission_key = c.permission_key"
            " WHERE (c.total_tokens, c.openai_total_tokens, c.mcp_total_tokens)"
            "       IS DISTINCT FROM (coalesce(s.a, 0), coalesce(s.o, 0), coalesce(s.m, 0))"
        ).fetchall()
        assert mismatched == []


def _add_mcp_definitions(url: str, tenant_id: UUID, entries: list[dict[str, Any]]) -> None:
    """An MCP source with these entries (`McpTool` fields), one per tool in registry order."""
    from toolsift.db import ALL_PERMISSIONS, Database
    from toolsift.models import McpSource, McpTool, Tool

    database = Database(url, pool_size=1)
    try:
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            tool_ids = list(session.scalars(select(Tool.id).order_by(Tool.position)))
            source = McpSource(
                tenant_id=tenant_id, id=uuid4(), name="srv", prefix="srv", transport="http",
                url="http://127.0.0.1:1/mcp",
            )  # fmt: skip
            session.add(source)
            session.flush()
            for tool_id, entry in zip(tool_ids, entries, strict=False):
                fields = {"definition_hash": "0" * 64, "review_state": "approved", **entry}
                session.add(
                    McpTool(tenant_id=tenant_id, source_id=source.id, tool_id=tool_id, **fields)
                )
    finally:
        database.dispose()


def test_0020_writes_the_stored_schemas_as_the_application_does(
    pg_server: str, worker_id: str
) -> None:
    """Rows from 0019 (numbers spelt out and text spaced by jsonb) are written again as the
    application writes them and counted by its rules, so a later change to another field,
    which leaves the schema's text alone, still costs what is served; and the way down
    counts jsonb's text. Deleted tools stay out of the totals."""
    from toolsift.db import ALL_PERMISSIONS, Database
    from toolsift.tools.schemas import ToolCreate, ToolUpdate
    from toolsift.tools.service import tool as tool_service

    def costs_match(url: str) -> None:
        for name, formats in _served_against_stored(url).items():
            for fmt, (served, stored) in formats.items():
                assert served == stored, (name, fmt)

    with _scratch_database(pg_server, f"toolsift_spelling_{worker_id}") as url:
        numbers = {
            "type": "object",
            "properties": {"amount": {"minimum": 1e-7, "maximum": -1.5e-10, "description": "é"}},
        }
        either = {**numbers, "anyOf": [{"required": ["amount"]}]}
        items = [
            ToolCreate(name="numbers", description="N.", input_schema=numbers,
                       annotations={"title": "Reçu 1e-7", "ratio": 2.5e-8}),
            ToolCreate(name="either", description="E.", input_schema=either),
            ToolCreate(name="long", title="Ledger é", description="w" * 1100,
                       output_schema={"type": "object", "description": "日本"}),
            ToolCreate(name="gone", description="Deleted.", input_schema=numbers),
        ]  # fmt: skip
        tenant_id = _write_tools(url, items, delete="gone")
        definition = {"name": "search", "inputSchema": numbers}
        _add_mcp_definitions(url, tenant_id, [{"remote_name": "search", "definition": definition}])
        written = _costs(url)
        costs_match(url)
        _stored_as_written(url)
        command.downgrade(alembic_config(url), "0019")
        costs_match(url)  # jsonb spells 1e-7 out: it costs more there
        assert _costs(url) != written
        upgrade(url)
        costs_match(url)
        _stored_as_written(url)
        assert _costs(url) == written
        database = Database(url, pool_size=1)
        try:
            with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
                tools = tool_service.list_page(session, after=None, limit=100)[0]
                for tool in tools:
                    tool_service.update(session, tool.id, ToolUpdate(description="Changed."))
        finally:
            database.dispose()
        costs_match(url)
        _stored_as_written(url)


def test_no_function_of_the_app_is_left_to_public(database_url: str) -> None:
    """Every `toolsift_*` function runs for the app role (and its owner) only: one created
    without a REVOKE is executable by any login of the cluster. (Trigger functions cannot
    be called, only fired.)"""
    with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        open_to_public = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p"
            " WHERE p.proname LIKE 'toolsift%%' AND p.prorettype <> 'trigger'::regtype"
            " AND (p.proacl IS NULL OR EXISTS ("
            "   SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0))"
        ).fetchall()
    assert open_to_public == []


def test_0021_pins_the_hash_of_what_is_served(pg_server: str, worker_id: str) -> None:
    """A pin of the current definition follows its hash both ways; a pin of an older one
    (the tool held again) stays, matching nothing."""
    from toolsift.mcp.catalog import definition_hash
    from toolsift.tools.schemas import ToolCreate

    def stored(url: str) -> dict[str, tuple[str, str | None]]:
        with _every_row(url) as conn:
            rows = conn.execute(
                "SELECT remote_name, definition_hash, approved_hash FROM mcp_tools"
            ).fetchall()
        return {name: (digest, approved) for name, digest, approved in rows}

    with _scratch_database(pg_server, f"toolsift_review_hash_{worker_id}") as url:
        tools = [ToolCreate(name=n, description="T.") for n in ("t", "u")]
        tenant_id = _write_tools(url, tools)
        stamped = {"name": "add", "description": "Adds.", "_meta": {"at": "01:00"}}
        plain = {"name": "sub", "description": "Subtracts."}
        served = definition_hash(stamped)
        assert served == definition_hash({k: v for k, v in stamped.items() if k != "_meta"})
        _add_mcp_definitions(
            url,
            tenant_id,
            [
                {"remote_name": "add", "definition": stamped, "definition_hash": served,
                 "approved_hash": served},
                {"remote_name": "sub", "definition": plain, "review_state": "held",
                 "definition_hash": definition_hash(plain), "approved_hash": "f" * 64},
            ],
        )  # fmt: skip
        at_head = stored(url)
        command.downgrade(alembic_config(url), "0020")
        whole = stored(url)["add"][0]
        assert whole != served  # `_meta` counted before
        assert stored(url) == {"add": (whole, whole), "sub": (at_head["sub"][0], "f" * 64)}
        upgrade(url)
        assert stored(url) == at_head


def test_0022_counts_the_responses_definitions_as_the_application_does(
    pg_server: str, worker_id: str
) -> None:
    """Undone, the new format's column is gone; redone, every tool's cost and every
    bucket's total are the application's, and each is what `toolsift_definition` serves."""
    from toolsift.tools.schemas import ToolCreate

    def responses_costs(url: str) -> set[tuple[Any, ...]]:
        with _every_row(url) as conn:
            tools = conn.execute("SELECT name, openai_responses_token_cost FROM tools").fetchall()
            stats = conn.execute(
                "SELECT permission_key::text, openai_responses_total_tokens FROM corpus_stats"
            ).fetchall()
        return {("tool", *row) for row in tools} | {("bucket", *row) for row in stats}

    def costs_match(url: str) -> None:
        for name, formats in _served_against_stored(url, tuple(COST_COLUMNS)).items():
            for fmt, (served, stored) in formats.items():
                assert served == stored, (name, fmt)

    with _scratch_database(pg_server, f"toolsift_responses_{worker_id}") as url:
        numbers = {
            "type": "object",
            "properties": {"amount": {"minimum": 1e-7, "maximum": -0.0, "description": "é"}},
        }
        either = {**numbers, "anyOf": [{"required": ["amount"]}]}
        items = [
            ToolCreate(name="numbers", description="N.", input_schema=numbers),
            ToolCreate(name="either", description="E.", input_schema=either),
            ToolCreate(name="long", description="日本" * 600),
            ToolCreate(name="gone", description="Deleted.", input_schema=numbers),
        ]
        _write_tools(url, items, delete="gone")
        written = responses_costs(url)
        costs_match(url)
        others = _costs(url)
        command.downgrade(alembic_config(url), "0021")
        with _every_row(url) as conn:
            columns = conn.execute(
                "SELECT count(*) FROM information_schema.columns"
                " WHERE column_name LIKE 'openai_responses%'"
            ).fetchone()
        assert columns == (0,)
        upgrade(url)
        assert responses_costs(url) == written
        assert _costs(url) == others
        costs_match(url)
        _stored_as_written(url)


def test_0023_gives_every_analyst_login_a_statement_timeout(pg_server: str, worker_id: str) -> None:
    """Logins made before it get the timeout from the migration; undone, it is reset."""
    from toolsift.analytics.service import analytics
    from toolsift.db import ALL_PERMISSIONS, Database
    from toolsift.tools.schemas import ToolCreate

    def timeout(url: str, login: str) -> list[str]:
        with _every_row(url) as conn:
            row = conn.execute("SELECT rolconfig FROM pg_roles WHERE rolname = %s", (login,))
            config = row.fetchone()
        assert config is not None
        return [c for c in config[0] or [] if c.startswith("statement_timeout")]

    with _scratch_database(pg_server, f"toolsift_analyst_timeout_{worker_id}") as url:
        tenant_id = _write_tools(url, [ToolCreate(name="t", description="T.")])
        command.downgrade(alembic_config(url), "0022")
        database = Database(url, pool_size=1)
        try:
            with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
                login = analytics.create_analyst_login(session).login
            try:
                assert timeout(url, login) == []
                upgrade(url)
                assert timeout(url, login) == ["statement_timeout=60s"]
                command.downgrade(alembic_config(url), "0022")
                assert timeout(url, login) == []
            finally:
                with _every_row(url) as conn:
                    conn.execute(f'DROP ROLE IF EXISTS "{login}"')
                    conn.commit()
        finally:
            database.dispose()


def test_0031_queues_a_learn_job_for_every_tool_that_learned(
    pg_server: str, worker_id: str
) -> None:
    """Learned queries from before 0031 reach BM25 through the jobs it queues, per tenant."""
    from toolsift.db import Database
    from toolsift.embedding.base import EmbeddingConfig, get_backend
    from toolsift.embedding.service import embed_jobs
    from toolsift.tools.schemas import ToolCreate

    items = [
        ToolCreate(name="refund", description="Refund an order."),
        ToolCreate(name="track", description="Track a parcel."),
    ]
    with _scratch_database(pg_server, f"toolsift_learned_words_{worker_id}") as url:
        tenants = [_write_tools(url, items), _write_tools(url, items)]
        command.downgrade(alembic_config(url), "0030")
        with _every_row(url) as conn:
            conn.execute("DELETE FROM outbox")
            # The first tenant learned two queries for one tool; the second, nothing.
            conn.execute(
                "INSERT INTO learned_queries (tenant_id, tool_id, query_hash, query, position)"
                " SELECT t.tenant_id, t.id, sha256(convert_to(q, 'UTF8')), q, t.position"
                " FROM tools t, unnest(%s::text[]) q WHERE t.tenant_id = %s AND t.name = 'refund'",
                (["zorp my blinket", "zorp it"], tenants[0]),
            )
            conn.commit()
        upgrade(url)
        with _every_row(url) as conn:
            jobs = conn.execute("SELECT tenant_id, kind, tool_id, id FROM outbox").fetchall()
            refund = conn.execute(
                "SELECT id FROM tools WHERE tenant_id = %s AND name = 'refund'", (tenants[0],)
            ).fetchone()
        assert refund is not None
        assert [row[:3] for row in jobs] == [(tenants[0], "learn", refund[0])]

        database = Database(url, pool_size=1)
        try:
            embed_jobs(database, get_backend(EmbeddingConfig()), tenants[0], [jobs[0][3]])
        finally:
            database.dispose()
        with _every_row(url) as conn:
            words = conn.execute(
                "SELECT term, tf FROM tool_terms WHERE tool_id = %s AND term IN ('zorp', 'blinket')",
                (refund[0],),
            ).fetchall()
        assert sorted(words) == [("blinket", 0.0625), ("zorp", 0.125)]


def test_0035_indexes_again_the_tools_with_cjk_text(pg_server: str, worker_id: str) -> None:
    """Tools indexed before 0035 (a CJK run as one word) are indexed as pairs of characters
    through the jobs it queues: those whose text or learned queries hold CJK, in each tenant."""
    from tests.tools.test_index_consistency import assert_index_is_a_recount
    from toolsift.tools.schemas import ToolCreate

    items = [
        ToolCreate(name="get_weather", description="获取指定城市的实时天气预报"),
        ToolCreate(name="refund", description="Refund an order."),
        ToolCreate(name="track", description="Track a parcel."),
    ]
    with _scratch_database(pg_server, f"toolsift_cjk_{worker_id}") as url:
        command.downgrade(alembic_config(url), "0034")
        with _every_row(url) as conn:
            # 0034's analysis: the app's calls of functions that did not exist, as none.
            _stand_ins(conn, create=True)
            conn.commit()
        tenants = [_write_tools(url, items), _write_tools(url, items[1:])]
        with _every_row(url) as conn:
            _stand_ins(conn, create=False)
            conn.execute("DELETE FROM outbox")
            # The second tenant's `track` learned a query in Chinese.
            conn.execute(
                "INSERT INTO learned_queries (tenant_id, tool_id, query_hash, query, position)"
                " SELECT t.tenant_id, t.id, sha256(convert_to(q, 'UTF8')), q, t.position"
                " FROM tools t, (VALUES ('我的包裹到哪里了')) v(q)"
                " WHERE t.tenant_id = %s AND t.name = 'track'",
                (tenants[1],),
            )
            old = conn.execute(
                "SELECT term FROM tool_terms WHERE tenant_id = %s AND term ~ '[一-龥]'",
                (tenants[0],),
            ).fetchall()
            conn.commit()
        assert old == [("获取指定城市的实时天气预报",)]

        upgrade(url)
        jobs = _queued(url)
        assert [row[:3] for row in jobs] == [
            (tenants[0], "learn", "get_weather"),
            (tenants[1], "learn", "track"),
        ]

        with _after_jobs(url, jobs) as database, _every_row(url) as conn:
            pairs = conn.execute(
                "SELECT t.name, p.term FROM tool_terms p JOIN tools t"
                " ON t.tenant_id = p.tenant_id AND t.id = p.tool_id"
                " WHERE p.term IN ('天气', '包裹', '获取指定城市的实时天气预报')"
                " ORDER BY 1"
            ).fetchall()
            assert pairs == [("get_weather", "天气"), ("track", "包裹")]
            for tenant in tenants:
                assert_index_is_a_recount(tenant, database, conn)


def test_0036_indexes_again_the_catalogs_whose_setting_chose_a_language(
    pg_server: str, worker_id: str
) -> None:
    """A `text_search` stored before 0036 (an unknown setting then, its tools analysed in
    English) takes effect with it: that tenant's tools are indexed again, no other's."""
    from tests.tools.test_index_consistency import assert_index_is_a_recount
    from toolsift.tools.schemas import ToolCreate

    items = [
        ToolCreate(name="cancel_call", description="Cancelar las llamadas telefónicas activas"),
        ToolCreate(name="list_hotels", description="Buscar hoteles por su nombre"),
    ]
    with _scratch_database(pg_server, f"toolsift_text_search_{worker_id}") as url:
        command.downgrade(alembic_config(url), "0035")
        with _every_row(url) as conn:
            _stand_ins(conn, create=True, only=["toolsift_text_search(uuid, regconfig)"])
            conn.commit()
        spanish, english = _write_tools(url, items), _write_tools(url, items)
        with _every_row(url) as conn:
            _stand_ins(conn, create=False, only=["toolsift_text_search(uuid, regconfig)"])
            conn.execute("DELETE FROM outbox")
            conn.execute(
                'UPDATE tenants SET settings = \'{"text_search": "spanish"}\' WHERE id = %s',
                (spanish,),
            )
            conn.commit()

        upgrade(url)
        jobs = _queued(url)
        assert [row[:3] for row in jobs] == [
            (spanish, "learn", "cancel_call"),
            (spanish, "learn", "list_hotels"),
        ]
        with _after_jobs(url, jobs) as database, _every_row(url) as conn:
            stems = dict(
                conn.execute(
                    "SELECT tenant_id, array_agg(term ORDER BY term) FROM tool_terms"
                    " WHERE term LIKE 'llam%%' OR term LIKE 'hotel%%' GROUP BY tenant_id"
                ).fetchall()
            )
            # Spanish stems (English reads "hotels" of the name as "hotel", and keeps
            # "llamada").
            assert stems == {
                spanish: ["hotel", "hotels", "llam"],
                english: ["hotel", "llamada"],
            }
            for tenant in (spanish, english):
                assert_index_is_a_recount(tenant, database, conn)


def test_0037_indexes_again_the_catalogs_that_asked_to_fold_accents(
    pg_server: str, worker_id: str
) -> None:
    """An `unaccent: true` stored before 0037 (an unknown setting then, accents kept) takes
    effect with it: that tenant's tools are indexed again without accents, no other's."""
    from tests.tools.test_index_consistency import assert_index_is_a_recount
    from toolsift.tools.schemas import ToolCreate

    items = [
        ToolCreate(name="list_pupils", description="Lister les élèves inscrits"),
        ToolCreate(name="order_coffee", description="Order a café au lait"),
    ]
    accented = "SELECT array_agg(DISTINCT tenant_id) FROM tool_terms WHERE term ~ '[À-ÿ]'"
    with _scratch_database(pg_server, f"toolsift_unaccent_{worker_id}") as url:
        command.downgrade(alembic_config(url), "0036")
        folded, kept = _write_tools(url, items), _write_tools(url, items)
        with _every_row(url) as conn:
            conn.execute("DELETE FROM outbox")
            conn.execute(
                "UPDATE tenants SET settings = '{\"unaccent\": true}' WHERE id = %s", (folded,)
            )
            conn.commit()
            row = conn.execute(accented).fetchone()
            assert row is not None
            assert sorted(row[0]) == sorted([folded, kept])

        upgrade(url)
        jobs = _queued(url)
        assert [row[:3] for row in jobs] == [
            (folded, "learn", "list_pupils"),
            (folded, "learn", "order_coffee"),
        ]
        with _after_jobs(url, jobs) as database, _every_row(url) as conn:
            assert conn.execute(accented).fetchone() == ([kept],)
            terms = conn.execute(
                "SELECT term FROM tool_terms WHERE tenant_id = %s AND term ~ '^(el|caf)'",
                (folded,),
            ).fetchall()
            assert sorted(t for (t,) in terms) == ["cafe", "elev"]
            for tenant in (folded, kept):
                assert_index_is_a_recount(tenant, database, conn)
