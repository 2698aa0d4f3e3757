"""Permissions, roles, API keys and tenants through the admin API; the OpenAPI document."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import OPERATOR_KEY
from tests.fixtures.factories import PEPPER, Caller, agent_key, new_tenant, tool_body
from toolsift.app import create_app
from toolsift.config import Settings
from toolsift.db import Database

PERMISSIONS = "/admin/v1/permissions"
ROLES = "/admin/v1/roles"
KEYS = "/admin/v1/keys"
TOOLS = "/admin/v1/tools"
SHIPPING = "where is my order shipping status"
REFUND = "refund the payment of this order"
MISSING = "00000000-0000-4000-8000-000000000000"


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def permission_names(admin: Caller) -> list[str]:
    return [p["name"] for p in admin.ok(admin.get(PERMISSIONS))]


def role(admin: Caller, role_id: str) -> dict[str, Any]:
    body: dict[str, Any] = admin.ok(admin.get(f"{ROLES}/{role_id}"))
    return body


def operator(client: TestClient) -> dict[str, str]:
    return {"Authorization": f"Bearer {OPERATOR_KEY}"}


def forged(key: str, *, secret: str | None = None, tenant: str | None = None) -> str:
    prefix, tenant_hex, key_hex, real = key.split("_", 3)
    return "_".join([prefix, tenant or tenant_hex, key_hex, secret or real[::-1]])


@pytest.fixture
def client_without_operator_key(database_url: str, database: Database) -> Iterator[TestClient]:
    settings = Settings(env="testing", database_url=database_url, key_pepper=PEPPER)
    with TestClient(create_app(settings, database)) as test_client:
        yield test_client


class TestPermissions:
    def test_create_returns_the_permission(self, admin: Caller) -> None:
        body = {"name": "crm.read", "description": "Read CRM records"}
        permission = admin.ok(admin.post(PERMISSIONS, body), 201)
        assert permission["name"] == "crm.read"
        assert permission["description"] == "Read CRM records"
        assert admin.ok(admin.get(f"{PERMISSIONS}/{permission['id']}")) == permission

    def test_duplicate_name_is_409_naming_name(self, admin: Caller) -> None:
        admin.ok(admin.post(PERMISSIONS, {"name": "crm.read"}), 201)
        error = error_of(admin.post(PERMISSIONS, {"name": "crm.read", "description": "x"}), 409)
        assert error["field"] == "name"
        assert "crm.read" in error["message"]
        assert permission_names(admin) == ["crm.read"]

    def test_list_is_sorted_by_name(self, admin: Caller, catalog: dict[str, str]) -> None:
        assert permission_names(admin) == ["admin", "billing.refund", "crm.read", "orders.read"]

    def test_delete_removes_the_permission_and_its_grants(self, admin: Caller) -> None:
        permission = admin.ok(admin.post(PERMISSIONS, {"name": "reports.read"}), 201)
        created = admin.ok(
            admin.post(ROLES, {"name": "analyst", "permissions": ["reports.read"]}), 201
        )
        assert admin.delete(f"{PERMISSIONS}/{permission['id']}").status_code == 204
        assert permission_names(admin) == []
        assert admin.get(f"{PERMISSIONS}/{permission['id']}").status_code == 404
        assert role(admin, created["id"])["permissions"] == []

    def test_deleting_a_permission_a_tool_requires_is_409(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        error = error_of(admin.delete(f"{PERMISSIONS}/{catalog['orders.read']}"), 409)
        assert error["message"] == (
            "permission 'orders.read' is required by 1 tool(s): order_status"
        )
        assert error["field"] == "permission_id"
        assert "orders.read" in permission_names(admin)
        assert role(admin, catalog["support"])["permissions"] == ["crm.read", "orders.read"]

    def test_tools_deleted_since_do_not_hold_a_permission(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        """It stayed a 409 "required by 1 tool(s)" for good: no admin can remove a deleted tool."""
        admin.ok(admin.delete(f"/admin/v1/tools/{catalog['issue_refund']}"), 204)
        admin.ok(admin.delete(f"{PERMISSIONS}/{catalog['billing.refund']}"), 204)
        assert "billing.refund" not in permission_names(admin)
        # Brought back by a write, the tool has the permission that write names.
        revived = {"name": "issue_refund", "description": "Refund a payment"}
        assert admin.ok(admin.post("/admin/v1/tools", revived), 201)["required_permission"] is None
        admin.ok(admin.post(PERMISSIONS, {"name": "billing.refund"}), 201)
        revived["required_permission"] = "billing.refund"
        tool = admin.ok(admin.put("/admin/v1/tools", {"tools": [revived]}))["tools"][0]
        assert admin.ok(admin.get(f"/admin/v1/tools/{tool['id']}"))["required_permission"] == (
            "billing.refund"
        )

    def test_deleting_an_mcp_source_s_default_permission_is_409(self, admin: Caller) -> None:
        """It was a 500: the source's foreign key refused the delete."""
        permission = admin.ok(admin.post(PERMISSIONS, {"name": "weather.read"}), 201)
        source = {
            "name": "weather",
            "transport": "http",
            "url": "https://mcp.example.com/mcp",
            "default_permission": "weather.read",
        }
        admin.ok(admin.post("/admin/v1/mcp/sources", source), 201)
        error = error_of(admin.delete(f"{PERMISSIONS}/{permission['id']}"), 409)
        assert error["message"] == "permission 'weather.read' is used by MCP source(s) weather"
        assert permission_names(admin) == ["weather.read"]

    def test_unknown_id_is_404(self, admin: Caller) -> None:
        assert error_of(admin.get(f"{PERMISSIONS}/{MISSING}"), 404)["code"] == "not_found"
        assert error_of(admin.delete(f"{PERMISSIONS}/{MISSING}"), 404)["code"] == "not_found"

    def test_another_tenants_permissions_are_invisible(
        self, client: TestClient, database: Database, admin: Caller, catalog: dict[str, str]
    ) -> None:
        other = new_tenant(client, database, "globex")
        assert permission_names(other) == []
        assert other.get(f"{PERMISSIONS}/{catalog['crm.read']}").status_code == 404
        assert other.delete(f"{PERMISSIONS}/{catalog['crm.read']}").status_code == 404
        assert "crm.read" in permission_names(admin)
        # The same name is free in another tenant.
        other.ok(other.post(PERMISSIONS, {"name": "crm.read"}), 201)


class TestRoles:
    def test_create_with_permissions(self, admin: Caller, catalog: dict[str, str]) -> None:
        body = {"name": "lead", "description": "Team lead", "permissions": ["orders.read", "admin"]}
        created = admin.ok(admin.post(ROLES, body), 201)
        assert created["name"] == "lead"
        assert created["description"] == "Team lead"
        assert created["permissions"] == ["admin", "orders.read"]
        assert role(admin, created["id"]) == created

    def test_create_without_permissions(self, admin: Caller) -> None:
        assert admin.ok(admin.post(ROLES, {"name": "guest"}), 201)["permissions"] == []

    def test_list_is_sorted_by_name(self, admin: Caller, catalog: dict[str, str]) -> None:
        roles = admin.ok(admin.get(ROLES))
        assert [r["name"] for r in roles] == ["administrator", "billing", "support"]
        assert next(r for r in roles if r["name"] == "support")["permissions"] == [
            "crm.read",
            "orders.read",
        ]

    def test_duplicate_name_is_409_naming_name(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        error = error_of(admin.post(ROLES, {"name": "support"}), 409)
        assert error["field"] == "name"
        assert len(admin.ok(admin.get(ROLES))) == 3

    def test_unknown_permission_is_422_naming_the_field(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        body = {"name": "lead", "permissions": ["orders.read", "no.such.permission"]}
        error = error_of(admin.post(ROLES, body), 422)
        assert error["field"] == "permissions"
        assert "no.such.permission" in error["message"]
        assert "lead" not in [r["name"] for r in admin.ok(admin.get(ROLES))]

    def test_patch_replaces_the_grants(self, admin: Caller, catalog: dict[str, str]) -> None:
        updated = admin.ok(admin.patch(f"{ROLES}/{catalog['support']}", {"permissions": ["admin"]}))
        assert updated["permissions"] == ["admin"]
        assert role(admin, catalog["support"])["permissions"] == ["admin"]

    def test_patch_with_no_permissions_revokes_them_all(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        admin.ok(admin.patch(f"{ROLES}/{catalog['support']}", {"permissions": []}))
        assert role(admin, catalog["support"])["permissions"] == []

    def test_patch_of_the_description_keeps_the_grants(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        updated = admin.ok(admin.patch(f"{ROLES}/{catalog['support']}", {"description": "Tier 1"}))
        assert updated["description"] == "Tier 1"
        assert updated["permissions"] == ["crm.read", "orders.read"]

    def test_patch_with_an_unknown_permission_keeps_the_old_grants(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        body = {"description": "changed", "permissions": ["admin", "no.such.permission"]}
        error = error_of(admin.patch(f"{ROLES}/{catalog['support']}", body), 422)
        assert error["field"] == "permissions"
        after = role(admin, catalog["support"])
        assert after["permissions"] == ["crm.read", "orders.read"]
        assert after["description"] == ""

    def test_patched_grants_apply_at_the_next_select(
        self, admin: Caller, support_agent: Caller, catalog: dict[str, str]
    ) -> None:
        assert "order_status" in support_agent.names(SHIPPING, roles=["support"])
        admin.ok(admin.patch(f"{ROLES}/{catalog['support']}", {"permissions": ["crm.read"]}))
        assert "order_status" not in support_agent.names(SHIPPING, roles=["support"])

    def test_grant_endpoint_adds_a_permission(
        self, admin: Caller, support_agent: Caller, catalog: dict[str, str]
    ) -> None:
        assert "issue_refund" not in support_agent.names(REFUND, roles=["support"])
        granted = admin.ok(admin.put(f"{ROLES}/{catalog['support']}/permissions/billing.refund"))
        assert granted["permissions"] == ["billing.refund", "crm.read", "orders.read"]
        assert "issue_refund" in support_agent.names(REFUND, roles=["support"])

    def test_granting_twice_is_idempotent(self, admin: Caller, catalog: dict[str, str]) -> None:
        path = f"{ROLES}/{catalog['support']}/permissions/crm.read"
        assert admin.ok(admin.put(path))["permissions"] == ["crm.read", "orders.read"]
        assert admin.ok(admin.put(path))["permissions"] == ["crm.read", "orders.read"]

    def test_revoke_endpoint_removes_a_permission(
        self, admin: Caller, support_agent: Caller, catalog: dict[str, str]
    ) -> None:
        assert "order_status" in support_agent.names(SHIPPING, roles=["support"])
        revoked = admin.ok(admin.delete(f"{ROLES}/{catalog['support']}/permissions/orders.read"))
        assert revoked["permissions"] == ["crm.read"]
        assert role(admin, catalog["support"])["permissions"] == ["crm.read"]
        assert "order_status" not in support_agent.names(SHIPPING, roles=["support"])

    def test_revoking_a_permission_not_granted_changes_nothing(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        revoked = admin.ok(admin.delete(f"{ROLES}/{catalog['support']}/permissions/admin"))
        assert revoked["permissions"] == ["crm.read", "orders.read"]

    def test_granting_an_unknown_permission_is_422(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        error = error_of(admin.put(f"{ROLES}/{catalog['support']}/permissions/no.such"), 422)
        assert error["field"] == "permission"
        assert "no.such" in error["message"]
        assert role(admin, catalog["support"])["permissions"] == ["crm.read", "orders.read"]

    def test_revoking_an_unknown_permission_is_422(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        error = error_of(admin.delete(f"{ROLES}/{catalog['support']}/permissions/no.such"), 422)
        assert error["field"] == "permission"

    def test_grant_on_an_unknown_role_is_404(self, admin: Caller, catalog: dict[str, str]) -> None:
        assert error_of(admin.put(f"{ROLES}/{MISSING}/permissions/crm.read"), 404)
        assert error_of(admin.delete(f"{ROLES}/{MISSING}/permissions/crm.read"), 404)

    def test_delete_removes_the_role_from_its_keys(
        self, admin: Caller, support_agent: Caller, catalog: dict[str, str]
    ) -> None:
        assert admin.delete(f"{ROLES}/{catalog['billing']}").status_code == 204
        assert admin.get(f"{ROLES}/{catalog['billing']}").status_code == 404
        key = admin.ok(admin.get(f"{KEYS}/{support_agent.extra['key_id']}"))
        assert key["roles"] == ["support"]
        assert "issue_refund" not in support_agent.names(REFUND)
        assert support_agent.select(REFUND, roles=["billing"]).status_code == 403


class TestKeys:
    def test_create_shows_the_secret_once(self, admin: Caller, catalog: dict[str, str]) -> None:
        body = {"name": "bot", "scope": "agent", "roles": ["support", "billing"]}
        created = admin.ok(admin.post(KEYS, body), 201)
        secret = created["secret"]
        assert secret.startswith("tsk_")
        assert created["name"] == "bot"
        assert created["scope"] == "agent"
        assert created["roles"] == ["billing", "support"]
        assert created["revoked_at"] is None
        assert created["prefix"].startswith("tsk_")
        assert secret not in created["prefix"]
        shown = admin.get(f"{KEYS}/{created['id']}")
        listing = admin.get(KEYS)
        for response in (shown, listing):
            assert response.status_code == 200
            assert "secret" not in response.text
            # tsk_<tenant>_<key>_<random>: the random part may itself hold "_".
            assert secret.split("_", 3)[3] not in response.text
        assert admin.ok(shown) == {k: v for k, v in created.items() if k != "secret"}
        assert created["id"] in [k["id"] for k in admin.ok(listing)]

    def test_the_secret_authenticates_the_new_key(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        agent = agent_key(admin, ["support"])
        assert agent.names(SHIPPING) == ["search_help", "order_status"]
        created = admin.ok(admin.post(KEYS, {"name": "second admin", "scope": "admin"}), 201)
        second = Caller(admin.client, created["secret"], admin.tenant_id)
        assert len(second.ok(second.get(TOOLS))["items"]) == 6

    def test_list_includes_the_bootstrap_admin_key(self, admin: Caller) -> None:
        keys = admin.ok(admin.get(KEYS))
        assert [(k["scope"], k["roles"]) for k in keys] == [("admin", [])]

    def test_revoked_key_is_refused_at_its_next_request(
        self, admin: Caller, support_agent: Caller
    ) -> None:
        assert support_agent.select(SHIPPING).status_code == 200
        revoked = admin.ok(admin.delete(f"{KEYS}/{support_agent.extra['key_id']}"))
        assert revoked["revoked_at"] is not None
        error = error_of(support_agent.select(SHIPPING), 401)
        assert error["code"] == "unauthenticated"
        assert admin.ok(admin.get(f"{KEYS}/{support_agent.extra['key_id']}"))["revoked_at"]

    def test_revoking_one_key_leaves_the_others_working(
        self, admin: Caller, support_agent: Caller
    ) -> None:
        other = agent_key(admin, ["support"], name="other")
        admin.ok(admin.delete(f"{KEYS}/{support_agent.extra['key_id']}"))
        assert other.select(SHIPPING).status_code == 200
        assert admin.get(TOOLS).status_code == 200

    def test_revoking_twice_keeps_the_first_revocation_time(
        self, admin: Caller, support_agent: Caller
    ) -> None:
        first = admin.ok(admin.delete(f"{KEYS}/{support_agent.extra['key_id']}"))
        second = admin.ok(admin.delete(f"{KEYS}/{support_agent.extra['key_id']}"))
        assert second["revoked_at"] == first["revoked_at"]

    def test_an_admin_key_can_revoke_itself(self, admin: Caller) -> None:
        own = admin.ok(admin.get(KEYS))[0]["id"]
        admin.ok(admin.delete(f"{KEYS}/{own}"))
        assert error_of(admin.get(TOOLS), 401)["code"] == "unauthenticated"

    def test_admin_key_with_roles_is_422_naming_roles(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        body = {"name": "root", "scope": "admin", "roles": ["support"]}
        assert error_of(admin.post(KEYS, body), 422)["field"] == "roles"
        assert len(admin.ok(admin.get(KEYS))) == 1

    def test_unknown_role_is_422_naming_roles(self, admin: Caller) -> None:
        body = {"name": "bot", "scope": "agent", "roles": ["no-such-role"]}
        error = error_of(admin.post(KEYS, body), 422)
        assert error["field"] == "roles"
        assert "no-such-role" in error["message"]
        assert len(admin.ok(admin.get(KEYS))) == 1

    def test_unknown_scope_is_422_naming_scope(self, admin: Caller) -> None:
        assert error_of(admin.post(KEYS, {"name": "x", "scope": "root"}), 422)["field"] == "scope"

    def test_agent_key_on_admin_endpoints_is_403(self, support_agent: Caller) -> None:
        for response in (
            support_agent.get(TOOLS),
            support_agent.post(TOOLS, tool_body("sneaky", "x")),
            support_agent.get(KEYS),
            support_agent.post(KEYS, {"name": "escalate", "scope": "admin"}),
            support_agent.get(PERMISSIONS),
            support_agent.get(ROLES),
            support_agent.get("/admin/v1/tenant"),
        ):
            assert error_of(response, 403)["code"] == "forbidden"

    def test_agent_key_cannot_write_through_admin_endpoints(
        self, admin: Caller, support_agent: Caller
    ) -> None:
        assert support_agent.post(TOOLS, tool_body("sneaky", "x")).status_code == 403
        assert support_agent.post(KEYS, {"name": "escalate", "scope": "admin"}).status_code == 403
        assert "sneaky" not in [t["name"] for t in admin.ok(admin.get(TOOLS))["items"]]
        assert len(admin.ok(admin.get(KEYS))) == 2

    def test_admin_key_on_the_agent_api_is_403(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        assert error_of(admin.select(SHIPPING), 403)["code"] == "forbidden"
        assert error_of(admin.post("/v1/authorize", {"tool": "order_status"}), 403)

    def test_missing_key_is_401(self, client: TestClient, catalog: dict[str, str]) -> None:
        body = {"messages": [{"role": "user", "content": SHIPPING}]}
        for response in (client.get(TOOLS), client.post("/v1/select", json=body)):
            assert error_of(response, 401)["code"] == "unauthenticated"

    @pytest.mark.parametrize(
        "authorization",
        [
            "Bearer nonsense",
            "Bearer tsk_",
            "Bearer tsk_abc_def_ghi",
            "Bearer tsk_00000000000040008000000000000000_00000000000040008000000000000000_",
            "Basic dXNlcjpwYXNz",
            "tsk_only_the_key",
            "Bearer",
        ],
    )
    def test_malformed_key_is_401(
        self, client: TestClient, admin: Caller, authorization: str
    ) -> None:
        response = client.get(TOOLS, headers={"Authorization": authorization})
        assert error_of(response, 401)["code"] == "unauthenticated"

    def test_wrong_secret_is_401(self, admin: Caller, support_agent: Caller) -> None:
        for caller in (admin, support_agent):
            wrong = Caller(caller.client, forged(caller.key), caller.tenant_id)
            assert error_of(wrong.get(TOOLS), 401)["code"] == "unauthenticated"
            assert error_of(wrong.select(SHIPPING), 401)["code"] == "unauthenticated"

    def test_a_key_moved_to_another_tenant_is_401(
        self, client: TestClient, database: Database, admin: Caller
    ) -> None:
        other = new_tenant(client, database, "globex")
        moved = forged(admin.key, secret=admin.key.split("_", 3)[3], tenant=other.tenant_id.hex)
        response = client.get(TOOLS, headers={"Authorization": f"Bearer {moved}"})
        assert error_of(response, 401)["code"] == "unauthenticated"

    def test_unknown_key_id_is_404(self, admin: Caller) -> None:
        assert error_of(admin.get(f"{KEYS}/{MISSING}"), 404)["code"] == "not_found"
        assert error_of(admin.delete(f"{KEYS}/{MISSING}"), 404)["code"] == "not_found"


class TestTenants:
    def test_operator_key_creates_a_tenant_whose_admin_key_works(
        self, client: TestClient, admin: Caller, catalog: dict[str, str]
    ) -> None:
        response = client.post(
            "/admin/v1/tenants", json={"name": "globex"}, headers=operator(client)
        )
        assert response.status_code == 201, response.text
        created = response.json()
        assert created["tenant"]["name"] == "globex"
        assert created["tenant"]["settings"] == {}
        assert created["admin_key"]["scope"] == "admin"
        new_admin = Caller(client, created["admin_key"]["secret"], created["tenant"]["id"])
        assert new_admin.ok(new_admin.get("/admin/v1/tenant")) == created["tenant"]
        assert new_admin.ok(new_admin.get(TOOLS))["items"] == []
        new_admin.ok(new_admin.post(TOOLS, tool_body("globex_tool", "x")), 201)
        assert "globex_tool" not in [t["name"] for t in admin.ok(admin.get(TOOLS))["items"]]
        keys = new_admin.ok(new_admin.get(KEYS))
        assert [k["id"] for k in keys] == [created["admin_key"]["id"]]

    def test_without_operator_key_is_401(self, client: TestClient, admin: Caller) -> None:
        response = client.post("/admin/v1/tenants", json={"name": "globex"})
        assert error_of(response, 401)["code"] == "unauthenticated"

    def test_wrong_operator_key_is_401_with_one_message(
        self, client: TestClient, admin: Caller
    ) -> None:
        # A tenant's admin key is no credential here either: nothing tells the keys apart.
        for key in ("wrong-operator-key", OPERATOR_KEY + "x", admin.key):
            response = client.post(
                "/admin/v1/tenants",
                json={"name": "globex"},
                headers={"Authorization": f"Bearer {key}"},
            )
            error = error_of(response, 401)
            assert error == {
                "code": "unauthenticated",
                "message": "creating tenants needs the operator key",
            }

    def test_no_configured_operator_key_refuses_every_key(
        self, client_without_operator_key: TestClient
    ) -> None:
        response = client_without_operator_key.post(
            "/admin/v1/tenants",
            json={"name": "globex"},
            headers=operator(client_without_operator_key),
        )
        error = error_of(response, 403)
        assert error["code"] == "forbidden"
        assert "does not set (TOOLSIFT_OPERATOR_KEY)" in error["message"]

    def test_get_returns_the_callers_tenant(
        self, client: TestClient, database: Database, admin: Caller
    ) -> None:
        new_tenant(client, database, "globex")
        tenant = admin.ok(admin.get("/admin/v1/tenant"))
        assert tenant["id"] == str(admin.tenant_id)
        assert tenant["name"] == "acme"

    def test_patch_renames_and_merges_settings(self, admin: Caller) -> None:
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"a": 1, "b": 2}}))
        patched = admin.ok(
            admin.patch("/admin/v1/tenant", {"name": "acme-2", "settings": {"b": 3}})
        )
        assert patched["name"] == "acme-2"
        assert patched["settings"] == {"a": 1, "b": 3}
        assert admin.ok(admin.get("/admin/v1/tenant")) == patched

    def test_a_null_setting_is_removed_at_any_depth(self, admin: Caller) -> None:
        """A JSON merge patch: a setting written under a misspelt name can be taken out."""
        settings = {"log_retention_day": 30, "fusion": {"k": 30, "bm25_weight": 2.0}}
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": settings}))
        removed = {"log_retention_day": None, "fusion": {"k": None}, "absent": None}
        patched = admin.ok(admin.patch("/admin/v1/tenant", {"settings": removed}))
        assert patched["settings"] == {"fusion": {"bm25_weight": 2.0}}
        cleared = admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": None}}))
        assert cleared["settings"] == {}

    def test_empty_patch_changes_nothing(self, admin: Caller) -> None:
        before = admin.ok(admin.get("/admin/v1/tenant"))
        assert admin.ok(admin.patch("/admin/v1/tenant", {})) == before

    def test_empty_name_is_422_and_changes_nothing(self, admin: Caller) -> None:
        before = admin.ok(admin.get("/admin/v1/tenant"))
        assert error_of(admin.patch("/admin/v1/tenant", {"name": ""}), 422)["field"] == "name"
        assert admin.ok(admin.get("/admin/v1/tenant")) == before


class TestOpenAPI:
    def test_every_route_is_documented_with_a_summary_and_a_description(
        self, client: TestClient
    ) -> None:
        paths = client.get("/openapi.json").json()["paths"]
        operations = [
            (f"{method.upper()} {path}", operation)
            for path, item in paths.items()
            for method, operation in item.items()
        ]
        assert len(operations) >= 27
        for where, operation in operations:
            assert operation.get("summary", "").strip(), f"{where} has no summary"
            assert operation.get("description", "").strip(), f"{where} has no description"

    def test_documents_the_admin_and_agent_routes(self, client: TestClient) -> None:
        paths = client.get("/openapi.json").json()["paths"]
        expected = {
            "/admin/v1/tenants": {"post"},
            "/admin/v1/tenant": {"get", "patch"},
            "/admin/v1/permissions": {"get", "post"},
            "/admin/v1/permissions/{permission_id}": {"get", "delete"},
            "/admin/v1/roles": {"get", "post"},
            "/admin/v1/roles/{role_id}": {"get", "patch", "delete"},
            "/admin/v1/roles/{role_id}/permissions/{permission}": {"put", "delete"},
            "/admin/v1/keys": {"get", "post"},
            "/admin/v1/keys/{key_id}": {"get", "delete"},
            "/admin/v1/tools": {"get", "post", "put"},
            "/admin/v1/tools/{tool_id}": {"get", "patch", "delete"},
            "/v1/select": {"post"},
            "/v1/authorize": {"post"},
        }
        for path, methods in expected.items():
            assert path in paths, path
            assert methods <= set(paths[path]), path

    def test_errors_are_documented_in_the_error_shape(self, client: TestClient) -> None:
        document = client.get("/openapi.json").json()
        operation = document["paths"]["/admin/v1/tools"]["post"]
        for status in ("401", "403", "409", "422"):
            schema = operation["responses"][status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}

    def test_tool_create_schema_carries_an_example_the_api_accepts(
        self, client: TestClient, admin: Caller
    ) -> None:
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
        examples = schemas["ToolCreate"]["examples"]
        assert examples
        example = examples[0]
        assert set(example) <= set(schemas["ToolCreate"]["properties"])
        assert example["input_schema"]["type"] == "object"
        if example.get("required_permission"):
            admin.ok(admin.post(PERMISSIONS, {"name": example["required_permission"]}), 201)
        tool = admin.ok(admin.post(TOOLS, example), 201)
        assert {k: tool[k] for k in example} == example
