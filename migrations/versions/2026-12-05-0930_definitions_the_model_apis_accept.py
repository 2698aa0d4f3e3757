"""Anthropic and OpenAI definitions hold to what those APIs accept.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 09:30:00+00:00

Both APIs refuse a request whose tools include an input schema with `oneOf`, `anyOf` or
`allOf` at the top (OpenAI also `enum` and `not`), and OpenAI refuses a function
description over 1,024 characters. MCP servers often say "one of these arguments" with a
top-level `anyOf`, and one such tool among those selected failed the agent's whole turn.

`toolsift_model_schema` drops those keywords and keeps the properties their branches named,
as optional properties (`tools.definitions.model_schema` is the same rule in Python, for the
token costs); `toolsift_definition` serves it in the `anthropic` and `openai` formats, and
cuts an `openai` description to 1,023 characters and an ellipsis. The `mcp` format still
serves the tool as written. The stored `anthropic` and `openai` token costs of the tools
this changes are computed again, and with them the catalog totals.
"""

import json
import math
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MODEL_SCHEMA = """
CREATE FUNCTION toolsift_model_schema(p_schema jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN NOT (p_schema ?| ARRAY['oneOf', 'anyOf', 'allOf', 'enum', 'not']) THEN p_schema
        ELSE (p_schema - ARRAY['oneOf', 'anyOf', 'allOf', 'enum', 'not'])
             || CASE WHEN m.merged IS NULL THEN '{}'::jsonb
                     ELSE jsonb_build_object('properties', m.merged
                          || CASE WHEN jsonb_typeof(p_schema -> 'properties') = 'object'
                                  THEN p_schema -> 'properties' ELSE '{}'::jsonb END)
                END
    END
    FROM (
        -- The branches' properties, the first one named winning (jsonb keeps the last of
        -- a repeated key, so they are aggregated last to first); the top level's win over
        -- all of them.
        SELECT jsonb_object_agg(p.key, p.value ORDER BY c.o DESC, b.o DESC) AS merged
        FROM unnest(ARRAY['oneOf', 'anyOf', 'allOf']) WITH ORDINALITY AS c(keyword, o)
        CROSS JOIN LATERAL jsonb_array_elements(
            CASE WHEN jsonb_typeof(p_schema -> c.keyword) = 'array'
                 THEN p_schema -> c.keyword ELSE '[]'::jsonb END) WITH ORDINALITY AS b(branch, o)
        CROSS JOIN LATERAL jsonb_each(
            CASE WHEN jsonb_typeof(b.branch -> 'properties') = 'object'
                 THEN b.branch -> 'properties' ELSE '{}'::jsonb END) AS p
    ) m
$$
"""

# 0008's function (same signature, so CREATE OR REPLACE keeps its grants) with the two
# formats' schema and OpenAI's description limit.
DEFINITION = """
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

# The way down: 0008's function, a frozen copy of its text as a CREATE OR REPLACE (which keeps
# the grants).
DEFINITION_0008 = r"""
CREATE OR REPLACE FUNCTION toolsift_definition(
    p_name text, p_title text, p_description text, p_input jsonb, p_output jsonb,
    p_annotations jsonb, p_format text
) RETURNS text
-- STABLE, as json_build_object is: an IMMUTABLE label would keep it from being inlined.
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE p_format
        WHEN 'anthropic' THEN json_build_object(
            'name', p_name, 'description', p_description, 'input_schema', p_input)::text
        WHEN 'anthropic_tool_reference' THEN json_build_object(
            'type', 'tool_reference', 'tool_name', p_name)::text
        WHEN 'openai' THEN json_build_object(
            'type', 'function', 'function', json_build_object(
                'name', p_name, 'description', p_description, 'parameters', p_input))::text
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


AFFECTED = sa.text(
    "SELECT tenant_id, id, name, description, input_schema FROM tools"
    " WHERE input_schema ?| ARRAY['oneOf', 'anyOf', 'allOf', 'enum', 'not']"
    " OR char_length(description) > 1024"
)


# Frozen copy of `toolsift.tools.definitions` as of this revision, for the backfill: the
# application's code may change later, a migration must not.
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


def _costs_now(row: Any) -> tuple[int, int]:
    description = row.description
    if len(description) > 1024:
        description = description[:1023] + "\u2026"
    schema = _model_schema(row.input_schema)
    anthropic = {"name": row.name, "description": row.description, "input_schema": schema}
    openai = {
        "type": "function",
        "function": {"name": row.name, "description": description, "parameters": schema},
    }
    return _cost(anthropic), _cost(openai)


def _costs_before(row: Any) -> tuple[int, int]:
    anthropic = {"name": row.name, "description": row.description, "input_schema": row.input_schema}
    openai = {
        "type": "function",
        "function": {
            "name": row.name,
            "description": row.description,
            "parameters": row.input_schema,
        },
    }
    return _cost(anthropic), _cost(openai)


def _recount(costs: Callable[[Any], tuple[int, int]]) -> None:
    """The affected tools' two costs, then every catalog's totals (as 0011 filled them)."""
    op.execute("SET LOCAL lock_timeout = '5s'")
    # Every tenant's rows: row-level security is lifted for this transaction only.
    op.execute("ALTER TABLE tools NO FORCE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE corpus_stats NO FORCE ROW LEVEL SECURITY")
    bind = op.get_bind()
    rows = bind.execute(AFFECTED)
    update = sa.text(
        "UPDATE tools SET token_cost = :anthropic, openai_token_cost = :openai"
        " WHERE tenant_id = :tenant_id AND id = :id"
    )
    while batch := rows.fetchmany(1000):
        values = []
        for row in batch:
            anthropic, openai = costs(row)
            values.append(
                {"tenant_id": row.tenant_id, "id": row.id, "anthropic": anthropic, "openai": openai}
            )
        bind.execute(update, values)
    op.execute(
        """
        UPDATE corpus_stats c
           SET total_tokens = s.anthropic, openai_total_tokens = s.openai
          FROM (SELECT tenant_id,
                       coalesce(required_permission_id, '00000000-0000-0000-0000-000000000000')
                           AS permission_key,
                       sum(token_cost) AS anthropic, sum(openai_token_cost) AS openai
                  FROM tools WHERE deleted_at IS NULL
                 GROUP BY 1, 2) s
         WHERE c.tenant_id = s.tenant_id AND c.permission_key = s.permission_key
        """
    )
    op.execute("ALTER TABLE tools FORCE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE corpus_stats FORCE ROW LEVEL SECURITY")


def upgrade() -> None:
    op.execute(MODEL_SCHEMA)
    op.execute(DEFINITION)
    _recount(_costs_now)


def downgrade() -> None:
    op.execute(DEFINITION_0008)
    op.execute("DROP FUNCTION toolsift_model_schema(jsonb)")
    _recount(_costs_before)
