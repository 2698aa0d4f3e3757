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
"""

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

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

# 0019's function, as it was: recreated on the way down.
DEFINITION_BEFORE = """
CREATE FUNCTION toolsift_definition(
    p_name text, p_title text, p_description text, p_input jsonb, p_output jsonb,
    p_annotations jsonb, p_format text
) RETURNS text
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
                                    THEN left(p_description, 1023) || U&'\\2026'
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

TOOLS = sa.text(
    "SELECT t.tenant_id, t.id, t.name, t.title, t.description, t.input_schema, t.examples,"
    " p.name AS permission, t.core, t.output_schema, t.annotations"
    " FROM tools t LEFT JOIN permissions p"
    " ON p.tenant_id = t.tenant_id AND p.id = t.required_permission_id"
)


# Frozen copies of `toolsift.tools.definitions.content_hash`, after and before this revision:
# the application's code may change later, a migration must not.
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


def _rehash(content_hash: Callable[[Any], str]) -> None:
    """Every tool's hash, over its schemas as stored (row-level security lifted for this
    transaction only, for every tenant's rows)."""
    op.execute("ALTER TABLE tools NO FORCE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE permissions NO FORCE ROW LEVEL SECURITY")
    bind = op.get_bind()
    rows = bind.execute(TOOLS)
    update = sa.text(
        "UPDATE tools SET content_hash = :hash WHERE tenant_id = :tenant_id AND id = :id"
    )
    while batch := rows.fetchmany(1000):
        values = [{"tenant_id": r.tenant_id, "id": r.id, "hash": content_hash(r)} for r in batch]
        bind.execute(update, values)
    op.execute("ALTER TABLE tools FORCE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE permissions FORCE ROW LEVEL SECURITY")


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute(f"DROP FUNCTION {SIGNATURE_BEFORE}")
    for table, column in COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE json USING {column}::json")
    op.execute(SERVED_SCHEMA)
    op.execute(DEFINITION)
    _rehash(lambda row: _hash(row, sort_keys=False))


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("DROP FUNCTION toolsift_definition(text, text, text, json, json, json, text)")
    op.execute("DROP FUNCTION toolsift_served_schema(json)")
    for table, column in COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE jsonb USING {column}::jsonb")
    op.execute(DEFINITION_BEFORE)
    _rehash(lambda row: _hash(row, sort_keys=True))
