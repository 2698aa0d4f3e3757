"""Imports that once revived removed tools, made tools public, lost a review or failed with a
500 that left the source "healthy"."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.factories import Caller, agent_key

from .servers.live import LiveServer, tool
from .test_sync import add_source, live, registry, source_state, sync


def entries(admin: Caller) -> dict[str, dict[str, Any]]:
    """The source entries by registry name (the review and permission view of each tool)."""
    rows = admin.ok(admin.get("/admin/v1/mcp/tools"))
    return {r["name"]: r for r in rows}


class TestRemovedToolsStayRemoved:
    def test_a_new_default_permission_does_not_bring_one_back(
        self, admin: Caller, catalog: dict[str, str], server: LiveServer
    ) -> None:
        server.tools = [tool("keep", "Keep this."), tool("gone", "Gone soon.")]
        source = add_source(admin, server.url)
        sync(admin, source)
        server.tools = [tool("keep", "Keep this.")]
        assert sync(admin, source)["removed"] == 1
        for permission in ("crm.read", None):
            body = {"default_permission": permission}
            admin.ok(admin.patch(f"/admin/v1/mcp/sources/{source['id']}", body))
            assert {n for n in live(admin) if n.startswith("srv_")} == {"srv_keep"}
        assert sync(admin, source)["removed"] == 0
        assert {n for n in live(admin) if n.startswith("srv_")} == {"srv_keep"}


class TestPerToolPermission:
    @pytest.mark.parametrize("body", [{}, {"inherit": False}])
    def test_a_patch_naming_no_permission_is_refused_not_public(
        self, admin: Caller, catalog: dict[str, str], server: LiveServer, body: dict[str, Any]
    ) -> None:
        server.tools = [tool("secret", "A protected tool.")]
        source = add_source(admin, server.url, default_permission="crm.read")
        sync(admin, source)
        entry = live(admin)["srv_secret"]
        response = admin.patch(f"/admin/v1/mcp/tools/{entry['id']}", body)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "required_permission"
        assert live(admin)["srv_secret"]["required_permission"] == "crm.read"
        nobody = agent_key(admin, [], name="nobody")
        assert "srv_secret" not in nobody.names("a protected tool", k=10)


class TestNamesTakenOver:
    def test_a_removed_name_that_comes_back_under_another_spelling(
        self, admin: Caller, server: LiveServer
    ) -> None:
        server.tools = [tool("x.y", "The x y tool.")]
        source = add_source(admin, server.url)
        sync(admin, source)
        position = live(admin)["srv_x_y"]["position"]
        server.tools = [tool("x_y", "The x y tool.")]  # folds to the same registry name
        sync(admin, source)
        server.tools = []
        assert sync(admin, source)["removed"] == 1
        server.tools = [tool("x.y", "The x y tool.")]
        result = sync(admin, source)
        assert result["status"] == "synced", result
        assert live(admin)["srv_x_y"]["position"] == position
        assert sync(admin, source)["status"] == "synced"

    def test_another_source_cannot_take_a_name_its_first_owner_removed(
        self, admin: Caller, server: LiveServer
    ) -> None:
        """A tool its server stopped listing is still its source's (it comes back at its
        old position): another source whose tool makes the same name fails its sync, naming
        it, until the first source is deleted."""
        server.tools = [tool("b_c", "The b c tool.")]
        first = add_source(admin, server.url, name="xa")
        sync(admin, first)
        server.tools = []
        assert sync(admin, first)["removed"] == 1
        server.tools = [tool("c", "The c tool.")]
        second = add_source(admin, server.url, name="other", prefix="xa_b")
        refused = sync(admin, second, status=502)["error"]
        assert refused["field"] == "tools[c].name"
        assert f"the name of another source's tool (mcp:{first['id']})" in refused["message"]
        assert "delete that source, or delete this source and add it again" in refused["message"]
        assert "xa_b_c" not in live(admin)
        server.tools = [tool("b_c", "The b c tool.")]
        assert sync(admin, first)["status"] == "synced"
        assert live(admin)["xa_b_c"]["source"] == f"mcp:{first['id']}"
        admin.ok(admin.delete(f"/admin/v1/mcp/sources/{first['id']}"), 204)
        server.tools = [tool("c", "The c tool.")]
        assert sync(admin, second)["status"] == "synced"
        assert live(admin)["xa_b_c"]["source"] == f"mcp:{second['id']}"


class TestReviewSurvivesAFoldingRename:
    @pytest.mark.parametrize("decision", ["approve", "reject"])
    def test_a_decided_tool_renamed_to_the_same_name_is_held_again(
        self, admin: Caller, server: LiveServer, decision: str
    ) -> None:
        server.tools = [tool("p.q", "Transfer money to any account.")]
        source = add_source(admin, server.url)
        assert sync(admin, source)["held"] == 0
        entry = entries(admin)["srv_p_q"]
        admin.ok(
            admin.post(
                f"/admin/v1/mcp/tools/{entry['tool_id']}/{decision}",
                {"definition_hash": entry["definition_hash"]},
            )
        )
        server.tools = [tool("p_q", "Transfer money to any account.")]
        assert sync(admin, source)["held"] == 1
        assert entries(admin)["srv_p_q"]["review_state"] == "held"
        assert live(admin)["srv_p_q"]["required_permission"] == "mcp.review"


class TestUnstorableDefinitions:
    @pytest.mark.parametrize(
        ("extra", "where"),
        [
            ({"name": "bad\u0000name"}, "name"),
            ({"_meta": {"note": "a\u0000b"}}, "_meta.note"),
            ({"icons": [{"src": "https://x/\u0000.png"}]}, "icons"),
        ],
    )
    def test_a_nul_anywhere_fails_the_sync_naming_it_and_changes_nothing(
        self, admin: Caller, server: LiveServer, extra: dict[str, Any], where: str
    ) -> None:
        server.tools = [tool("fine", "A fine tool.")]
        source = add_source(admin, server.url)
        sync(admin, source)
        before = registry(admin)
        server.tools = [tool("fine", "A fine tool."), {**tool("odd", "Odd."), **extra}]
        error = sync(admin, source, status=502)["error"]
        assert where in (error["field"] or ""), error
        assert "NUL" in error["message"]
        state = source_state(admin, source)
        assert (state["health"], state["consecutive_failures"]) == ("unhealthy", 1)
        assert registry(admin) == before


class TestSourceUrls:
    @pytest.mark.parametrize("url", ["http://[::1", "http://example.com:99999/mcp"])
    def test_an_unparseable_url_is_422_naming_it(
        self, admin: Caller, server: LiveServer, url: str
    ) -> None:
        response = admin.post(
            "/admin/v1/mcp/sources", {"name": "srv", "transport": "http", "url": url}
        )
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "url"
        source = add_source(admin, server.url)
        response = admin.patch(f"/admin/v1/mcp/sources/{source['id']}", {"url": url})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "url"
