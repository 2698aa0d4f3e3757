"""Every list's cursor goes back pasted into a URL as it is, and a bad one is a 422 naming it."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response

from tests.conftest import OPERATOR_KEY
from tests.fixtures.factories import new_tenant, tool_body
from toolsift.db import Database

OPERATOR = {"Authorization": f"Bearer {OPERATOR_KEY}"}

# Each paginated list: its path and the query parameter its `next_cursor` goes back in.
LISTS = {
    "tools": ("/admin/v1/tools", "after"),
    "audit": ("/admin/v1/audit", "before"),
    "tenants": ("/admin/v1/tenants", "after"),
}


@pytest.fixture
def get(client: TestClient, database: Database) -> Callable[[str], Response]:
    """GET as the list's caller, with a tenant whose catalog and audit log fill pages."""
    admin = new_tenant(client, database, "acme")
    for i in range(5):
        admin.ok(admin.post("/admin/v1/tools", tool_body(f"tool_{i}", f"Tool {i}.")), 201)
    for name in ("globex", "initech", "umbrella", "hooli"):
        new_tenant(client, database, name)

    def call(url: str) -> Response:
        headers = OPERATOR if url.startswith(LISTS["tenants"][0]) else admin.headers
        return client.get(url, headers=headers)

    return call


def pages(get: Callable[[str], Response], path: str, param: str) -> list[list[Any]]:
    """Every page of two items, each URL built by hand with the cursor pasted unencoded."""
    found: list[list[Any]] = []
    url = f"{path}?limit=2"
    while True:
        response = get(url)
        assert response.status_code == 200, response.text
        page = response.json()
        found.append([item["id"] for item in page["items"]])
        if page["next_cursor"] is None:
            return found
        url = f"{path}?limit=2&{param}={page['next_cursor']}"


@pytest.mark.parametrize("name", LISTS)
def test_every_item_comes_once_through_cursors_pasted_into_the_url(
    get: Callable[[str], Response], name: str
) -> None:
    path, param = LISTS[name]
    everything = [item["id"] for item in get(f"{path}?limit=1000").json()["items"]]
    found = pages(get, path, param)
    assert len(found) >= 3
    assert [item for page in found for item in page] == everything


@pytest.mark.parametrize("name", ["audit", "tenants"])
@pytest.mark.parametrize("plus", ["+", " ", "%2B"])
def test_a_cursor_of_the_earlier_text_form_still_pages(
    get: Callable[[str], Response], name: str, plus: str
) -> None:
    """`<time>~<id>` (audit) and `<time>_<id>` (tenants), the `+` sent as it is, as the
    space it decodes to, or encoded."""
    path, param = LISTS[name]
    everything = get(f"{path}?limit=1000").json()["items"]
    last = everything[1]
    at = datetime.fromisoformat(last["created_at"]).isoformat()
    assert at.endswith("+00:00")
    old = f"{at}{'~' if name == 'audit' else '_'}{last['id']}".replace("+", plus)
    rest = get(f"{path}?limit=1000&{param}={old}")
    assert rest.status_code == 200, rest.text
    assert [t["id"] for t in rest.json()["items"]] == [t["id"] for t in everything[2:]]


@pytest.mark.parametrize("name", LISTS)
@pytest.mark.parametrize(
    "cursor",
    [
        "nonsense",
        "-1x",
        "A" * 34,  # a token's shape, not a token
        "2026-12-05T02:39:55.851016~not-a-uuid",
        "2026-12-05T02:39:55.851016_0b8f5c3e-6d1a-4e2b-9a7c-2f4e8d1b3c5a",  # no time zone
    ],
)
def test_a_bad_cursor_is_a_422_naming_the_parameter(
    get: Callable[[str], Response], name: str, cursor: str
) -> None:
    path, param = LISTS[name]
    response = get(f"{path}?{param}={cursor}")
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("validation_error", param)


def test_a_cursor_of_one_list_is_refused_by_another(get: Callable[[str], Response]) -> None:
    audit = get("/admin/v1/audit?limit=1").json()["next_cursor"]
    tenants = get("/admin/v1/tenants?limit=1").json()["next_cursor"]
    assert get(f"/admin/v1/tenants?after={audit}").status_code == 422
    assert get(f"/admin/v1/audit?before={tenants}").status_code == 422


def test_cursors_need_no_encoding(get: Callable[[str], Response]) -> None:
    for name in ("audit", "tenants"):
        cursor = get(f"{LISTS[name][0]}?limit=1").json()["next_cursor"]
        assert re.fullmatch(r"[A-Za-z0-9_-]+", cursor), cursor
