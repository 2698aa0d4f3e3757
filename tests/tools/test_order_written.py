"""A tool's schemas keep the order they were written in: served, read back and hashed.

jsonb would store `{"query", "filter_expression", "limit", "id"}` as `id`, `limit`, `query`,
`filter_expression` (shortest key first): the model would read the parameters in an order
nobody wrote, and most often not the author's order of importance.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.factories import Caller, agent_key
from tests.fixtures.jsontext import served_tools
from toolsift.tools.schemas import ANNOTATION_HINTS

# Neither sorted nor in jsonb's order, at the top and one level down.
PROPERTIES = {
    "query": {"description": "What to look for.", "type": "string"},
    "filter_expression": {"type": "string", "description": "Which rows."},
    "limit": {"maximum": 50, "type": "integer", "minimum": 1},
    "id": {"type": "string"},
}
SCHEMA = {"properties": PROPERTIES, "type": "object", "required": ["query"]}
OUTPUT = {"type": "object", "properties": {"total": {"type": "number"}, "rows": {"type": "array"}}}
ANNOTATIONS = {"readOnlyHint": True, "openWorldHint": False, "idempotentHint": True}
QUERY = "search the orders"


def order(value: Any) -> Any:
    """Every object's keys in order, all the way down."""
    if isinstance(value, dict):
        return [(key, order(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [order(item) for item in value]
    return value


def served_schema(definition: dict[str, Any], fmt: str) -> dict[str, Any]:
    if fmt == "anthropic":
        return definition["input_schema"]  # type: ignore[no-any-return]
    if fmt == "openai":
        return definition["function"]["parameters"]  # type: ignore[no-any-return]
    if fmt == "openai_responses":
        return definition["parameters"]  # type: ignore[no-any-return]
    return definition["inputSchema"]  # type: ignore[no-any-return]


TOOL = {
    "name": "search_orders",
    "description": "Search the orders.",
    "input_schema": SCHEMA,
    "output_schema": OUTPUT,
    "annotations": ANNOTATIONS,
}


@pytest.fixture
def created(admin: Caller) -> dict[str, Any]:
    return admin.ok(admin.post("/admin/v1/tools", TOOL), 201)  # type: ignore[no-any-return]


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "openai_responses", "mcp"])
def test_the_model_is_served_the_schema_in_the_order_written(
    admin: Caller, created: dict[str, Any], fmt: str
) -> None:
    agent = agent_key(admin, [])
    body = agent.ok(agent.select(QUERY, mode="bm25", format=fmt))
    (definition,) = body["tools"]
    assert order(served_schema(definition, fmt)) == order(SCHEMA)
    if fmt == "mcp":
        assert order(definition["outputSchema"]) == order(OUTPUT)
        assert order(definition["annotations"]) == order(ANNOTATIONS)


def test_an_admin_reads_back_what_was_written(admin: Caller, created: dict[str, Any]) -> None:
    assert order(created["input_schema"]) == order(SCHEMA)
    read = admin.ok(admin.get(f"/admin/v1/tools/{created['id']}"))
    assert order(read["input_schema"]) == order(SCHEMA)
    assert order(read["output_schema"]) == order(OUTPUT)
    assert order(read["annotations"]) == order(ANNOTATIONS)


def test_a_change_elsewhere_keeps_the_order(admin: Caller, created: dict[str, Any]) -> None:
    patched = admin.ok(
        admin.patch(f"/admin/v1/tools/{created['id']}", {"description": "Search all orders."})
    )
    assert patched["version"] == 2
    assert order(patched["input_schema"]) == order(SCHEMA)
    agent = agent_key(admin, [])
    (definition,) = agent.ok(agent.select(QUERY, mode="bm25", format="mcp"))["tools"]
    assert order(definition["inputSchema"]) == order(SCHEMA)


def test_a_new_order_is_a_new_version_and_the_same_order_is_not(
    admin: Caller, created: dict[str, Any]
) -> None:
    same = admin.ok(admin.put("/admin/v1/tools", {"tools": [TOOL]}))
    assert (same["unchanged"], same["updated"]) == (1, 0)
    reordered = {**SCHEMA, "properties": dict(reversed(PROPERTIES.items()))}
    result = admin.ok(
        admin.put("/admin/v1/tools", {"tools": [{**TOOL, "input_schema": reordered}]})
    )
    assert (result["unchanged"], result["updated"]) == (0, 1)
    read = admin.ok(admin.get(f"/admin/v1/tools/{created['id']}"))
    assert read["version"] == 2
    assert read["content_hash"] != created["content_hash"]
    agent = agent_key(admin, [])
    (definition,) = agent.ok(agent.select(QUERY, mode="bm25"))["tools"]
    assert list(definition["input_schema"]["properties"]) == list(reversed(PROPERTIES))


# Any text a tool may store: no NUL, no lone surrogate (refused at input, `kit.text`).
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
_KEYS = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=12,
)
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=8,
)
_PROPERTIES = st.dictionaries(
    _KEYS,
    st.fixed_dictionaries(
        {"type": st.just("string")}, optional={"default": _JSON, "description": _TEXT}
    ),
    min_size=1,
    max_size=5,
)


# Keys MCP's ToolAnnotations types (hints are booleans, a title a string) are checked at
# input: any other key holds any JSON.
_ANNOTATIONS = st.dictionaries(
    _KEYS.filter(lambda key: key not in (*ANNOTATION_HINTS, "title")), _JSON, max_size=3
)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(properties=_PROPERTIES, annotations=_ANNOTATIONS)
def test_any_schema_comes_back_and_is_served_as_written(
    admin: Caller, properties: dict[str, Any], annotations: dict[str, Any]
) -> None:
    """Random keys (any script, any order), numbers and nesting: read back and served
    byte for byte as JSON says them, and the budget counts exactly what is served."""
    schema = {"type": "object", "properties": properties}
    tool = {
        "name": "anything",
        "description": "Anything at all.",
        "input_schema": schema,
        "annotations": annotations,
        "core": True,  # chosen by every select, whatever the query
    }
    admin.ok(admin.put("/admin/v1/tools", {"tools": [tool]}))
    (read,) = admin.ok(admin.get("/admin/v1/tools"))["items"]
    assert json.dumps(read["input_schema"]) == json.dumps(schema)
    assert json.dumps(read["annotations"]) == json.dumps(annotations)
    agent = agent_key(admin, [], name=f"agent-{read['version']}")
    for fmt in ("mcp", "anthropic"):
        response = agent.select("anything", mode="bm25", format=fmt, budget_tokens=200_000)
        body = response.json()
        (served,) = body["tools"]
        key = "inputSchema" if fmt == "mcp" else "input_schema"
        assert json.dumps(served[key]) == json.dumps(schema)
        wire = served_tools(response.text)
        assert body["tokens"] == math.ceil(len(wire[1:-1].encode()) / 4) == read["token_costs"][fmt]
