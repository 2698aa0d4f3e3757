"""Definitions for OpenAI's Responses API: the `openai_responses` format.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05 12:00:00+00:00

The `openai` format is the Chat Completions shape, a `function` object inside the tool. The
Responses API takes the same fields at the tool's top, and its `strict` defaults to true,
under which it refuses any schema outside its strict subset: every definition of this format
says `"strict": false`, so that it works for every schema, as Chat Completions does.

`tools` gets `openai_responses_token_cost`, `corpus_stats` its total, `toolsift_definition`
the new shape, and `toolsift_select` counts the new cost (0017's function with the format's
cost added to its choice of cost). The analyst group may read the new cost, as the others.
"""

import json
import math
from collections.abc import Sequence
from decimal import Decimal
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path
from types import ModuleType
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ANALYST_ROLE = "toolsift_analyst"
# Locked together before any is changed, as in 0020.
TABLES = ("tools", "corpus_stats")
LOCK = f"LOCK TABLE {', '.join(TABLES)} IN ACCESS EXCLUSIVE MODE"

TOOL_COST = (
    "CASE p_format WHEN 'openai' THEN t.openai_token_cost"
    " WHEN 'openai_responses' THEN t.openai_responses_token_cost"
    " WHEN 'mcp' THEN t.mcp_token_cost ELSE t.token_cost END"
)
CATALOG_COST = (
    "CASE p_format WHEN 'openai' THEN openai_total_tokens"
    " WHEN 'openai_responses' THEN openai_responses_total_tokens"
    " WHEN 'mcp' THEN mcp_total_tokens ELSE total_tokens END"
)

# Inserted before 0020's last branch (the `mcp` definition).
RESPONSES = """        WHEN 'openai_responses' THEN json_build_object(
            'type', 'function', 'name', p_name,
            'description', CASE WHEN char_length(p_description) > 1024
                                THEN left(p_description, 1023) || U&'\\2026'
                                ELSE p_description END,
            'parameters', toolsift_served_schema(p_input),
            'strict', false)::text
"""
MCP_BRANCH = """        ELSE '{"name":' || to_json(p_name)::text"""

TOOLS = sa.text(
    "SELECT tenant_id, id, name, description, input_schema FROM tools"
).execution_options(stream_results=True, max_row_buffer=1000)
UPDATE = sa.text(
    "UPDATE tools SET openai_responses_token_cost = :cost WHERE tenant_id = :tenant_id AND id = :id"
)
TOTALS = """
UPDATE corpus_stats c
   SET openai_responses_total_tokens = s.tokens
  FROM (SELECT tenant_id,
               coalesce(required_permission_id, '00000000-0000-0000-0000-000000000000')
                   AS permission_key,
               sum(openai_responses_token_cost) AS tokens
          FROM tools WHERE deleted_at IS NULL
         GROUP BY 1, 2) s
 WHERE c.tenant_id = s.tenant_id AND c.permission_key = s.permission_key
"""


def _load(filename: str, name: str) -> ModuleType:
    path = Path(__file__).with_name(filename)
    spec = spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _revision_0011() -> ModuleType:
    return _load("2026-12-04-1000_token_costs_per_format.py", "toolsift_migration_0011")


def _revision_0017() -> ModuleType:
    return _load("2026-12-04-1830_missing_without_a_query_vector.py", "toolsift_migration_0017")


def _revision_0019() -> ModuleType:
    return _load("2026-12-05-0930_definitions_the_model_apis_accept.py", "toolsift_migration_0019")


def _revision_0020() -> ModuleType:
    return _load("2026-12-05-1000_definitions_in_the_order_written.py", "toolsift_migration_0020")


def _select_0017() -> str:
    previous = _revision_0017()
    return str(previous._counted_against_the_vector(previous._select_0013()))


def _with_responses_costs(select: str) -> str:
    m11 = _revision_0011()
    for old, new in ((m11.TOOL_COST, TOOL_COST), (m11.CATALOG_COST, CATALOG_COST)):
        if old not in select:
            raise RuntimeError(f"0017's select function changed: {old!r}")
        select = select.replace(old, new)
    return select


def _definition(before: str) -> str:
    if before.count(MCP_BRANCH) != 1 or "CREATE FUNCTION toolsift_definition(" not in before:
        raise RuntimeError("0020's toolsift_definition changed")
    return before.replace(
        "CREATE FUNCTION toolsift_definition(", "CREATE OR REPLACE FUNCTION toolsift_definition("
    ).replace(MCP_BRANCH, RESPONSES + MCP_BRANCH)


# Frozen copies of the application's rules as of this revision (a migration must not import
# the application): the definition, and what its numbers cost where the model APIs' rule
# rewrites the schema in jsonb.
def _numbers_written_out(value: Any) -> int:
    if isinstance(value, float):
        written_out = format(Decimal(repr(value)) + 0 if value == 0 else Decimal(repr(value)), "f")
        return len(written_out) - len(repr(value))
    if isinstance(value, dict):
        return sum(_numbers_written_out(v) for v in value.values())
    if isinstance(value, list):
        return sum(_numbers_written_out(v) for v in value)
    return 0


def _cost(row: Any, model_schema: Any) -> int:
    schema = model_schema(row.input_schema)
    extra = _numbers_written_out(schema) if schema is not row.input_schema else 0
    description = row.description
    if len(description) > 1024:
        description = description[:1023] + "\u2026"
    definition = {
        "type": "function",
        "name": row.name,
        "description": description,
        "parameters": schema,
        "strict": False,
    }
    body = json.dumps(definition, separators=(",", ":"), ensure_ascii=False)
    return math.ceil((len(body.encode()) + extra) / 4)


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute(LOCK)
    op.add_column("tools", sa.Column("openai_responses_token_cost", sa.Integer(), nullable=True))
    op.add_column(
        "corpus_stats",
        sa.Column(
            "openai_responses_total_tokens", sa.BigInteger(), nullable=False, server_default="0"
        ),
    )
    op.alter_column("corpus_stats", "openai_responses_total_tokens", server_default=None)
    # Every tenant's rows: row-level security lifted for this transaction only.
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
    model_schema = _revision_0019()._model_schema
    bind = op.get_bind()
    rows = bind.execute(TOOLS)
    while batch := rows.fetchmany(1000):
        bind.execute(
            UPDATE,
            [{"tenant_id": r.tenant_id, "id": r.id, "cost": _cost(r, model_schema)} for r in batch],
        )
    op.execute(TOTALS)
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    op.alter_column("tools", "openai_responses_token_cost", nullable=False)
    op.execute(_definition(_revision_0020().DEFINITION))
    op.execute(_with_responses_costs(_select_0017()))
    op.execute(f"GRANT SELECT (openai_responses_token_cost) ON tools TO {ANALYST_ROLE}")


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute(LOCK)
    op.execute(_select_0017())
    op.execute(_definition(_revision_0020().DEFINITION).replace(RESPONSES, ""))
    op.drop_column("corpus_stats", "openai_responses_total_tokens")
    op.drop_column("tools", "openai_responses_token_cost")
