"""The tool registry's admin API, end to end through HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.fixtures.factories import PARAMETERS, SUPPORT_CATALOG, Caller, new_tenant, tool_body
from toolsift.db import Database

TOOLS = "/admin/v1/tools"
SHIPPING = "where is my order shipping status"
DELETE_ACCOUNT = "delete a customer account permanently"


def catalog_bodies() -> list[dict[str, Any]]:
    return [tool_body(*t) for t in SUPPORT_CATALOG]


def listed(admin: Caller, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = admin.ok(admin.get(TOOLS, params={"limit": 1000, **params}))[
        "items"
    ]
    return items


def by_name(admin: Caller, **params: Any) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in listed(admin, **params)}


def upsert(admin: Caller, tools: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = admin.ok(admin.put(TOOLS, {"tools": tools}))
    return result


class TestCreateTool:
    def test_returns_the_stored_tool(self, admin: Caller) -> None:
        body = {
            "name": "order_status",
            "title": "Order status",
            "description": "Get the shipping status of an order",
            "input_schema": PARAMETERS,
            "examples": ["where is my parcel"],
            "core": True,
        }
        tool = admin.ok(admin.post(TOOLS, body), 201)
        assert {k: tool[k] for k in body} == body
        assert tool["required_permission"] is None
        assert tool["token_cost"] > 0
        assert tool["version"] == 1
        assert tool["source"] == "manual"
        assert tool["deleted_at"] is None
        assert len(tool["content_hash"]) == 64
        assert admin.ok(admin.get(f"{TOOLS}/{tool['id']}")) == tool

    def test_defaults_make_a_public_tool_with_an_empty_object_schema(self, admin: Caller) -> None:
        tool = admin.ok(admin.post(TOOLS, {"name": "ping"}), 201)
        assert tool["input_schema"] == {"type": "object", "properties": {}}
        assert tool["description"] == ""
        assert tool["examples"] == []
        assert tool["required_permission"] is None
        assert tool["core"] is False
        assert tool["token_cost"] > 0

    def test_is_appended_at_the_end_of_the_registry(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        before = [t["position"] for t in listed(admin)]
        tool = admin.ok(admin.post(TOOLS, tool_body("track_parcel", "Track a parcel")), 201)
        assert tool["position"] > max(before)
        assert [t["name"] for t in listed(admin)][-1] == "track_parcel"

    def test_names_its_required_permission(self, admin: Caller, catalog: dict[str, str]) -> None:
        body = tool_body("refund_status", "Status of a refund", "billing.refund")
        assert admin.ok(admin.post(TOOLS, body), 201)["required_permission"] == "billing.refund"

    def test_bigger_definitions_cost_more_tokens(self, admin: Caller) -> None:
        small = admin.ok(admin.post(TOOLS, {"name": "small", "description": "x"}), 201)
        big = admin.ok(admin.post(TOOLS, {"name": "big", "description": "x" * 4000}), 201)
        assert big["token_cost"] >= small["token_cost"] + 900

    def test_is_selectable_as_soon_as_it_is_created(
        self, admin: Caller, support_agent: Caller
    ) -> None:
        assert "track_parcel" not in support_agent.names("track my parcel")
        admin.ok(admin.post(TOOLS, tool_body("track_parcel", "Track a parcel in transit")), 201)
        assert "track_parcel" in support_agent.names("track my parcel")

    def test_duplicate_name_is_409_naming_name(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        before = listed(admin)
        response = admin.post(TOOLS, tool_body("order_status", "Another order tool"))
        assert response.status_code == 409, response.text
        error = response.json()["error"]
        assert error["code"] == "conflict"
        assert error["field"] == "name"
        assert "order_status" in error["message"]
        assert listed(admin) == before

    def test_unknown_permission_is_422_naming_required_permission(self, admin: Caller) -> None:
        response = admin.post(TOOLS, tool_body("refund", "Refund", "no.such.permission"))
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "required_permission"
        assert "no.such.permission" in response.json()["error"]["message"]
        assert listed(admin) == []

    def test_a_schema_that_is_not_an_object_s_is_422_in_the_validator_s_words(
        self, admin: Caller
    ) -> None:
        body = {"name": "refund", "input_schema": {"type": "string"}}
        error = admin.post(TOOLS, body).json()["error"]
        assert (error["field"], error["message"]) == (
            "input_schema",
            'input_schema: must describe an object ("type": "object")',
        )
        assert error["errors"][0]["message"] == 'must describe an object ("type": "object")'


class TestBulkUpsert:
    def test_creates_new_tools_in_request_order(self, admin: Caller) -> None:
        result = upsert(admin, [tool_body("zeta", "z"), tool_body("alpha", "a")])
        assert (result["created"], result["updated"], result["unchanged"]) == (2, 0, 0)
        assert [t["name"] for t in result["tools"]] == ["zeta", "alpha"]
        assert [t["status"] for t in result["tools"]] == ["created", "created"]
        assert [t["version"] for t in result["tools"]] == [1, 1]
        zeta, alpha = result["tools"]
        assert alpha["position"] == zeta["position"] + 1
        assert [t["name"] for t in listed(admin)] == ["zeta", "alpha"]

    def test_second_identical_call_changes_nothing(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        before = listed(admin)
        result = upsert(admin, catalog_bodies())
        assert (result["created"], result["updated"], result["unchanged"]) == (0, 0, 6)
        assert {t["status"] for t in result["tools"]} == {"unchanged"}
        assert [(t["id"], t["position"], t["version"]) for t in result["tools"]] == [
            (t["id"], t["position"], t["version"]) for t in before
        ]
        assert listed(admin) == before

    def test_changed_tool_gets_a_new_version_at_its_position(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        before = by_name(admin)
        bodies = catalog_bodies()
        bodies[2] = {**bodies[2], "description": "Track the shipping status of an order"}
        result = upsert(admin, bodies)
        assert (result["created"], result["updated"], result["unchanged"]) == (0, 1, 5)
        item = result["tools"][2]
        assert item["name"] == "order_status"
        assert item["status"] == "updated"
        assert item["version"] == before["order_status"]["version"] + 1
        assert item["position"] == before["order_status"]["position"]
        after = by_name(admin)
        assert after["order_status"]["description"] == "Track the shipping status of an order"
        assert after["order_status"]["content_hash"] != before["order_status"]["content_hash"]
        assert {n: t["version"] for n, t in after.items() if n != "order_status"} == {
            n: t["version"] for n, t in before.items() if n != "order_status"
        }

    def test_a_schema_that_changes_only_a_json_type_is_stored(self, admin: Caller) -> None:
        # 1, 1.0 and true are one value to Python's ==: each step must still be written.
        steps = [
            {"enum": [0, 1], "default": 1},
            {"enum": [False, True], "default": True},
            {"enum": [0, 1], "default": 1.0},
            {"enum": [0, 1], "default": 1},
        ]
        for version, flag in enumerate(steps, start=1):
            schema = {"type": "object", "properties": {"flag": flag}}
            item = upsert(admin, [{"name": "flag_tool", "input_schema": schema}])["tools"][0]
            assert item["version"] == version
            stored = by_name(admin)["flag_tool"]
            assert stored["input_schema"]["properties"]["flag"] == flag
            assert [type(v) for v in stored["input_schema"]["properties"]["flag"]["enum"]] == [
                type(v) for v in flag["enum"]
            ]
            assert type(stored["input_schema"]["properties"]["flag"]["default"]) is type(
                flag["default"]
            )
            # What GET shows, sent back, is the same tool.
            again = upsert(admin, [{"name": "flag_tool", "input_schema": stored["input_schema"]}])
            assert again["tools"][0]["status"] == "unchanged"

    def test_patch_of_a_json_type_only_is_stored(self, admin: Caller) -> None:
        schema = {"type": "object", "properties": {"on": {"const": 1}}}
        created = admin.post(TOOLS, {"name": "switch", "input_schema": schema})
        tool_id = admin.ok(created, 201)["id"]
        schema["properties"]["on"]["const"] = True
        admin.ok(admin.patch(f"{TOOLS}/{tool_id}", {"input_schema": schema}))
        stored = admin.ok(admin.get(f"{TOOLS}/{tool_id}"))
        assert stored["input_schema"]["properties"]["on"]["const"] is True
        assert stored["version"] == 2

    def test_new_tools_append_after_existing_ones_in_request_order(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        last = max(t["position"] for t in listed(admin))
        bodies = [tool_body("new_b", "b"), *catalog_bodies(), tool_body("new_a", "a")]
        result = upsert(admin, bodies)
        assert (result["created"], result["updated"], result["unchanged"]) == (2, 0, 6)
        positions = {t["name"]: t["position"] for t in result["tools"]}
        assert positions["new_b"] == last + 1
        assert positions["new_a"] == last + 2
        assert [t["name"] for t in listed(admin)][-2:] == ["new_b", "new_a"]

    def test_a_changed_permission_moves_the_tool_between_callers(
        self, admin: Caller, support_agent: Caller
    ) -> None:
        assert "order_status" in support_agent.names(SHIPPING, roles=["support"])
        bodies = catalog_bodies()
        bodies[2] = {**bodies[2], "required_permission": "billing.refund"}
        assert upsert(admin, bodies)["tools"][2]["status"] == "updated"
        assert "order_status" not in support_agent.names(SHIPPING, roles=["support"])
        assert "order_status" in support_agent.names(SHIPPING, roles=["billing"])

    def test_an_item_that_leaves_out_the_catalog_fields_keeps_them(
        self, admin: Caller, support_agent: Caller, catalog: dict[str, str]
    ) -> None:
        """A catalog written again from a source that knows nothing of permissions, core
        tools or examples never makes a restricted tool public; `null`, `false` and `[]`
        clear them."""
        refund = "refund the payment of this order"
        admin.ok(admin.patch(f"{TOOLS}/{catalog['issue_refund']}", {"examples": ["refund it"]}))
        bare = {
            "name": "issue_refund",
            "description": "Refund a customer order payment to the card",
            "input_schema": PARAMETERS,
        }
        assert upsert(admin, [bare])["tools"][0]["status"] == "unchanged"
        changed = {**bare, "description": "Refund an order payment to the card"}
        assert upsert(admin, [changed])["tools"][0]["status"] == "updated"
        kept = by_name(admin)["issue_refund"]
        assert (kept["required_permission"], kept["examples"]) == ("billing.refund", ["refund it"])
        assert "issue_refund" not in support_agent.names(refund, roles=["support"])
        assert upsert(admin, [{**changed, "core": True}])["tools"][0]["status"] == "updated"
        assert by_name(admin)["issue_refund"]["core"] is True
        assert upsert(admin, [changed])["tools"][0]["status"] == "unchanged"
        cleared = {**changed, "required_permission": None, "core": False, "examples": []}
        assert upsert(admin, [cleared])["tools"][0]["status"] == "updated"
        public = by_name(admin)["issue_refund"]
        assert (public["required_permission"], public["core"], public["examples"]) == (
            None,
            False,
            [],
        )
        assert "issue_refund" in support_agent.names(refund, roles=["support"])

    def test_unknown_permission_names_the_item_and_writes_nothing(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        before = listed(admin)
        bodies = [*catalog_bodies(), tool_body("brand_new", "new")]
        bodies[1] = {**bodies[1], "description": "changed"}
        bodies[3] = {**bodies[3], "required_permission": "no.such.permission"}
        response = admin.put(TOOLS, {"tools": bodies})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "tools[3].required_permission"
        assert listed(admin, include_deleted=True) == before


class TestGetTool:
    def test_returns_the_tool_as_listed(self, admin: Caller, catalog: dict[str, str]) -> None:
        tool = admin.ok(admin.get(f"{TOOLS}/{catalog['issue_refund']}"))
        assert tool == by_name(admin)["issue_refund"]
        assert tool["required_permission"] == "billing.refund"

    def test_unknown_id_is_404(self, admin: Caller) -> None:
        response = admin.get(f"{TOOLS}/00000000-0000-4000-8000-000000000000")
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "not_found"

    def test_another_tenants_tool_is_404(
        self, client: TestClient, database: Database, admin: Caller, catalog: dict[str, str]
    ) -> None:
        other = new_tenant(client, database, "globex")
        assert other.get(f"{TOOLS}/{catalog['order_status']}").status_code == 404
        assert listed(other) == []


class TestListTools:
    def test_lists_in_registry_order(self, admin: Caller, catalog: dict[str, str]) -> None:
        tools = listed(admin)
        assert [t["name"] for t in tools] == [t[0] for t in SUPPORT_CATALOG]
        positions = [t["position"] for t in tools]
        assert positions == sorted(positions)

    def test_pages_follow_next_cursor_to_a_null_cursor(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        upsert(admin, [tool_body("seventh", "7")])
        pages: list[list[str]] = []
        params: dict[str, Any] = {"limit": 3}
        while True:
            page = admin.ok(admin.get(TOOLS, params=params))
            pages.append([t["name"] for t in page["items"]])
            if page["next_cursor"] is None:
                break
            assert page["next_cursor"] == page["items"][-1]["position"]
            params = {"limit": 3, "after": page["next_cursor"]}
        assert [len(p) for p in pages] == [3, 3, 1]
        assert [n for p in pages for n in p] == [t["name"] for t in listed(admin)]

    def test_a_full_last_page_has_a_null_cursor(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        first = admin.ok(admin.get(TOOLS, params={"limit": 3}))
        assert first["next_cursor"] is not None
        second = admin.ok(admin.get(TOOLS, params={"limit": 3, "after": first["next_cursor"]}))
        assert len(second["items"]) == 3
        assert second["next_cursor"] is None

    def test_default_page_holds_every_tool_of_a_small_catalog(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        page = admin.ok(admin.get(TOOLS))
        assert len(page["items"]) == len(SUPPORT_CATALOG)
        assert page["next_cursor"] is None

    def test_empty_registry_is_an_empty_page(self, admin: Caller) -> None:
        assert admin.ok(admin.get(TOOLS)) == {"items": [], "next_cursor": None}

    def test_deleted_tools_are_listed_only_when_asked(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        admin.ok(admin.delete(f"{TOOLS}/{catalog['refund_policy']}"), 204)
        assert "refund_policy" not in by_name(admin)
        deleted = by_name(admin, include_deleted=True)["refund_policy"]
        assert deleted["deleted_at"] is not None
        assert [t["name"] for t in listed(admin, include_deleted=True)] == [
            t[0] for t in SUPPORT_CATALOG
        ]


class TestUpdateTool:
    def test_a_change_makes_a_new_version_at_the_same_position(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        before = admin.ok(admin.get(f"{TOOLS}/{catalog['order_status']}"))
        after = admin.ok(
            admin.patch(f"{TOOLS}/{catalog['order_status']}", {"description": "Where a parcel is"})
        )
        assert after["description"] == "Where a parcel is"
        assert after["version"] == before["version"] + 1
        assert after["position"] == before["position"]
        assert after["id"] == before["id"]
        assert after["content_hash"] != before["content_hash"]
        assert {k: after[k] for k in ("name", "input_schema", "required_permission", "core")} == {
            k: before[k] for k in ("name", "input_schema", "required_permission", "core")
        }
        assert admin.ok(admin.get(f"{TOOLS}/{catalog['order_status']}")) == after

    def test_a_patch_that_changes_nothing_keeps_the_version(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        path = f"{TOOLS}/{catalog['order_status']}"
        before = admin.ok(admin.get(path))
        same = {"description": before["description"], "core": before["core"]}
        assert admin.ok(admin.patch(path, same)) == before
        assert admin.ok(admin.patch(path, {})) == before
        assert admin.ok(admin.get(path)) == before

    def test_the_new_text_is_what_selection_matches(
        self, admin: Caller, support_agent: Caller, catalog: dict[str, str]
    ) -> None:
        assert "refund_policy" not in support_agent.names("warranty terms")
        patch = {"description": "Explain the warranty terms to the customer"}
        admin.ok(admin.patch(f"{TOOLS}/{catalog['refund_policy']}", patch))
        assert "refund_policy" in support_agent.names("warranty terms")

    def test_null_required_permission_makes_the_tool_public(
        self, admin: Caller, support_agent: Caller, catalog: dict[str, str]
    ) -> None:
        assert "delete_account" not in support_agent.names(DELETE_ACCOUNT)
        tool = admin.ok(
            admin.patch(f"{TOOLS}/{catalog['delete_account']}", {"required_permission": None})
        )
        assert tool["required_permission"] is None
        assert tool["version"] == 2
        assert "delete_account" in support_agent.names(DELETE_ACCOUNT)

    def test_setting_a_permission_hides_the_tool(
        self, admin: Caller, support_agent: Caller, catalog: dict[str, str]
    ) -> None:
        assert "refund_policy" in support_agent.names("refund policy", roles=["support"])
        patch = {"required_permission": "billing.refund"}
        tool = admin.ok(admin.patch(f"{TOOLS}/{catalog['refund_policy']}", patch))
        assert tool["required_permission"] == "billing.refund"
        assert "refund_policy" not in support_agent.names("refund policy", roles=["support"])

    def test_null_title_clears_it_and_omitted_fields_stay(self, admin: Caller) -> None:
        tool = admin.ok(admin.post(TOOLS, {"name": "t", "title": "T", "description": "d"}), 201)
        cleared = admin.ok(admin.patch(f"{TOOLS}/{tool['id']}", {"title": None}))
        assert cleared["title"] is None
        assert cleared["description"] == "d"
        assert cleared["version"] == 2

    @pytest.mark.parametrize("field", ["description", "input_schema", "examples", "core"])
    def test_null_for_a_field_every_tool_has_is_422_and_changes_nothing(
        self, admin: Caller, field: str
    ) -> None:
        tool = admin.ok(admin.post(TOOLS, {"name": "t", "description": "d"}), 201)
        response = admin.patch(f"{TOOLS}/{tool['id']}", {field: None, "title": "New"})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == field
        assert admin.ok(admin.get(f"{TOOLS}/{tool['id']}")) == tool

    def test_output_schema_and_annotations_are_patched_and_cleared_by_null(
        self, admin: Caller
    ) -> None:
        tool = admin.ok(admin.post(TOOLS, {"name": "t", "description": "d"}), 201)
        path = f"{TOOLS}/{tool['id']}"
        output = {"type": "object", "properties": {"rows": {"type": "array"}}}
        patched = admin.ok(
            admin.patch(path, {"output_schema": output, "annotations": {"readOnlyHint": True}})
        )
        assert (patched["output_schema"], patched["annotations"]) == (
            output,
            {"readOnlyHint": True},
        )
        assert patched["token_costs"]["mcp"] > tool["token_costs"]["mcp"]
        bad = admin.patch(path, {"annotations": {"readOnlyHint": "yes"}})
        assert (bad.status_code, bad.json()["error"]["field"]) == (422, "annotations")
        cleared = admin.ok(admin.patch(path, {"output_schema": None, "annotations": None}))
        assert (cleared["output_schema"], cleared["annotations"], cleared["version"]) == (
            None,
            None,
            3,
        )
        assert cleared["token_costs"] == tool["token_costs"]

    def test_unknown_id_is_404(self, admin: Caller) -> None:
        response = admin.patch(f"{TOOLS}/00000000-0000-4000-8000-000000000000", {"core": True})
        assert response.status_code == 404, response.text

    def test_a_deleted_tool_is_404(self, admin: Caller, catalog: dict[str, str]) -> None:
        admin.ok(admin.delete(f"{TOOLS}/{catalog['refund_policy']}"), 204)
        response = admin.patch(f"{TOOLS}/{catalog['refund_policy']}", {"description": "back"})
        assert response.status_code == 404, response.text
        assert by_name(admin, include_deleted=True)["refund_policy"]["deleted_at"] is not None

    def test_unknown_permission_is_422_naming_required_permission(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        path = f"{TOOLS}/{catalog['refund_policy']}"
        before = admin.ok(admin.get(path))
        response = admin.patch(path, {"required_permission": "no.such.permission"})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "required_permission"
        assert admin.ok(admin.get(path)) == before


class TestDeleteTool:
    def test_is_204_and_the_tool_leaves_the_list(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        response = admin.delete(f"{TOOLS}/{catalog['order_status']}")
        assert response.status_code == 204
        assert response.content == b""
        assert "order_status" not in by_name(admin)
        assert admin.ok(admin.get(f"{TOOLS}/{catalog['order_status']}"))["deleted_at"] is not None

    def test_the_tool_leaves_selection_at_once(
        self, admin: Caller, support_agent: Caller, catalog: dict[str, str]
    ) -> None:
        assert "order_status" in support_agent.names(SHIPPING, roles=["support"])
        admin.ok(admin.delete(f"{TOOLS}/{catalog['order_status']}"), 204)
        assert "order_status" not in support_agent.names(SHIPPING, roles=["support"])

    def test_a_deleted_core_tool_is_no_longer_always_selected(
        self, admin: Caller, support_agent: Caller, catalog: dict[str, str]
    ) -> None:
        assert "search_help" in support_agent.names("hello")
        admin.ok(admin.delete(f"{TOOLS}/{catalog['search_help']}"), 204)
        assert "search_help" not in support_agent.names("hello")

    def test_deleting_twice_is_still_204(self, admin: Caller, catalog: dict[str, str]) -> None:
        admin.ok(admin.delete(f"{TOOLS}/{catalog['order_status']}"), 204)
        admin.ok(admin.delete(f"{TOOLS}/{catalog['order_status']}"), 204)

    def test_unknown_id_is_404(self, admin: Caller) -> None:
        response = admin.delete(f"{TOOLS}/00000000-0000-4000-8000-000000000000")
        assert response.status_code == 404, response.text

    def test_re_creating_the_name_revives_it_at_its_old_position(
        self, admin: Caller, support_agent: Caller, catalog: dict[str, str]
    ) -> None:
        old = admin.ok(admin.get(f"{TOOLS}/{catalog['order_status']}"))
        admin.ok(admin.delete(f"{TOOLS}/{catalog['order_status']}"), 204)
        body = tool_body("order_status", "Get the shipping status of an order", "orders.read")
        revived = admin.ok(admin.post(TOOLS, body), 201)
        assert revived["id"] == old["id"]
        assert revived["position"] == old["position"]
        assert revived["version"] > old["version"]
        assert revived["deleted_at"] is None
        assert [t["name"] for t in listed(admin)] == [t[0] for t in SUPPORT_CATALOG]
        assert "order_status" in support_agent.names(SHIPPING, roles=["support"])

    def test_bulk_upsert_revives_a_deleted_tool_too(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        old = admin.ok(admin.get(f"{TOOLS}/{catalog['refund_policy']}"))
        admin.ok(admin.delete(f"{TOOLS}/{catalog['refund_policy']}"), 204)
        result = upsert(admin, catalog_bodies())
        assert (result["created"], result["updated"], result["unchanged"]) == (0, 1, 5)
        item = next(t for t in result["tools"] if t["name"] == "refund_policy")
        assert item["status"] == "updated"
        assert item["position"] == old["position"]
        assert item["version"] == old["version"] + 1
        assert "refund_policy" in by_name(admin)
