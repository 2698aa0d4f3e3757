"""Bad input: a clear 4xx naming the field, and nothing written; odd text is only text."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from httpx import Response
from psycopg import sql

from tests.conftest import OPERATOR_KEY
from tests.fixtures.factories import PARAMETERS, SUPPORT_CATALOG, Caller, tool_body
from toolsift.models import Base
from toolsift.selection.service import argument_errors

TOOLS = "/admin/v1/tools"
SELECT = "/v1/select"
PERMISSIONS = "/admin/v1/permissions"
ROLES = "/admin/v1/roles"
KEYS = "/admin/v1/keys"
TENANT = "/admin/v1/tenant"
USER = {"role": "user", "content": "where is my order"}

OwnerConn = psycopg.Connection[tuple[object, ...]]
Unchanged = Callable[[], AbstractContextManager[None]]


def counts(owner_conn: OwnerConn) -> dict[str, object]:
    """Rows in every table, read as the owner (past row-level security)."""
    query = sql.SQL("SELECT count(*) FROM {}")
    result: dict[str, object] = {}
    for table in Base.metadata.sorted_tables:
        row = owner_conn.execute(query.format(sql.Identifier(table.name))).fetchone()
        assert row is not None
        result[table.name] = row[0]
    return result


def selection_logs(owner_conn: OwnerConn) -> int:
    row = owner_conn.execute("SELECT count(*) FROM selection_logs").fetchone()
    assert row is not None
    return int(str(row[0]))


def snapshot(admin: Caller, owner_conn: OwnerConn) -> dict[str, Any]:
    """Everything an admin can see, and every table's size."""
    return {
        "tools": admin.ok(admin.get(TOOLS, params={"limit": 1000, "include_deleted": True})),
        "permissions": admin.ok(admin.get(PERMISSIONS)),
        "roles": admin.ok(admin.get(ROLES)),
        "keys": admin.ok(admin.get(KEYS)),
        "tenant": admin.ok(admin.get(TENANT)),
        "rows": counts(owner_conn),
    }


@pytest.fixture
def unchanged(admin: Caller, catalog: dict[str, str], owner_conn: OwnerConn) -> Unchanged:
    """`with unchanged(): ...` asserts the block wrote nothing anywhere."""

    @contextmanager
    def check() -> Iterator[None]:
        before = snapshot(admin, owner_conn)
        yield
        assert snapshot(admin, owner_conn) == before

    return check


def refused(response: Response, status: int, field: str | None = None) -> dict[str, Any]:
    """A JSON error of this status; `field` (when given) is named by `error.field`."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = response.json()["error"]
    assert error["code"]
    assert error["message"]
    if field is not None:
        assert error.get("field") == field, error
    return error


def raw(caller: Caller, method: str, path: str, content: bytes | str) -> Response:
    headers = {**caller.headers, "Content-Type": "application/json"}
    return caller.client.request(method, path, content=content, headers=headers)


def select_body(**fields: Any) -> dict[str, Any]:
    return {"messages": [USER], **fields}


class TestMalformedJson:
    @pytest.mark.parametrize(
        "content", ['{"messages": [', "not json", '{"messages": [] ,}', "{'k': 1}", "\x00"]
    )
    def test_is_400_malformed_json(
        self, support_agent: Caller, unchanged: Unchanged, content: str
    ) -> None:
        with unchanged():
            error = refused(raw(support_agent, "POST", SELECT, content), 400, "body")
        assert error["code"] == "malformed_json"

    @pytest.mark.parametrize(
        ("method", "path"), [("POST", TOOLS), ("PUT", TOOLS), ("POST", PERMISSIONS), ("POST", KEYS)]
    )
    def test_admin_endpoints_say_malformed_json_too(
        self, admin: Caller, unchanged: Unchanged, method: str, path: str
    ) -> None:
        with unchanged():
            error = refused(raw(admin, method, path, '{"name": "x"'), 400, "body")
        assert error["code"] == "malformed_json"

    def test_deeply_nested_json_is_a_clear_4xx(
        self, support_agent: Caller, unchanged: Unchanged
    ) -> None:
        with unchanged():
            refused(raw(support_agent, "POST", SELECT, "[" * 100_000), 400, "body")
        nested = '{"messages": [{"role": "user", "content": "x"}], "k": ' + "[" * 5000 + "]" * 5000
        with unchanged():
            refused(raw(support_agent, "POST", SELECT, nested + "}"), 400, "body")

    @pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
    @pytest.mark.parametrize(
        ("method", "path", "template"),
        [
            ("POST", SELECT, '{"messages": [{"role": "user", "content": "x"}], "k": %s}'),
            ("POST", TOOLS, '{"name": "n1", "input_schema": {"type": "object", "default": %s}}'),
            ("PUT", TOOLS, '{"tools": [{"name": "n1", "annotations": {"x": %s}}]}'),
            ("PATCH", TENANT, '{"settings": {"custom": %s}}'),
        ],
    )
    def test_non_standard_constants_are_malformed_json(
        self,
        admin: Caller,
        support_agent: Caller,
        unchanged: Unchanged,
        constant: str,
        method: str,
        path: str,
        template: str,
    ) -> None:
        # Python's json module reads them; JSON and PostgreSQL's jsonb do not.
        caller = support_agent if path == SELECT else admin
        with unchanged():
            error = refused(raw(caller, method, path, template % constant), 400, "body")
        assert error["code"] == "malformed_json"

    def test_a_body_that_is_not_utf8_is_400_naming_body(
        self, support_agent: Caller, unchanged: Unchanged
    ) -> None:
        content = b'{"messages": [{"role": "user", "content": "ord\xffer"}]}'
        with unchanged():
            error = refused(raw(support_agent, "POST", SELECT, content), 400, "body")
        assert "UTF-8" in error["message"]

    @pytest.mark.parametrize(
        "media", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
    )
    def test_another_media_type_is_415_naming_the_header(
        self, support_agent: Caller, admin: Caller, unchanged: Unchanged, media: str
    ) -> None:
        body = json.dumps(select_body()).encode()
        with unchanged():
            for caller, path in [(support_agent, SELECT), (admin, PERMISSIONS)]:
                headers = {**caller.headers, "Content-Type": media}
                response = caller.client.post(path, content=body, headers=headers)
                error = refused(response, 415, "Content-Type")
                assert error["code"] == "unsupported_media_type"

    def test_json_media_types_with_parameters_are_read(self, support_agent: Caller) -> None:
        body = json.dumps(select_body()).encode()
        for media in ["application/json; charset=utf-8", "APPLICATION/JSON", "application/x+json"]:
            headers = {**support_agent.headers, "Content-Type": media}
            response = support_agent.client.post(SELECT, content=body, headers=headers)
            assert response.status_code == 200, (media, response.text)

    def test_a_body_without_a_media_type_is_415_and_no_body_is_the_routes_call(
        self, support_agent: Caller, unchanged: Unchanged
    ) -> None:
        body = json.dumps(select_body()).encode()
        with unchanged():
            response = support_agent.client.post(
                SELECT, content=body, headers=support_agent.headers
            )
            refused(response, 415, "Content-Type")
            refused(support_agent.client.post(SELECT, headers=support_agent.headers), 422, "body")

    def test_a_json_array_instead_of_an_object_is_422(
        self, support_agent: Caller, unchanged: Unchanged
    ) -> None:
        with unchanged():
            refused(raw(support_agent, "POST", SELECT, "[]"), 422, "body")

    def test_an_empty_body_is_422(self, support_agent: Caller, unchanged: Unchanged) -> None:
        with unchanged():
            refused(raw(support_agent, "POST", SELECT, b""), 422, "body")


class TestSelectRequestValidation:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({}, "messages"),
            ({"k": 3}, "messages"),
            ({"messages": [{"content": "hi"}]}, "messages[0].role"),
            # A Responses API message item says who speaks too; an item's type is a name.
            ({"messages": [{"type": "message", "content": "hi"}]}, "messages[0].role"),
            ({"messages": [USER, {"type": "Function Call", "name": "x"}]}, "messages[1].type"),
            ({"messages": [{"role": "user", "parts": "hi"}]}, "messages[0].parts"),
            (
                {"messages": [{"role": "user", "parts": [{"text": "hi"}, "hi"]}]},
                "messages[0].parts",
            ),
            ({"messages": [USER, {"role": "wizard", "content": "x"}]}, "messages[1].role"),
            ({"messages": "where is my order"}, "messages"),
            ({"messages": [USER], "k": "five"}, "k"),
            ({"messages": [USER], "k": 2.5}, "k"),
            ({"messages": [USER], "budget_tokens": "lots"}, "budget_tokens"),
            ({"messages": [USER], "roles": "support"}, "roles"),
            # A name no role can have: refused before it reaches the database.
            ({"messages": [USER], "roles": ["support", "a\u0000b"]}, "roles[1]"),
            ({"messages": [USER], "roles": ["x'; DROP TABLE roles; --"]}, "roles[0]"),
            ({"messages": [USER], "task": "ship it"}, "task"),
            ({"messages": [USER], "task": {"plan": 5}}, "task.plan"),
            ({"messages": [USER], "task": {"recent_tools": "order_status"}}, "task.recent_tools"),
            ({"messages": [USER], "debug": "maybe"}, "debug"),
            # Strict: what lax parsing would coerce is refused too.
            ({"messages": [USER], "k": "2"}, "k"),
            ({"messages": [USER], "k": True}, "k"),
            ({"messages": [USER], "k": 2.0}, "k"),
            ({"messages": [USER], "budget_tokens": "300"}, "budget_tokens"),
            ({"messages": [USER], "debug": "yes"}, "debug"),
            ({"messages": [USER], "debug": 1}, "debug"),
        ],
    )
    def test_missing_and_mistyped_fields_are_named(
        self, support_agent: Caller, unchanged: Unchanged, body: dict[str, Any], field: str
    ) -> None:
        with unchanged():
            error = refused(support_agent.post(SELECT, body), 422, field)
        assert error["code"] == "validation_error"
        assert field in error["message"]

    @pytest.mark.parametrize(
        ("content", "message"),
        [
            (42, "a string or a list of content blocks"),
            ({"type": "text", "text": "hi"}, "a string or a list of content blocks"),
            ([{"type": "text", "text": "hi"}, "hi"], "item 1 is not one"),
        ],
    )
    def test_a_content_of_the_wrong_type_is_one_error_naming_it(
        self, support_agent: Caller, unchanged: Unchanged, content: Any, message: str
    ) -> None:
        body = {"messages": [USER, {"role": "user", "content": content}]}
        with unchanged():
            error = refused(support_agent.post(SELECT, body), 422, "messages[1].content")
        # `content` is a union (text or blocks): not one error per member, under its name.
        assert [e["field"] for e in error["errors"]] == ["messages[1].content"]
        assert message in error["message"]

    @pytest.mark.parametrize("k", [0, -1, 51, 10**6, 10**30])
    def test_k_out_of_range_is_422(
        self, support_agent: Caller, unchanged: Unchanged, k: int
    ) -> None:
        with unchanged():
            refused(support_agent.post(SELECT, select_body(k=k)), 422, "k")

    @pytest.mark.parametrize("budget", [0, -100, 200_001, 10**30])
    def test_budget_out_of_range_is_422(
        self, support_agent: Caller, unchanged: Unchanged, budget: int
    ) -> None:
        with unchanged():
            refused(
                support_agent.post(SELECT, select_body(budget_tokens=budget)), 422, "budget_tokens"
            )

    def test_the_bounds_themselves_are_accepted(self, support_agent: Caller) -> None:
        for body in (select_body(k=1, budget_tokens=1), select_body(k=50, budget_tokens=200_000)):
            assert support_agent.post(SELECT, body).status_code == 200

    @pytest.mark.parametrize(("field", "value"), [("mode", "vector"), ("format", "xml")])
    def test_unknown_mode_or_format_is_422(
        self, support_agent: Caller, unchanged: Unchanged, field: str, value: str
    ) -> None:
        with unchanged():
            error = refused(support_agent.post(SELECT, select_body(**{field: value})), 422, field)
        assert value not in error["message"] or field in error["message"]

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            (select_body(temperature=0.2), "temperature"),
            (select_body(task={"plan": "x", "priority": "high"}), "task.priority"),
        ],
    )
    def test_unknown_extra_fields_are_422(
        self, support_agent: Caller, unchanged: Unchanged, body: dict[str, Any], field: str
    ) -> None:
        with unchanged():
            refused(support_agent.post(SELECT, body), 422, field)

    def test_an_empty_messages_list_is_422(
        self, support_agent: Caller, unchanged: Unchanged
    ) -> None:
        with unchanged():
            refused(support_agent.post(SELECT, {"messages": []}), 422, "messages")

    def test_a_1mb_query_is_413_from_the_body_limit(
        self, support_agent: Caller, unchanged: Unchanged
    ) -> None:
        with unchanged():
            error = refused(support_agent.select("refund " * 150_000), 413, "body")
        assert error["code"] == "payload_too_large"

    def test_an_oversized_streamed_body_is_413_too(
        self, support_agent: Caller, unchanged: Unchanged
    ) -> None:
        body = json.dumps(select_body(task={"plan": "refund " * 150_000})).encode()

        def chunks() -> Iterator[bytes]:
            for start in range(0, len(body), 65_536):
                yield body[start : start + 65_536]

        headers = {**support_agent.headers, "Content-Type": "application/json"}
        with unchanged():
            response = support_agent.client.post(SELECT, content=chunks(), headers=headers)
            assert "content-length" not in response.request.headers
            error = refused(response, 413, "body")
        assert error["code"] == "payload_too_large"

    def test_a_40kb_message_is_422_naming_its_content(
        self, support_agent: Caller, unchanged: Unchanged
    ) -> None:
        with unchanged():
            refused(support_agent.select("x" * 40_000), 422, "messages[0].content")

    def test_a_40kb_text_block_is_422_naming_its_content(
        self, support_agent: Caller, unchanged: Unchanged
    ) -> None:
        block = {"role": "user", "content": [{"type": "text", "text": "x" * 40_000}]}
        with unchanged():
            refused(support_agent.post(SELECT, {"messages": [block]}), 422, "messages[0].content")

    def test_a_long_tool_heavy_conversation_is_served(self, support_agent: Caller) -> None:
        """Only the message the query is read from is bounded: old tool results of 40,000
        characters, in either shape, and hundreds of turns are an ordinary conversation."""
        result = "x" * 40_000
        messages: list[dict[str, Any]] = [USER] * 300
        messages += [
            {"role": "tool", "tool_call_id": "1", "content": result},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "2", "content": result}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": result}]},
            {"role": "user", "content": "where is my order shipping status"},
        ]
        body = support_agent.ok(support_agent.post(SELECT, {"messages": messages}))
        assert "order_status" in [t["name"] for t in body["tools"]]

    def test_the_query_message_is_bounded_even_when_it_is_not_the_last(
        self, support_agent: Caller, unchanged: Unchanged
    ) -> None:
        messages = [
            {"role": "user", "content": "y" * 40_000},
            {"role": "assistant", "content": "on it"},
        ]
        with unchanged():
            error = refused(support_agent.post(SELECT, {"messages": messages}), 422)
        assert error["field"] == "messages[0].content"
        assert "at most 32768 characters" in error["message"]

    def test_a_role_the_key_lacks_is_403_naming_it(
        self, support_agent: Caller, unchanged: Unchanged
    ) -> None:
        body = select_body(roles=["support", "administrator"])
        with unchanged():
            refused(support_agent.post(SELECT, body), 403, "roles[1]")


HOSTILE_QUERIES = [
    "a & b | !c <-> d:*",
    "refund & policy | !shipping <-> order:*",
    "(refund | policy) & !(a <2> b)",
    "'refund' \"policy\" ''' \"\"\"",
    "refund\\policy\\\\ \\' \\x00",
    "refund\u0000policy",
    "\u0000",
    "'; DROP TABLE tools; --",
    "refund'); DELETE FROM tool_terms; --",
    "$1 %s %(x)s {0} :query ::regconfig",
    "refund 🧾💸 política de reembolso 退款政策 возврат",
    "\u202e\u200b\ufeff refund",
    "   ",
    "",
]


class TestQueriesArePlainText:
    @pytest.mark.parametrize("query", HOSTILE_QUERIES)
    def test_is_200_and_the_tools_are_intact(
        self,
        admin: Caller,
        support_agent: Caller,
        owner_conn: OwnerConn,
        query: str,
    ) -> None:
        tools = admin.ok(admin.get(TOOLS, params={"include_deleted": True}))
        rows = counts(owner_conn)
        body = support_agent.ok(support_agent.select(query, debug=True))
        assert "\x00" not in body["query"]
        assert "search_help" in [t["name"] for t in body["tools"]]
        assert admin.ok(admin.get(TOOLS, params={"include_deleted": True})) == tools
        after = counts(owner_conn)
        assert after.pop("selection_logs") == rows.pop("selection_logs") + 1  # type: ignore[operator]
        assert after == rows

    @pytest.mark.parametrize(
        "query",
        [
            "refund & policy",
            "refund | policy",
            "!refund <-> policy:*",
            "refund\u0000policy",
            "'refund' \"policy\"",
            "refund\\policy",
        ],
    )
    def test_operators_are_ignored_and_the_words_still_match(
        self, support_agent: Caller, query: str
    ) -> None:
        assert "refund_policy" in support_agent.names(query, roles=["support"])

    def test_nul_bytes_elsewhere_in_the_turn_are_plain_text(self, support_agent: Caller) -> None:
        body = {
            "messages": [
                {"role": "system", "content": "be\u0000nice"},
                {"role": "user", "content": [{"type": "text", "text": "refund\u0000policy"}]},
            ],
            "task": {"plan": "explain the\u0000refund policy"},
            "debug": True,
        }
        response = support_agent.ok(support_agent.post(SELECT, body))
        assert "\x00" not in response["query"]
        assert "refund_policy" in [t["name"] for t in response["tools"]]

    def test_nul_bytes_in_recent_tool_names_are_plain_text(self, support_agent: Caller) -> None:
        body = select_body(task={"plan": "", "recent_tools": ["order\u0000status"]})
        assert support_agent.post(SELECT, body).status_code == 200

    def test_a_nul_byte_in_an_authorized_tool_name_is_a_clear_answer(
        self, support_agent: Caller
    ) -> None:
        response = support_agent.post("/v1/authorize", {"tool": "order\u0000status"})
        assert response.status_code in (200, 422)

    def test_a_nul_byte_in_an_asserted_role_is_422_naming_it(self, support_agent: Caller) -> None:
        call = {"tool": "order_status", "roles": ["support", "sup\u0000port"]}
        refused(support_agent.post("/v1/authorize", call), 422, "roles[1]")

    def test_sql_in_a_tool_name_of_the_conversation_is_only_a_name(
        self, admin: Caller, support_agent: Caller, owner_conn: OwnerConn
    ) -> None:
        rows = counts(owner_conn)
        call = {"type": "tool_use", "id": "t1", "name": "x'); DROP TABLE tools; --", "input": {}}
        body = {"messages": [{"role": "assistant", "content": [call]}, USER]}
        assert support_agent.post(SELECT, body).status_code == 200
        assert counts(owner_conn)["tools"] == rows["tools"]


class TestToolValidation:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"description": "no name"}, "name"),
            ({"name": "has space"}, "name"),
            ({"name": "x" * 65}, "name"),
            ({"name": ""}, "name"),
            ({"name": "dotted.name"}, "name"),
            ({"name": "émoji🙂"}, "name"),
            ({"name": 5}, "name"),
            ({"name": "t", "description": 5}, "description"),
            ({"name": "t", "description": "x" * 10_001}, "description"),
            ({"name": "t", "title": "x" * 201}, "title"),
            ({"name": "t", "examples": "where is it"}, "examples"),
            ({"name": "t", "examples": ["x"] * 51}, "examples"),
            ({"name": "t", "examples": ["x" * 1001]}, "examples"),
            ({"name": "t", "core": "maybe"}, "core"),
            ({"name": "t", "required_permission": "has space"}, "required_permission"),
            ({"name": "t", "parameters": {}}, "parameters"),
            ({"name": "t", "input_schema": "object"}, "input_schema"),
            ({"name": "t", "annotations": {"readOnlyHint": "yes"}}, "annotations"),
            ({"name": "t", "annotations": {"destructiveHint": 1}}, "annotations"),
            ({"name": "t", "annotations": {"title": 5}}, "annotations"),
            ({"name": "t", "input_schema": []}, "input_schema"),
            ({"name": "t", "input_schema": {"type": "object", "properties": 5}}, "input_schema"),
            ({"name": "t", "input_schema": {"type": "objekt"}}, "input_schema"),
            ({"name": "t", "input_schema": {"type": "string"}}, "input_schema"),
            ({"name": "t", "input_schema": {"type": ["object", "null"]}}, "input_schema"),
            ({"name": "t", "input_schema": {"properties": {}}}, "input_schema"),
            (
                {"name": "t", "input_schema": {"type": "object", "required": "order_id"}},
                "input_schema",
            ),
            (
                {"name": "t", "input_schema": {"type": "object", "pad": "x" * 70_000}},
                "input_schema",
            ),
            (
                {"name": "t", "input_schema": {**PARAMETERS, "$ref": "http://127.0.0.1:9/s.json"}},
                "input_schema",
            ),
            (
                {"name": "t", "input_schema": {"type": "object", "$ref": "#/$defs/missing"}},
                "input_schema",
            ),
            (
                {
                    "name": "t",
                    "input_schema": {
                        "type": "object",
                        "properties": {"a": {"$id": "https://e.example/a", "$ref": "b.json"}},
                    },
                },
                "input_schema",
            ),
        ],
    )
    def test_create_names_the_bad_field(
        self, admin: Caller, unchanged: Unchanged, body: dict[str, Any], field: str
    ) -> None:
        with unchanged():
            refused(admin.post(TOOLS, body), 422, field)

    def test_a_64_character_name_is_accepted(self, admin: Caller) -> None:
        assert admin.post(TOOLS, {"name": "x" * 64}).status_code == 201

    def test_local_references_are_accepted_and_used(
        self, admin: Caller, support_agent: Caller
    ) -> None:
        schema = {
            "type": "object",
            "$defs": {"id": {"type": "string", "pattern": "^[0-9]+$"}},
            "properties": {"order_id": {"$ref": "#/$defs/id"}, "again": {"$ref": "#"}},
            "required": ["order_id"],
        }
        admin.ok(admin.post(TOOLS, {"name": "ref_tool", "input_schema": schema}), 201)
        call = {"tool": "ref_tool", "arguments": {"order_id": "12"}}
        assert support_agent.ok(support_agent.post("/v1/authorize", call))["allowed"] is True
        call = {"tool": "ref_tool", "arguments": {"order_id": "twelve"}}
        verdict = support_agent.ok(support_agent.post("/v1/authorize", call))
        assert verdict["allowed"] is False
        assert verdict["errors"]

    def test_a_pattern_built_to_backtrack_cannot_hold_the_api(
        self, admin: Caller, support_agent: Caller
    ) -> None:
        """`^(a+)+$` against 40 a's and a "!" is about 2^40 steps in a backtracking engine;
        a pattern that needs backtracking for its backreference hits the engine's limit and
        the call is refused (a check that could not finish is not a pass)."""
        import threading

        properties = {
            "nested": {"type": "string", "pattern": "^(a+)+$"},
            "backref": {"type": "string", "pattern": "^(a|aa)+\\1$"},
        }
        schema = {"type": "object", "properties": properties}
        admin.ok(admin.post(TOOLS, {"name": "regex_tool", "input_schema": schema}), 201)
        verdicts: dict[str, Any] = {}

        def check(field: str) -> None:
            call = {"tool": "regex_tool", "arguments": {field: "a" * 40 + "!"}}
            verdicts[field] = support_agent.ok(support_agent.post("/v1/authorize", call))

        for field in properties:
            checking = threading.Thread(target=check, args=(field,), daemon=True)
            checking.start()
            checking.join(timeout=60)
            assert not checking.is_alive(), f"{field}: the check did not finish"
            assert verdicts[field]["allowed"] is False
            assert [e.split(":")[0] for e in verdicts[field]["errors"]] == [field]
        call = {"tool": "regex_tool", "arguments": {"nested": "aaaa", "backref": "aaa"}}
        assert support_agent.ok(support_agent.post("/v1/authorize", call))["allowed"] is True

    @pytest.mark.parametrize(
        "schema",
        [
            {"type": "object", "$ref": "#"},
            {
                "type": "object",
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                "properties": {"x": {"$ref": "#/$defs/a"}},
            },
        ],
    )
    def test_references_that_loop_are_checked_without_a_500(
        self, admin: Caller, support_agent: Caller, schema: dict[str, Any]
    ) -> None:
        admin.ok(admin.post(TOOLS, {"name": "loop_tool", "input_schema": schema}), 201)
        call = {"tool": "loop_tool", "arguments": {"x": 1}}
        response = support_agent.post("/v1/authorize", call)
        assert response.status_code == 200, response.text
        assert isinstance(response.json()["allowed"], bool)

    @pytest.mark.parametrize("depth", [65, 300, 900])
    def test_arguments_nested_past_the_limit_are_refused_naming_them(
        self, support_agent: Caller, depth: int
    ) -> None:
        """The validator's recursion ends near 256 levels, in a ValueError that was a 500."""
        arguments = {"x": json.loads("[" * depth + "]" * depth)}
        answer = refused(
            support_agent.post("/v1/authorize", {"tool": "search_help", "arguments": arguments}),
            422,
            "arguments",
        )
        assert "64 levels" in answer["message"]
        nested = {"x": json.loads("[" * 63 + "]" * 63)}
        call = {"tool": "search_help", "arguments": nested}
        assert support_agent.post("/v1/authorize", call).status_code == 200

    def test_a_check_the_validator_cannot_finish_refuses_the_call(self) -> None:
        deep = json.loads("[" * 300 + "]" * 300)
        schema = {"type": "object", "properties": {"x": {"type": "string"}}}
        errors = argument_errors(schema, {"x": deep})
        assert errors
        assert errors[0].startswith("(root): the arguments could not be checked")

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"name": "t", "description": "refund\u0000policy"}, "description"),
            ({"name": "t", "title": "\u0000"}, "title"),
            ({"name": "t", "examples": ["ok", "bad\u0000"]}, "examples"),
            (
                {"name": "t", "input_schema": {**PARAMETERS, "description": "a\u0000b"}},
                "input_schema",
            ),
            (
                {"name": "t", "input_schema": {"type": "object", "properties": {"a\u0000": {}}}},
                "input_schema",
            ),
        ],
    )
    def test_a_nul_byte_in_a_stored_field_is_422(
        self, admin: Caller, unchanged: Unchanged, body: dict[str, Any], field: str
    ) -> None:
        with unchanged():
            error = refused(admin.post(TOOLS, body), 422, field)
        assert "NUL" in error["message"]

    @pytest.mark.parametrize("value", ["yes", "true", 1, 0, "false"])
    def test_core_takes_only_a_json_boolean(
        self, admin: Caller, unchanged: Unchanged, value: object
    ) -> None:
        """`"yes"` once made a tool core, and so sent in every select of every caller."""
        with unchanged():
            refused(admin.post(TOOLS, {"name": "t", "core": value}), 422, "core")
        created = admin.ok(admin.post(TOOLS, {"name": "t"}), 201)
        with unchanged():
            refused(admin.patch(f"{TOOLS}/{created['id']}", {"core": value}), 422, "core")

    def test_a_schema_nested_past_the_limit_is_422_and_one_within_it_is_served(
        self, admin: Caller, unchanged: Unchanged
    ) -> None:
        def nested(levels: int) -> dict[str, Any]:
            leaf: dict[str, Any] = {}
            for _ in range(levels):
                leaf = {"type": "array", "items": leaf}
            return {"type": "object", "properties": {"a": leaf}}

        # The root is level 0, `properties` 1, `a` 2: nested(62) puts a container at 64.
        with unchanged():
            error = refused(admin.post(TOOLS, {"name": "deep", "input_schema": nested(62)}), 422)
        assert error["field"] == "input_schema"
        assert "nested more than 64 levels" in error["message"]
        with unchanged():
            refused(admin.patch(TENANT, {"settings": {"x": nested(70)}}), 422, "settings")
        created = admin.post(TOOLS, {"name": "deep", "input_schema": nested(61)})
        tool = admin.ok(created, 201)
        assert admin.ok(admin.get(f"{TOOLS}/{tool['id']}"))["input_schema"] == nested(61)
        assert "deep" in [t["name"] for t in admin.ok(admin.get(TOOLS))["items"]]

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"name": "renamed"}, "name"),
            ({"description": 5}, "description"),
            ({"description": "x" * 10_001}, "description"),
            ({"input_schema": {"type": "object", "properties": 5}}, "input_schema"),
            ({"input_schema": {"type": "array"}}, "input_schema"),
            ({"examples": ["x" * 1001]}, "examples"),
            ({"examples": ["x"] * 51}, "examples"),
            ({"required_permission": "no.such.permission"}, "required_permission"),
            ({"required_permission": "has space"}, "required_permission"),
            ({"core": "maybe"}, "core"),
            ({"description": "bad\u0000"}, "description"),
        ],
    )
    def test_patch_names_the_bad_field(
        self,
        admin: Caller,
        catalog: dict[str, str],
        unchanged: Unchanged,
        body: dict[str, Any],
        field: str,
    ) -> None:
        with unchanged():
            refused(admin.patch(f"{TOOLS}/{catalog['order_status']}", body), 422, field)

    def test_a_patch_body_that_is_not_an_object_is_422(
        self, admin: Caller, catalog: dict[str, str], unchanged: Unchanged
    ) -> None:
        with unchanged():
            refused(admin.patch(f"{TOOLS}/{catalog['order_status']}", ["core"]), 422, "body")


def bulk(*extra: dict[str, Any]) -> dict[str, Any]:
    """The catalog with one description changed, plus new tools: a write if it went through."""
    tools = [tool_body(*t) for t in SUPPORT_CATALOG]
    tools[0] = {**tools[0], "description": "changed"}
    return {"tools": [*tools, *extra]}


class TestBulkUpsertValidation:
    def test_duplicate_names_are_422_naming_the_second_and_write_nothing(
        self, admin: Caller, unchanged: Unchanged
    ) -> None:
        body = bulk(tool_body("brand_new", "a"), tool_body("brand_new", "b"))
        with unchanged():
            error = refused(admin.put(TOOLS, body), 422, "tools[7].name")
        assert "brand_new" in error["message"]

    def test_a_duplicate_of_an_existing_name_is_422_too(
        self, admin: Caller, unchanged: Unchanged
    ) -> None:
        body = bulk(tool_body("order_status", "twice"))
        with unchanged():
            refused(admin.put(TOOLS, body), 422, "tools[6].name")

    @pytest.mark.parametrize(
        ("item", "field"),
        [
            ({"name": "bad name"}, "tools[3].name"),
            ({"name": "t", "input_schema": {"type": "string"}}, "tools[3].input_schema"),
            (
                {"name": "t", "required_permission": "no.such.permission"},
                "tools[3].required_permission",
            ),
            ({"name": "t", "unknown": 1}, "tools[3].unknown"),
            ({"name": "t", "description": "nul\u0000"}, "tools[3].description"),
            ("not an object", "tools[3]"),
        ],
    )
    def test_an_invalid_fourth_item_writes_nothing(
        self, admin: Caller, unchanged: Unchanged, item: Any, field: str
    ) -> None:
        tools = [tool_body("new_0", "zero"), tool_body("new_1", "one"), bulk()["tools"][0], item]
        with unchanged():
            refused(admin.put(TOOLS, {"tools": tools}), 422, field)

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({}, "tools"),
            ({"tools": []}, "tools"),
            ({"tools": {"name": "t"}}, "tools"),
            ({"tools": [{"name": f"t{i}"} for i in range(1001)]}, "tools"),
            ({**bulk(), "mode": "replace"}, "mode"),
        ],
    )
    def test_a_bad_envelope_writes_nothing(
        self, admin: Caller, unchanged: Unchanged, body: dict[str, Any], field: str
    ) -> None:
        with unchanged():
            refused(admin.put(TOOLS, body), 422, field)


class TestPathAndQueryValidation:
    @pytest.mark.parametrize(
        ("method", "path", "field"),
        [
            ("GET", f"{TOOLS}/not-a-uuid", "tool_id"),
            ("PATCH", f"{TOOLS}/123", "tool_id"),
            ("DELETE", f"{TOOLS}/00000000-0000-0000-0000-00000000000g", "tool_id"),
            ("GET", f"{PERMISSIONS}/x", "permission_id"),
            ("DELETE", f"{PERMISSIONS}/x", "permission_id"),
            ("GET", f"{ROLES}/x", "role_id"),
            ("PATCH", f"{ROLES}/x", "role_id"),
            ("DELETE", f"{ROLES}/x", "role_id"),
            ("PUT", f"{ROLES}/x/permissions/crm.read", "role_id"),
            ("GET", f"{KEYS}/x", "key_id"),
            ("DELETE", f"{KEYS}/x", "key_id"),
        ],
    )
    def test_an_invalid_uuid_in_the_path_is_422(
        self, admin: Caller, unchanged: Unchanged, method: str, path: str, field: str
    ) -> None:
        with unchanged():
            response = admin.client.request(method, path, headers=admin.headers, json={})
            refused(response, 422, field)

    @pytest.mark.parametrize(
        ("params", "field"),
        [
            ({"limit": 0}, "limit"),
            ({"limit": 5000}, "limit"),
            ({"limit": -1}, "limit"),
            ({"limit": "ten"}, "limit"),
            ({"after": -2}, "after"),
            ({"after": "cursor"}, "after"),
            ({"after": 2**63}, "after"),
            ({"include_deleted": "maybe"}, "include_deleted"),
        ],
    )
    def test_bad_list_parameters_are_422(
        self, admin: Caller, catalog: dict[str, str], params: dict[str, Any], field: str
    ) -> None:
        refused(admin.get(TOOLS, params=params), 422, field)

    @pytest.mark.parametrize(
        ("method", "path", "params", "message"),
        [
            # The audit log pages with `before`: `after` returned the first page forever.
            ("GET", "/admin/v1/audit", {"after": "x"}, "unknown query parameter 'after'"
             " (it takes before, limit)"),
            ("GET", TOOLS, {"bogus": "1"}, "unknown query parameter 'bogus'"),
            ("DELETE", f"{TOOLS}/00000000-0000-0000-0000-000000000000", {"force": "1"},
             "unknown query parameter 'force' (it takes none)"),
            ("POST", SELECT, {"k": "3"}, "unknown query parameter 'k' (it takes none)"),
        ],
    )  # fmt: skip
    def test_an_unknown_query_parameter_is_400_naming_it(
        self,
        admin: Caller,
        support_agent: Caller,
        unchanged: Unchanged,
        method: str,
        path: str,
        params: dict[str, str],
        message: str,
    ) -> None:
        caller = support_agent if path == SELECT else admin
        body = {"messages": [{"role": "user", "content": "order"}]} if path == SELECT else None
        with unchanged():
            response = caller.client.request(
                method, path, headers=caller.headers, params=params, json=body
            )
            error = refused(response, 400, next(iter(params)))
        assert error["message"].startswith(message)

    def test_the_limit_bounds_are_accepted(self, admin: Caller, catalog: dict[str, str]) -> None:
        assert len(admin.ok(admin.get(TOOLS, params={"limit": 1}))["items"]) == 1
        assert len(admin.ok(admin.get(TOOLS, params={"limit": 1000}))["items"]) == 6

    @pytest.mark.parametrize(("method", "path"), [("GET", "/admin/v1/nope"), ("GET", "/v2/select")])
    def test_an_unknown_route_is_404_in_the_error_shape(
        self, admin: Caller, method: str, path: str
    ) -> None:
        refused(admin.client.request(method, path, headers=admin.headers), 404)

    def test_a_wrong_method_is_405_in_the_error_shape(
        self, admin: Caller, unchanged: Unchanged
    ) -> None:
        with unchanged():
            response = admin.client.request("PATCH", TOOLS, headers=admin.headers, json={})
            refused(response, 405)
        # RFC 9110: a 405 lists the methods the path has, here of two routes (list, upsert...).
        assert response.headers["allow"] == "GET, POST, PUT"
        assert admin.client.get("/v1/select").headers["allow"] == "POST"


class TestAccessValidation:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({}, "name"),
            ({"name": ""}, "name"),
            ({"name": "has space"}, "name"),
            ({"name": ".leading"}, "name"),
            ({"name": "x" * 65}, "name"),
            ({"name": "drop'; --"}, "name"),
            ({"name": "ok", "description": "x" * 1001}, "description"),
            ({"name": "ok", "description": "bad\u0000"}, "description"),
            ({"name": "ok", "scope": "admin"}, "scope"),
        ],
    )
    def test_bad_permission_is_422(
        self, admin: Caller, unchanged: Unchanged, body: dict[str, Any], field: str
    ) -> None:
        with unchanged():
            refused(admin.post(PERMISSIONS, body), 422, field)

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"permissions": ["crm.read"]}, "name"),
            ({"name": "r", "permissions": "crm.read"}, "permissions"),
            ({"name": "r", "permissions": [5]}, "permissions[0]"),
            ({"name": "r", "description": "bad\u0000"}, "description"),
            ({"name": "r", "permissions": ["crm.read\u0000"]}, "permissions"),
        ],
    )
    def test_bad_role_is_422(
        self, admin: Caller, unchanged: Unchanged, body: dict[str, Any], field: str
    ) -> None:
        with unchanged():
            refused(admin.post(ROLES, body), 422, field)

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"description": 5}, "description"),
            ({"description": "bad\u0000"}, "description"),
            ({"permissions": ["admin", "nope\u0000"]}, "permissions"),
            ({"name": "renamed"}, "name"),
        ],
    )
    def test_bad_role_patch_is_422(
        self,
        admin: Caller,
        catalog: dict[str, str],
        unchanged: Unchanged,
        body: dict[str, Any],
        field: str,
    ) -> None:
        with unchanged():
            refused(admin.patch(f"{ROLES}/{catalog['support']}", body), 422, field)

    @pytest.mark.parametrize("permission", ["nope%00", "has%20space", "x" * 65, "%27%3B--"])
    def test_a_bad_permission_name_in_a_grant_path_is_422(
        self, admin: Caller, catalog: dict[str, str], unchanged: Unchanged, permission: str
    ) -> None:
        path = f"{ROLES}/{catalog['support']}/permissions/{permission}"
        with unchanged():
            refused(admin.put(path), 422, "permission")
            refused(admin.delete(path), 422, "permission")

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"scope": "agent"}, "name"),
            ({"name": "bot"}, "scope"),
            ({"name": "", "scope": "agent"}, "name"),
            ({"name": "x" * 201, "scope": "agent"}, "name"),
            ({"name": "bot", "scope": "superuser"}, "scope"),
            ({"name": "bot", "scope": "agent", "roles": "support"}, "roles"),
            ({"name": "bot", "scope": "agent", "roles": ["support\u0000"]}, "roles"),
            ({"name": "bot\u0000", "scope": "agent"}, "name"),
            ({"name": "bot", "scope": "agent", "secret": "mine"}, "secret"),
        ],
    )
    def test_bad_key_is_422(
        self, admin: Caller, unchanged: Unchanged, body: dict[str, Any], field: str
    ) -> None:
        with unchanged():
            refused(admin.post(KEYS, body), 422, field)


class TestTenantValidation:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"name": ""}, "name"),
            ({"name": 5}, "name"),
            ({"name": "x" * 201}, "name"),
            ({"name": "bad\u0000"}, "name"),
            ({"settings": "fast"}, "settings"),
            ({"settings": {"note": "bad\u0000"}}, "settings"),
            ({"settings": {"bad\u0000": 1}}, "settings"),
            ({"settings": {"log_retention_days": -5}}, "settings.log_retention_days"),
            ({"settings": {"log_retention_days": "thirty"}}, "settings.log_retention_days"),
            ({"settings": {"log_retention_days": 30.5}}, "settings.log_retention_days"),
            ({"plan": "enterprise"}, "plan"),
        ],
    )
    def test_bad_patch_is_422(
        self, admin: Caller, unchanged: Unchanged, body: dict[str, Any], field: str
    ) -> None:
        with unchanged():
            refused(admin.patch(TENANT, body), 422, field)

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({}, "name"),
            ({"name": ""}, "name"),
            ({"name": "bad\u0000"}, "name"),
            ({"name": "ok", "settings": {}}, "settings"),
        ],
    )
    def test_bad_create_is_422(
        self,
        client: TestClient,
        unchanged: Unchanged,
        body: dict[str, Any],
        field: str,
    ) -> None:
        headers = {"Authorization": f"Bearer {OPERATOR_KEY}"}
        with unchanged():
            refused(client.post("/admin/v1/tenants", json=body, headers=headers), 422, field)
