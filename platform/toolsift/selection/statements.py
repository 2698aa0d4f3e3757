"""The select path's SQL, sent on the driver connection in two pipelines, not one by one.

A select used to make about ten round trips (ping, begin, scope, key, roles, score, entries,
definitions, log, commit), each a wake-up of PostgreSQL and of the API thread. Here the
statements that do not depend on each other travel together: the scope, the scores and the
tool entries in the first pipeline, the log row and the chosen definitions in the second,
with the commit. Scores are the very `bm25` and `dense` statements, compiled once for the
driver, so they are bit-identical to the ORM path.

The selection log insert lives in `write_log` and nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb
from sqlalchemy import TextClause
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect

from . import bm25, dense

Connection = psycopg.Connection[Any]


def compiled(statement: TextClause) -> str:
    """A `text()` statement in the driver's own placeholders (`%(name)s`), once."""
    return str(statement.compile(dialect=psycopg_dialect.dialect()))  # type: ignore[no-untyped-call]


# The key, its roles and the RLS settings, in one call (migration 0006): it raises for a
# bad key, so nothing pipelined behind it runs.
AGENT_SCOPE = "SELECT toolsift_agent_scope(%(tenant_id)s, %(key_id)s, %(key_hash)s, %(roles)s)"
#: SQLSTATEs raised by toolsift_agent_scope.
BAD_KEY = "TSA01"
NOT_AGENT = "TSA03"

# Sessions that already know the caller (MCP, in-process) only narrow to the roles' grants.
APPLY_ROLES = """
    SELECT set_config('app.permissions',
                      coalesce(string_agg(DISTINCT rp.permission_id::text, ','), ''), true)
    FROM role_permissions rp JOIN roles r ON r.tenant_id = rp.tenant_id AND r.id = rp.role_id
    WHERE r.tenant_id = %(tenant_id)s AND r.name = ANY(%(roles)s::text[])
"""

# Tool ids travel as text on this path: hashed and compared a few hundred times per select,
# a str is several times cheaper than a uuid.UUID.
_ENTRY = "t.name, t.position, t.token_cost, t.core"
# BM25 as scored by `bm25.score`, with what the budget needs of each tool. The join only adds
# columns (postings exist for live tools only); the order is the statement's own.
BM25 = f"""
    SELECT s.tool_id::text, s.score, s.terms, {_ENTRY}
    FROM ({compiled(bm25._SCORE)}) s
    JOIN tools t ON t.tenant_id = %(tenant_id)s AND t.id = s.tool_id AND t.deleted_at IS NULL
    ORDER BY s.score DESC, s.position
"""  # noqa: S608 - built from constants, values are bound
DENSE = compiled(dense.SCORE_ENTRIES)
MISSING = compiled(dense.MISSING_SERVED)
TENANT = compiled(dense.TENANT)

# Core and used tools, each by its own index (an OR would scan the catalog).
_LIVE = "t.tenant_id = %(tenant_id)s AND t.deleted_at IS NULL"
_USED = "t.name = ANY(%(names)s::text[])"
ENTRIES = f"""
    SELECT t.id::text, {_ENTRY} FROM tools t WHERE {_LIVE} AND t.core
    UNION SELECT t.id::text, {_ENTRY} FROM tools t WHERE {_LIVE} AND {_USED}
"""  # noqa: S608 - built from constants, values are bound

DEFINITIONS = """
    SELECT id::text, name, title, description, input_schema, output_schema, annotations
    FROM tools
    WHERE tenant_id = %(tenant_id)s AND id = ANY(%(ids)s::uuid[])
"""


@dataclass(frozen=True)
class LogRow:
    """What `selection_logs` records of one select."""

    tenant_id: UUID
    id: UUID
    key_id: UUID
    roles: Sequence[str]
    mode: str
    format: str
    query: str
    k: int
    budget_tokens: int
    tool_ids: Sequence[str]
    tool_names: Sequence[str]
    details: list[dict[str, Any]]
    candidate_count: int
    tokens: int
    latency_ms: float


# catalog_tokens: the allowed catalog's tokens, from the RLS-filtered statistics buckets.
_LOG = """
    INSERT INTO selection_logs (
        tenant_id, id, key_id, roles, mode, format, query, k, budget_tokens, tool_ids,
        tool_names, details, candidate_count, tokens, catalog_tokens, latency_ms)
    VALUES (
        %(tenant_id)s, %(id)s, %(key_id)s, %(roles)s::text[], %(mode)s, %(format)s, %(query)s,
        %(k)s, %(budget_tokens)s, %(tool_ids)s::uuid[], %(tool_names)s::text[], %(details)s,
        %(candidate_count)s, %(tokens)s,
        (SELECT coalesce(sum(total_tokens), 0) FROM corpus_stats
         WHERE tenant_id = %(tenant_id)s),
        %(latency_ms)s)
"""


def write_log(conn: Connection, row: LogRow) -> None:
    """Every select writes exactly one row, in the select's own transaction."""
    conn.execute(
        _LOG,
        {
            "tenant_id": row.tenant_id,
            "id": row.id,
            "key_id": row.key_id,
            "roles": list(row.roles),
            "mode": row.mode,
            "format": row.format,
            "query": row.query,
            "k": row.k,
            "budget_tokens": row.budget_tokens,
            "tool_ids": list(row.tool_ids),
            "tool_names": list(row.tool_names),
            "details": Jsonb(row.details),
            "candidate_count": row.candidate_count,
            "tokens": row.tokens,
            "latency_ms": row.latency_ms,
        },
    )
