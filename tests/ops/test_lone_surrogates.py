"""Lone surrogates: a JSON escape such as "\\ud800" is valid JSON yet no character, and no
UTF-8 encoder (psycopg's included) can send it. Stored fields refuse it with a 422 naming the
field; query text scrubs it like NUL. Both used to reach PostgreSQL's driver: a 500."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response

from tests.fixtures.factories import PARAMETERS, Caller

LONE = "\ud800"


def _send(caller: Caller, method: str, path: str, body: Any) -> Response:
    client: TestClient = caller.client
    return client.request(
        method,
        path,
        content=json.dumps(body, ensure_ascii=True).encode(),  # "\ud800" on the wire
        headers={**caller.headers, "content-type": "application/json"},
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "t", "description": f"refund{LONE}policy"}, "description"),
        ({"name": "t", "description": "x", "examples": [f"a{LONE}"]}, "examples"),
        (
            {"name": "t", "description": "x", "input_schema": {**PARAMETERS, "title": LONE}},
            "input_schema",
        ),
        (
            {
                "name": "t",
                "description": "x",
                "input_schema": {"type": "object", "properties": {f"k{LONE}": {}}},
            },
            "input_schema",
        ),
    ],
)
def test_stored_fields_refuse_them_naming_the_field(
    admin: Caller, catalog: dict[str, str], body: dict[str, Any], field: str
) -> None:
    before = admin.ok(admin.get("/admin/v1/tools", params={"limit": 1000}))
    response = _send(admin, "POST", "/admin/v1/tools", body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field
    # pydantic's own words for a plain string field, ours inside lists and JSON.
    assert "surrogate" in error["message"] or "unicode" in error["message"]
    assert admin.ok(admin.get("/admin/v1/tools", params={"limit": 1000})) == before


def test_tenant_settings_refuse_them(admin: Caller) -> None:
    response = _send(admin, "PATCH", "/admin/v1/tenant", {"settings": {"note": LONE}})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "settings"


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": f"refund {LONE} payment"}],
        [{"role": "user", "content": [{"type": "text", "text": f"refund{LONE}payment"}]}],
    ],
)
def test_message_text_is_scrubbed(support_agent: Caller, messages: list[dict[str, Any]]) -> None:
    response = _send(support_agent, "POST", "/v1/select", {"messages": messages, "debug": True})
    assert response.status_code == 200, response.text
    body = response.json()
    assert LONE not in body["query"]
    assert "issue_refund" in [t["name"] for t in body["tools"]]
