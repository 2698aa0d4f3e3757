"""An unknown id in a path is a 404 naming the path parameter, as every other bad input names
its field."""

from __future__ import annotations

from uuid import uuid4

import pytest

from tests.fixtures.factories import Caller


@pytest.mark.parametrize(
    ("method", "path", "field"),
    [
        ("get", "/admin/v1/permissions/{}", "permission_id"),
        ("delete", "/admin/v1/permissions/{}", "permission_id"),
        ("get", "/admin/v1/roles/{}", "role_id"),
        ("delete", "/admin/v1/roles/{}", "role_id"),
        ("get", "/admin/v1/keys/{}", "key_id"),
        ("delete", "/admin/v1/keys/{}", "key_id"),
        ("get", "/admin/v1/tools/{}", "tool_id"),
        ("delete", "/admin/v1/tools/{}", "tool_id"),
        ("get", "/admin/v1/mcp/sources/{}", "source_id"),
        ("delete", "/admin/v1/mcp/sources/{}", "source_id"),
        ("get", "/admin/v1/mcp/tools/{}", "tool_id"),
    ],
)
def test_an_unknown_id_is_a_404_naming_its_parameter(
    admin: Caller, method: str, path: str, field: str
) -> None:
    response = getattr(admin, method)(path.format(uuid4()))
    assert response.status_code == 404, response.text
    assert response.json()["error"]["field"] == field
