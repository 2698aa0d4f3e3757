"""The budget counts each tool in the format it is sent in.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 10:00:00+00:00

Until now a tool's `token_cost` was that of its `anthropic` definition, whatever format the
select asked for. An `openai` definition wraps it (`{"type":"function","function":...}`,
about 7 tokens more per tool), and an `mcp` one adds the title, the output schema and the
annotations, which can be many times the rest: a select in `mcp` format with a budget of
150 tokens returned 1,904. `tools` gets `openai_token_cost` and `mcp_token_cost` beside
`token_cost` (which stays the `anthropic` one, also used for `anthropic_tool_reference`),
`corpus_stats` the same two totals beside `total_tokens`, and the select function counts,
reports and logs the requested format's cost. The analyst group may now read the log's
`format` and the new costs, without which its token figures cannot be read.

`toolsift_select` is 0010's text with the token costs chosen by format (`_per_format`);
`\\sf toolsift_select` in psql prints the function in force.
"""

import json
import math
from collections.abc import Sequence
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path
from types import ModuleType
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ANALYST_ROLE = "toolsift_analyst"
# Tokens are now counted per format: an analyst reading them needs the format too.
ANALYST_GRANTS = {
    "selection_logs": "format",
    "tools": "openai_token_cost, mcp_token_cost",
}

TOOL_COST = (
    "CASE p_format WHEN 'openai' THEN t.openai_token_cost"
    " WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END"
)
CATALOG_COST = (
    "CASE p_format WHEN 'openai' THEN openai_total_tokens"
    " WHEN 'mcp' THEN mcp_total_tokens ELSE total_tokens END"
)


def _revision_0010() -> ModuleType:
    path = Path(__file__).with_name("2026-12-04-0600_select_cheaper.py")
    spec = spec_from_file_location("toolsift_migration_0010", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _per_format(select: str) -> str:
    """0010's function with every token cost taken in the requested format."""
    edits = [
        # The core tools' picks and their sum.
        (
            "ROW(t.id, t.name, t.position, t.token_cost, 'core')",
            f"ROW(t.id, t.name, t.position, {TOOL_COST}, 'core')",
            1,
        ),
        ("coalesce(sum(t.token_cost), 0)", f"coalesce(sum({TOOL_COST}), 0)", 1),
        # A tool used in the conversation: the record's field keeps its name.
        (
            "SELECT t.id, t.name, t.position, t.token_cost INTO tool",
            f"SELECT t.id, t.name, t.position, {TOOL_COST} AS token_cost INTO tool",
            1,
        ),
        # The ranked candidates, a chunk at a time.
        ("array_agg(t.token_cost ORDER BY x.o)", f"array_agg({TOOL_COST} ORDER BY x.o)", 1),
        # The allowed catalog's tokens in the log.
        (
            "(SELECT coalesce(sum(total_tokens), 0) FROM public.corpus_stats",
            f"(SELECT coalesce(sum({CATALOG_COST}), 0) FROM public.corpus_stats",  # noqa: S608 - a constant
            1,
        ),
    ]
    for old, new, count in edits:
        if select.count(old) != count:
            raise RuntimeError(f"0010's select function changed: {old!r}")
        select = select.replace(old, new)
    if "t.token_cost" in select.replace(TOOL_COST, ""):
        raise RuntimeError("a token cost of 0010's select function was left in one format")
    return select


# Frozen copy of `toolsift.tools.definitions` as of this revision, for the backfill: the
# application's code may change later, a migration must not.
def _cost(definition: dict[str, Any]) -> int:
    body = json.dumps(definition, separators=(",", ":"), ensure_ascii=False)
    return math.ceil(len(body.encode()) / 4)


def _costs(row: Any) -> tuple[int, int]:
    openai = {
        "type": "function",
        "function": {
            "name": row.name,
            "description": row.description,
            "parameters": row.input_schema,
        },
    }
    mcp: dict[str, Any] = {"name": row.name}
    if row.title:
        mcp["title"] = row.title
    mcp["description"] = row.description
    mcp["inputSchema"] = row.input_schema
    if row.output_schema is not None:
        mcp["outputSchema"] = row.output_schema
    if row.annotations is not None:
        mcp["annotations"] = row.annotations
    return _cost(openai), _cost(mcp)


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    for column in ("openai_token_cost", "mcp_token_cost"):
        op.add_column("tools", sa.Column(column, sa.Integer(), nullable=True))
    for column in ("openai_total_tokens", "mcp_total_tokens"):
        op.add_column(
            "corpus_stats",
            sa.Column(column, sa.BigInteger(), nullable=False, server_default="0"),
        )
        op.alter_column("corpus_stats", column, server_default=None)
    # The backfill reads and writes every tenant's rows: row-level security is lifted for
    # this transaction only (the ALTERs hold both tables' exclusive locks to its end).
    op.execute("ALTER TABLE tools NO FORCE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE corpus_stats NO FORCE ROW LEVEL SECURITY")
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT tenant_id, id, name, title, description, input_schema, output_schema,"
            " annotations FROM tools"
        )
    )
    update = sa.text(
        "UPDATE tools SET openai_token_cost = :openai, mcp_token_cost = :mcp"
        " WHERE tenant_id = :tenant_id AND id = :id"
    )
    while batch := rows.fetchmany(1000):
        values = []
        for row in batch:
            openai, mcp = _costs(row)
            values.append({"tenant_id": row.tenant_id, "id": row.id, "openai": openai, "mcp": mcp})
        bind.execute(update, values)
    # The statistics hold live tools only, by permission bucket (`lexical.index.bucket`).
    op.execute(
        """
        UPDATE corpus_stats c
           SET openai_total_tokens = s.openai, mcp_total_tokens = s.mcp
          FROM (SELECT tenant_id,
                       coalesce(required_permission_id, '00000000-0000-0000-0000-000000000000')
                           AS permission_key,
                       sum(openai_token_cost) AS openai, sum(mcp_token_cost) AS mcp
                  FROM tools WHERE deleted_at IS NULL
                 GROUP BY 1, 2) s
         WHERE c.tenant_id = s.tenant_id AND c.permission_key = s.permission_key
        """
    )
    op.execute("ALTER TABLE tools FORCE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE corpus_stats FORCE ROW LEVEL SECURITY")
    for column in ("openai_token_cost", "mcp_token_cost"):
        op.alter_column("tools", column, nullable=False)
    op.execute(_per_format(_revision_0010().SELECT))
    for table, columns in ANALYST_GRANTS.items():
        op.execute(f"GRANT SELECT ({columns}) ON {table} TO {ANALYST_ROLE}")


def downgrade() -> None:
    op.execute(_revision_0010().SELECT)
    op.execute(f"REVOKE SELECT (format) ON selection_logs FROM {ANALYST_ROLE}")  # noqa: S608
    for column in ("openai_total_tokens", "mcp_total_tokens"):
        op.drop_column("corpus_stats", column)
    for column in ("openai_token_cost", "mcp_token_cost"):
        op.drop_column("tools", column)
