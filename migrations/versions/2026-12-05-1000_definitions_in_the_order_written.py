"""Definitions in the order written: schemas in `json` columns, not `jsonb`.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 10:00:00+00:00

jsonb stores an object's keys shortest first, then bytewise: a tool written with `query`,
`limit`, `filter` reached the model as `limit`, `query`, `filter`, and an admin reading it back
got that order too. `json` keeps the text as written. `tools.input_schema`, `output_schema`,
`annotations` and `mcp_tools.definition` become `json`; `toolsift_definition` takes `json` and
serves a schema as it is stored, except where the model APIs' rules rewrite it
(`toolsift_model_schema`, migration 0019, still in jsonb: top-level combinators are rare).

The order written is now part of a tool's content: `content_hash` no longer sorts keys, and
every stored hash is computed again over the stored schemas (the order jsonb left them in), so
writing the same catalog again changes nothing, and writing it in another order is a new
version. Rows stored before this revision keep jsonb's order until they are written again.

Their text is written again as the application writes it (compact, UTF-8 as is, Python's
spelling of numbers), and their token costs are computed again by the new rules, so that a
later change to another field of the tool, which leaves the schema's text alone, is counted
from the same text that is served. The way down does the same with 0019's rules.
"""

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# What the rewrite reads or writes: locked together, row-level security lifted for it.
TABLES = ("tools", "mcp_tools", "permissions", "corpus_stats")
COLUMNS = (
    ("tools", "input_schema"),
    ("tools", "output_schema"),
    ("tools", "annotations"),
    ("mcp_tools", "definition"),
)

SIGNATURE_BEFORE = "toolsift_definition(text, text, text, jsonb, jsonb, jsonb, text)"

SERVED_SCHEMA = """
CREATE FUNCTION toolsift_served_schema(p_schema json) RETURNS json
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN p_schema::jsonb ?| ARRAY['oneOf', 'anyOf', 'allOf', 'enum', 'not']
                THEN toolsift_model_schema(p_schema::jsonb)::json
                ELSE p_schema END
$$
"""

DEFINITION = """
CREATE FUNCTION toolsift_definition(
    p_name text, p_title text, p_description text, p_input json, p_output json,
    p_annotations json, p_format text
) RETURNS text
-- STABLE, as json_build_object is: an IMMUTABLE label would keep it from being inlined.
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE p_format
        WHEN 'anthropic' THEN json_build_object(
            'name', p_name, 'description', p_description,
            'input_schema', toolsift_served_schema(p_input))::text
        WHEN 'anthropic_tool_reference' THEN json_build_object(
            'type', 'tool_reference', 'tool_name', p_name)::text
        WHEN 'openai' THEN json_build_object(
            'type', 'function', 'function', json_build_object(
                'name', p_name,
                'description', CASE WHEN char_length(p_description) > 1024
                                    THEN left(p_description, 1023) || U&'\\2026'
                                    ELSE p_description END,
                'parameters', toolsift_served_schema(p_input)))::text
        ELSE '{"name":' || to_json(p_name)::text
            || CASE WHEN coalesce(p_title, '') <> ''
                    THEN ',"title":' || to_json(p_title)::text ELSE '' END
            || ',"description":' || to_json(p_description)::text
            || ',"inputSchema":' || p_input::text
            -- A JSON null is no schema, as an SQL NULL is.
            || CASE WHEN json_typeof(p_output) <> 'null'
                    THEN ',"outputSchema":' || p_output::text ELSE '' END
            || CASE WHEN json_typeof(p_annotations) <> 'null'
                    THEN ',"annotations":' || p_annotations::text ELSE '' END
            || '}'
    END
$$
"""

APP_ROLE = "toolsift_app"
FUNCTIONS = (
    "toolsift_definition(text, text, text, json, json, json, text)",
    "toolsift_served_schema(json)",
    "toolsift_model_schema(jsonb)",
)

TOOLS = sa.text(
    "SELECT t.tenant_id, t.id, t.name, t.title, t.description, t.input_schema, t.examples,"
    " p.name AS permission, t.core, t.output_schema, t.annotations"
    " FROM tools t LEFT JOIN permissions p"
    " ON p.tenant_id = t.tenant_id AND p.id = t.required_permission_id"
)
SCHEMAS = ("input_schema", "output_schema", "annotations")
UPDATE = sa.text(
    "UPDATE tools SET content_hash = :hash, token_cost = :anthropic,"
    " openai_token_cost = :openai, mcp_token_cost = :mcp"
    " WHERE tenant_id = :tenant_id AND id = :id"
)
UPDATE_WRITTEN = sa.text(
    "UPDATE tools SET input_schema = CAST(:input_schema AS json),"
    " output_schema = CAST(:output_schema AS json), annotations = CAST(:annotations AS json),"
    " content_hash = :hash, token_cost = :anthropic,"
    " openai_token_cost = :openai, mcp_token_cost = :mcp"
    " WHERE tenant_id = :tenant_id AND id = :id"
)
TOTALS = """
UPDATE corpus_stats c
   SET total_tokens = s.anthropic, openai_total_tokens = s.openai, mcp_total_tokens = s.mcp
  FROM (SELECT tenant_id,
               coalesce(required_permission_id, '00000000-0000-0000-0000-000000000000')
                   AS permission_key,
               sum(token_cost) AS anthropic, sum(openai_token_cost) AS openai,
               sum(mcp_token_cost) AS mcp
          FROM tools WHERE deleted_at IS NULL
         GROUP BY 1, 2) s
 WHERE c.tenant_id = s.tenant_id AND c.permission_key = s.permission_key
"""


# 0019's function, for the way down: a frozen copy of its text.
DEFINITION_0019 = r"""
CREATE OR REPLACE FUNCTION toolsift_definition(
    p_name text, p_title text, p_description text, p_input jsonb, p_output jsonb,
    p_annotations jsonb, p_format text
) RETURNS text
-- STABLE, as json_build_object is: an IMMUTABLE label would keep it from being inlined.
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE p_format
        WHEN 'anthropic' THEN json_build_object(
            'name', p_name, 'description', p_description,
            'input_schema', toolsift_model_schema(p_input))::text
        WHEN 'anthropic_tool_reference' THEN json_build_object(
            'type', 'tool_reference', 'tool_name', p_name)::text
        WHEN 'openai' THEN json_build_object(
            'type', 'function', 'function', json_build_object(
                'name', p_name,
                'description', CASE WHEN char_length(p_description) > 1024
                                    THEN left(p_description, 1023) || U&'\2026'
                                    ELSE p_description END,
                'parameters', toolsift_model_schema(p_input)))::text
        ELSE '{"name":' || to_json(p_name)::text
            || CASE WHEN coalesce(p_title, '') <> ''
                    THEN ',"title":' || to_json(p_title)::text ELSE '' END
            || ',"description":' || to_json(p_description)::text
            || ',"inputSchema":' || p_input::text
            -- A JSON null is no schema, as an SQL NULL is.
            || CASE WHEN jsonb_typeof(p_output) <> 'null'
                    THEN ',"outputSchema":' || p_output::text ELSE '' END
            || CASE WHEN jsonb_typeof(p_annotations) <> 'null'
                    THEN ',"annotations":' || p_annotations::text ELSE '' END
            || '}'
    END
$$
"""


# Frozen copies of 0019's copies of the model APIs' schema rule and of its cost function.
def _model_schema(schema: dict[str, Any]) -> dict[str, Any]:
    if not any(key in schema for key in ("oneOf", "anyOf", "allOf", "enum", "not")):
        return schema
    merged: dict[str, Any] = {}
    for key in ("oneOf", "anyOf", "allOf"):
        branches = schema.get(key)
        for branch in branches if isinstance(branches, list) else []:
            properties = branch.get("properties") if isinstance(branch, dict) else None
            for name, value in (properties if isinstance(properties, dict) else {}).items():
                merged.setdefault(name, value)
    kept = {k: v for k, v in schema.items() if k not in ("oneOf", "anyOf", "allOf", "enum", "not")}
    if merged:
        top = kept.get("properties")
        kept["properties"] = {**merged, **(top if isinstance(top, dict) else {})}
    return kept


def _numbers_written_out(value: Any) -> int:
    if isinstance(value, float):
        return len(format(Decimal(repr(value)), "f")) - len(repr(value))
    if isinstance(value, dict):
        return sum(_numbers_written_out(v) for v in value.values())
    if isinstance(value, list):
        return sum(_numbers_written_out(v) for v in value)
    return 0


def _cost(definition: dict[str, Any]) -> int:
    body = json.dumps(definition, separators=(",", ":"), ensure_ascii=False)
    return math.ceil((len(body.encode()) + _numbers_written_out(definition)) / 4)


# Frozen copies of the application's rules after and before this revision (a migration must
# not import the application, whose code may change later): how a schema is written, what a
# tool's hash covers, and what its definitions cost in each format.
def _written(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _hash(row: Any, *, sort_keys: bool) -> str:
    fields: dict[str, Any] = {
        "name": row.name,
        "title": row.title,
        "description": row.description,
        "input_schema": row.input_schema,
        "examples": row.examples,
        "required_permission": row.permission,
        "core": row.core,
    }
    for name in ("output_schema", "annotations"):
        if getattr(row, name) is not None:
            fields[name] = getattr(row, name)
    canonical = json.dumps(fields, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _definitions(row: Any, schema: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The three definitions the budget counts, with `schema` for the model APIs' one."""
    description = row.description
    if len(description) > 1024:
        description = description[:1023] + "\u2026"
    anthropic = {"name": row.name, "description": row.description, "input_schema": schema}
    openai = {
        "type": "function",
        "function": {"name": row.name, "description": description, "parameters": schema},
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
    return anthropic, openai, mcp


def _costs_now(row: Any) -> tuple[int, ...]:
    """Served as written, but for a schema the model APIs' rule rewrites (in jsonb)."""
    schema = _model_schema(row.input_schema)
    extra = _numbers_written_out(schema) if schema is not row.input_schema else 0
    anthropic, openai, mcp = _definitions(row, schema)
    return (
        math.ceil((len(_written(anthropic).encode()) + extra) / 4),
        math.ceil((len(_written(openai).encode()) + extra) / 4),
        math.ceil(len(_written(mcp).encode()) / 4),
    )


def _costs_before(row: Any) -> tuple[int, ...]:
    """Everything served from jsonb, numbers spelt out."""
    return tuple(_cost(d) for d in _definitions(row, _model_schema(row.input_schema)))


def _rewrite(
    content_hash: Callable[[Any], str],
    costs: Callable[[Any], tuple[int, ...]],
    *,
    as_written: bool,
) -> None:
    """Every tool's hash and costs (and, `as_written`, its schemas' text as the application
    writes it), then every catalog's totals; row-level security lifted for this transaction
    only, for every tenant's rows."""
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
    bind = op.get_bind()
    # A server-side cursor: a thousand rows in memory at a time, whatever the catalogs hold.
    rows = bind.execute(TOOLS.execution_options(stream_results=True, max_row_buffer=1000))
    update = UPDATE_WRITTEN if as_written else UPDATE
    while batch := rows.fetchmany(1000):
        values = []
        for row in batch:
            anthropic, openai, mcp = costs(row)
            value = {
                "tenant_id": row.tenant_id, "id": row.id, "hash": content_hash(row),
                "anthropic": anthropic, "openai": openai, "mcp": mcp,
            }  # fmt: skip
            for column in SCHEMAS if as_written else ():
                stored = getattr(row, column)
                value[column] = None if stored is None else _written(stored)
            values.append(value)
        bind.execute(update, values)
    if as_written:
        definitions = bind.execute(
            sa.text(
                "SELECT tenant_id, source_id, remote_name, definition FROM mcp_tools"
            ).execution_options(stream_results=True, max_row_buffer=1000)
        )
        while batch := definitions.fetchmany(1000):
            bind.execute(
                sa.text(
                    "UPDATE mcp_tools SET definition = CAST(:definition AS json)"
                    " WHERE tenant_id = :tenant_id AND source_id = :source_id"
                    " AND remote_name = :remote_name"
                ),
                [{**r._asdict(), "definition": _written(r.definition)} for r in batch],
            )
    op.execute(TOTALS)
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")


# Every table the migration changes, locked at once before any is changed: taken one by one
# (the ALTERs, then the row-level security toggles), a request holding one of them while
# waiting for another could deadlock with the migration. Reads wait too, for the
# migration's whole transaction (about a second per 10,000 tools, docs/deploy.md).
LOCK = f"LOCK TABLE {', '.join(TABLES)} IN ACCESS EXCLUSIVE MODE"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute(LOCK)
    op.execute(f"DROP FUNCTION {SIGNATURE_BEFORE}")
    for table, column in COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE json USING {column}::json")
    op.execute(SERVED_SCHEMA)
    op.execute(DEFINITION)
    # Like every other function of the app (0008); 0019 left its own to PUBLIC.
    for signature in FUNCTIONS:
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {APP_ROLE}")
    _rewrite(lambda row: _hash(row, sort_keys=False), _costs_now, as_written=True)


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute(LOCK)
    op.execute(f"DROP FUNCTION {FUNCTIONS[0]}")
    op.execute(f"DROP FUNCTION {FUNCTIONS[1]}")
    op.execute(f"REVOKE ALL ON FUNCTION {FUNCTIONS[2]} FROM {APP_ROLE}")
    op.execute(f"GRANT EXECUTE ON FUNCTION {FUNCTIONS[2]} TO PUBLIC")
    for table, column in COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE jsonb USING {column}::jsonb")
    op.execute(DEFINITION_0019)  # 0019's function, as it was
    op.execute(f"REVOKE ALL ON FUNCTION {SIGNATURE_BEFORE} FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {SIGNATURE_BEFORE} TO {APP_ROLE}")
    _rewrite(lambda row: _hash(row, sort_keys=True), _costs_before, as_written=False)
