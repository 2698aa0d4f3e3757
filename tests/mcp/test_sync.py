"""Importing catalogs from real MCP servers (the SDK's, started here) through the admin API."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.fixtures.factories import Caller, agent_key, new_tenant
from toolsift.app import create_app
from toolsift.config import Settings
from toolsift.db import Database
from toolsift.errors import AppError
from toolsift.mcp.endpoints_admin import INLINE_SYNCS
from toolsift.mcp.fetch import FetchError
from toolsift.mcp.schemas import SourceCreate
from toolsift.mcp.service import mcp
from toolsift.mcp.sync import sync_source

from .servers.live import LiveServer, tool

ROOT = Path(__file__).resolve().parents[2]


PY = sys.executable


def add_source(admin: Caller, url: str, name: str = "srv", **extra: Any) -> dict[str, Any]:
    body = {"name": name, "transport": "http", "url": url, **extra}
    return admin.ok(admin.post("/admin/v1/mcp/sources", body), 201)  # type: ignore[no-any-return]


def sync(admin: Caller, source: dict[str, Any], status: int = 200) -> dict[str, Any]:
    return admin.ok(  # type: ignore[no-any-return]
        admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync"), status
    )


def registry(admin: Caller) -> dict[str, dict[str, Any]]:
    """Every tool of the tenant by name, deleted ones included."""
    page = admin.ok(admin.get("/admin/v1/tools", params={"include_deleted": True, "limit": 1000}))
    return {t["name"]: t for t in page["items"]}


def live(admin: Caller) -> dict[str, dict[str, Any]]:
    return {n: t for n, t in registry(admin).items() if t["deleted_at"] is None}


def source_state(admin: Caller, source: dict[str, Any]) -> dict[str, Any]:
    return admin.ok(admin.get(f"/admin/v1/mcp/sources/{source['id']}"))  # type: ignore[no-any-return]


def catalog(n: int) -> list[dict[str, Any]]:
    words = ["invoice", "shipment", "calendar", "weather", "ledger", "playlist", "ticket", "vault"]
    return [tool(f"t{i}", f"Manage the {words[i % len(words)]} number {i}.") for i in range(n)]


@pytest.fixture
def agent(admin: Caller) -> Caller:
    """An agent holding no role: it sees public tools only."""
    return agent_key(admin, [], name="plain")


class TestSync:
    def test_a_catalog_of_several_pages(
        self, admin: Caller, agent: Caller, server: LiveServer
    ) -> None:
        server.tools = catalog(8)
        source = add_source(admin, server.url)
        result = sync(admin, source)
        assert (result["pages"], result["tools"], result["created"]) == (3, 8, 8)
        tools = live(admin)
        assert sorted(tools, key=lambda n: tools[n]["position"]) == [f"srv_t{i}" for i in range(8)]
        assert {t["source"] for t in tools.values()} == {f"mcp:{source['id']}"}
        state = source_state(admin, source)
        assert (state["health"], state["tool_count"], state["last_error"]) == ("healthy", 8, None)
        assert "srv_t5" in agent.names("the playlist please", k=1)

    def test_edit_rename_and_removal(
        self, admin: Caller, agent: Caller, server: LiveServer
    ) -> None:
        server.tools = catalog(6)
        source = add_source(admin, server.url)
        sync(admin, source)
        before = live(admin)
        server.tools[1] = tool("t1", "Manage the shipment number 1, now with tracking.")
        server.tools[2] = tool("t2_renamed", server.tools[2]["description"])  # a rename
        del server.tools[3]  # a removal
        result = sync(admin, source)
        assert (result["created"], result["updated"], result["removed"]) == (1, 1, 2)
        assert result["unchanged"] == 3
        after = registry(admin)
        # The edit: a new version at the same position.
        assert after["srv_t1"]["version"] == 2
        assert after["srv_t1"]["position"] == before["srv_t1"]["position"]
        assert "tracking" in after["srv_t1"]["description"]
        # The rename: the old name soft-deleted, the new one appended.
        assert after["srv_t2"]["deleted_at"] is not None
        assert after["srv_t2_renamed"]["position"] > max(t["position"] for t in before.values())
        # The removal: soft-deleted, out of selection.
        assert after["srv_t3"]["deleted_at"] is not None
        assert "srv_t3" not in agent.names("weather", k=10, budget_tokens=100_000)
        # Untouched tools keep version and position.
        for name in ("srv_t0", "srv_t4", "srv_t5"):
            assert (after[name]["version"], after[name]["position"]) == (
                1,
                before[name]["position"],
            )
        assert "srv_t1" in agent.names("tracking of the shipment", k=1)

    def test_an_unchanged_catalog_changes_nothing(self, admin: Caller, server: LiveServer) -> None:
        server.tools = catalog(4)
        source = add_source(admin, server.url)
        sync(admin, source)
        before = registry(admin)
        result = sync(admin, source)
        assert (result["unchanged"], result["created"], result["updated"]) == (4, 0, 0)
        assert registry(admin) == before

    def test_a_tool_that_comes_back_keeps_its_position(
        self, admin: Caller, server: LiveServer
    ) -> None:
        server.tools = catalog(3)
        source = add_source(admin, server.url)
        sync(admin, source)
        position = live(admin)["srv_t1"]["position"]
        removed = server.tools.pop(1)
        sync(admin, source)
        server.tools.append(removed)
        sync(admin, source)
        back = live(admin)["srv_t1"]
        assert (back["position"], back["version"]) == (position, 2)

    def test_a_stdio_server(self, admin: Caller, tmp_path: Path) -> None:
        file = tmp_path / "catalog.json"
        file.write_text(json.dumps({"tools": catalog(5)}))
        body = {
            "name": "local",
            "transport": "stdio",
            "command": sys.executable,
            "args": ["-m", "tests.mcp.servers.paged", str(file), "2"],
            "env": {"PYTHONPATH": str(ROOT)},
        }
        source = admin.ok(admin.post("/admin/v1/mcp/sources", body), 201)
        assert source["env_names"] == ["PYTHONPATH"]
        result = sync(admin, source)
        assert (result["pages"], result["created"]) == (3, 5)
        file.write_text(json.dumps({"tools": catalog(4)}))
        assert sync(admin, source)["removed"] == 1
        assert sorted(live(admin)) == [f"local_t{i}" for i in range(4)]

    def test_a_stdio_server_that_dies_is_reported_with_its_stderr_and_no_secret(
        self, admin: Caller
    ) -> None:
        token = "tok-secret-abcdefghij"
        script = "import os, sys; sys.exit('rejected API_TOKEN=' + os.environ['API_TOKEN'])"
        body = {
            "name": "local",
            "transport": "stdio",
            "command": sys.executable,
            "args": ["-c", script],
            "env": {"API_TOKEN": token},
        }
        source = admin.ok(admin.post("/admin/v1/mcp/sources", body), 201)
        failed = admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync")
        assert failed.status_code == 502
        assert failed.json()["error"]["field"] == "command"
        error = source_state(admin, source)["last_error"]
        assert "its stderr ended: 'rejected API_TOKEN=[redacted]'" in error
        assert token not in failed.text

    def test_slow_servers_take_only_so_many_of_the_api_s_threads(
        self, admin: Caller, server: LiveServer
    ) -> None:
        server.tools = catalog(2)
        sources = [add_source(admin, server.url, name=f"s{i}") for i in range(INLINE_SYNCS + 1)]
        server.gate = threading.Event()
        with ThreadPoolExecutor(INLINE_SYNCS) as pool:
            try:
                running = [
                    pool.submit(admin.post, f"/admin/v1/mcp/sources/{s['id']}/sync")
                    for s in sources[:INLINE_SYNCS]
                ]
                deadline = time.monotonic() + 20
                while server.waiting < INLINE_SYNCS:
                    assert time.monotonic() < deadline, "the syncs did not reach the server"
                    time.sleep(0.05)
                again = admin.post(f"/admin/v1/mcp/sources/{sources[0]['id']}/sync")
                busy = admin.post(f"/admin/v1/mcp/sources/{sources[-1]['id']}/sync")
                tenant = admin.get("/admin/v1/tenant")  # other requests are served meanwhile
            finally:
                server.gate.set()
            assert [r.result().status_code for r in running] == [200] * INLINE_SYNCS
        assert again.status_code == 409, again.text
        assert busy.status_code == 503, busy.text
        assert (busy.json()["error"]["code"], busy.headers["retry-after"]) == ("busy", "5")
        assert tenant.status_code == 200
        server.gate = None
        assert sync(admin, sources[-1])["created"] == 2

    def test_a_deployment_for_public_servers_only_refuses_private_addresses(
        self, settings: Settings, database: Database, server: LiveServer
    ) -> None:
        public_only = settings.model_copy(update={"mcp_private_networks": False})
        server.tools = catalog(2)
        with TestClient(create_app(public_only, database)) as client:
            admin = new_tenant(client, database, "acme")
            for url in ("http://127.0.0.1:8000/mcp", "http://[::ffff:169.254.169.254]/x"):
                refused = admin.post(
                    "/admin/v1/mcp/sources", {"name": "s", "transport": "http", "url": url}
                )
                assert refused.status_code == 422, refused.text
                assert refused.json()["error"]["field"] == "url"
                assert "not a public address" in refused.json()["error"]["message"]
            # A name that resolves to loopback passes the literal check, not the sync's.
            named = server.url.replace("127.0.0.1", "localhost")
            source = add_source(admin, named)
            failed = admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync")
        assert failed.status_code == 502, failed.text
        assert failed.json()["error"]["message"] == (
            "localhost resolves to an address that is not public; this deployment lets MCP"
            " sources reach public addresses only (TOOLSIFT_MCP_PRIVATE_NETWORKS)"
        )
        assert server.headers == []  # nothing reached the server

    def test_a_secret_cut_by_the_stderr_tail_is_scrubbed_before_the_cut(
        self, admin: Caller
    ) -> None:
        token = "sk-live-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcd"
        script = (
            "import os, sys; sys.stderr.write('auth failed for token ' + os.environ['API_TOKEN']"
            " + '\\n' + 'x' * 262 + '\\n'); sys.exit(1)"
        )
        body = {
            "name": "local", "transport": "stdio", "command": PY,
            "args": ["-c", script], "env": {"API_TOKEN": token},
        }  # fmt: skip
        source = admin.ok(admin.post("/admin/v1/mcp/sources", body), 201)
        failed = admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync")
        assert failed.status_code == 502
        error = source_state(admin, source)["last_error"]
        assert "x" * 262 in error
        for piece in (token[i : i + 8] for i in range(0, len(token) - 8)):
            assert piece not in error + failed.text

    def test_a_variable_the_operator_no_longer_lists_stops_the_sync(
        self, admin: Caller, database: Database, settings: Settings
    ) -> None:
        body = {
            "name": "local", "transport": "stdio", "command": PY,
            "args": ["-c", "pass"], "env": {"API_TOKEN": "tok-abcdefgh"},
        }  # fmt: skip
        source = admin.ok(admin.post("/admin/v1/mcp/sources", body), 201)
        narrower = settings.model_copy(update={"mcp_stdio_env": ["PYTHONPATH"]})

        def never(target: Any) -> Any:
            raise AssertionError("the program must not start")

        result = sync_source(
            database, admin.tenant_id, source["id"], settings=narrower, fetch=never
        )
        assert (result.status, result.field, result.error) == (
            "failed",
            "env",
            "env: API_TOKEN may not be set here: the operator lists the variables a stdio"
            " source may set in TOOLSIFT_MCP_STDIO_ENV",
        )

    def test_secrets_sealed_under_another_key_name_the_secret_to_set_again(
        self, admin: Caller, database: Database, settings: Settings, server: LiveServer
    ) -> None:
        source = add_source(admin, server.url, bearer_token="tok-abcdefgh")
        rekeyed = settings.model_copy(update={"secret_key": "another-" + "k" * 40})
        result = sync_source(database, admin.tenant_id, source["id"], settings=rekeyed)
        assert (result.status, result.field) == ("failed", "bearer_token")
        assert "set them again" in (result.error or "")

    def test_a_server_that_goes_down_keeps_the_last_good_catalog(
        self, admin: Caller, agent: Caller, client: TestClient, server: LiveServer
    ) -> None:
        server.tools = catalog(4)
        source = add_source(admin, server.url)
        sync(admin, source)
        before = registry(admin)
        server.stop()
        failed = admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync")
        assert failed.status_code == 502
        assert failed.json()["error"]["code"] == "mcp_server_error"
        state = source_state(admin, source)
        assert state["health"] == "unhealthy"
        assert state["last_error"] == failed.json()["error"]["message"]
        assert state["consecutive_failures"] == 1
        assert registry(admin) == before
        assert "srv_t3" in agent.names("weather", k=1)
        assert "toolsift_sync_failures 1.0" in client.get("/metrics").text

    def test_annotations_are_hints_never_permissions(
        self, admin: Caller, catalog: dict[str, str], server: LiveServer
    ) -> None:
        output = {"type": "object", "properties": {"rows": {"type": "integer"}}}
        hints = {"readOnlyHint": True, "destructiveHint": False, "openWorldHint": False}
        server.tools = [
            tool("report", "Count the rows of a report.", annotations=hints, outputSchema=output)
        ]
        source = add_source(admin, server.url, default_permission="crm.read")
        sync(admin, source)
        stored = live(admin)["srv_report"]
        assert (stored["annotations"], stored["output_schema"]) == (hints, output)
        # "read only" changes nothing: the source's permission still applies.
        assert stored["required_permission"] == "crm.read"
        plain = agent_key(admin, [], name="plain")
        assert "srv_report" not in plain.names("count the rows of a report", k=5)
        support = agent_key(admin, ["support"], name="support")
        chosen = support.ok(support.select("count the rows of a report", format="mcp", k=5))
        shown = next(t for t in chosen["tools"] if t["name"] == "srv_report")
        assert (shown["annotations"], shown["outputSchema"]) == (hints, output)
        # An annotation change is a definition change: a new version.
        server.tools[0]["annotations"] = {**hints, "readOnlyHint": False}
        assert sync(admin, source)["updated"] == 1

    def test_the_server_s_order_is_kept(self, admin: Caller, server: LiveServer) -> None:
        """Imported schemas reach the model, and the review queue, in the server's order."""
        properties = {"query": {"type": "string"}, "page_size": {"type": "integer"}, "id": {}}
        schema = {"type": "object", "properties": properties}
        server.tools = [tool("search", "Search the tickets.", inputSchema=schema)]
        source = add_source(admin, server.url)
        sync(admin, source)
        assert list(live(admin)["srv_search"]["input_schema"]["properties"]) == list(properties)
        listed = admin.ok(admin.get("/admin/v1/mcp/tools"))
        assert list(listed[0]["definition"]["inputSchema"]["properties"]) == list(properties)
        agent = agent_key(admin, [], name="plain")
        (served,) = agent.ok(agent.select("search the tickets", format="mcp", k=1))["tools"]
        assert list(served["inputSchema"]["properties"]) == list(properties)
        assert sync(admin, source)["unchanged"] == 1

    def test_a_permission_per_tool_overrides_the_default(
        self, admin: Caller, catalog: dict[str, str], server: LiveServer
    ) -> None:
        server.tools = [tool("a", "Alpha tool"), tool("b", "Beta tool")]
        source = add_source(admin, server.url, default_permission="crm.read")
        sync(admin, source)
        b = live(admin)["srv_b"]
        admin.ok(admin.patch(f"/admin/v1/mcp/tools/{b['id']}", {"required_permission": None}))
        assert live(admin)["srv_b"]["required_permission"] is None
        sync(admin, source)  # a sync keeps the override
        assert live(admin)["srv_b"]["required_permission"] is None
        # A new default applies to every tool that inherits it.
        admin.ok(
            admin.patch(f"/admin/v1/mcp/sources/{source['id']}", {"default_permission": "admin"})
        )
        tools = live(admin)
        assert (tools["srv_a"]["required_permission"], tools["srv_b"]["required_permission"]) == (
            "admin",
            None,
        )
        admin.ok(admin.patch(f"/admin/v1/mcp/tools/{b['id']}", {"inherit": True}))
        assert live(admin)["srv_b"]["required_permission"] == "admin"

    def test_deleting_a_source_removes_its_tools(self, admin: Caller, server: LiveServer) -> None:
        server.tools = catalog(2)
        source = add_source(admin, server.url)
        sync(admin, source)
        admin.ok(admin.delete(f"/admin/v1/mcp/sources/{source['id']}"), 204)
        assert live(admin) == {}
        assert admin.get(f"/admin/v1/mcp/sources/{source['id']}").status_code == 404
        # Each removed row is in the audit log, its MCP tool rows included.
        items = admin.ok(admin.get("/admin/v1/audit?limit=1000"))["items"]
        removed = [i["table_name"] for i in items if i["action"] == "delete"]
        assert sorted(removed) == ["mcp_sources", "mcp_tools", "mcp_tools"]

    def test_a_deleted_sources_names_are_free_again(
        self, admin: Caller, server: LiveServer
    ) -> None:
        server.tools = catalog(2)
        first = add_source(admin, server.url)
        sync(admin, first)
        positions = {n: t["position"] for n, t in live(admin).items()}
        admin.ok(admin.delete(f"/admin/v1/mcp/sources/{first['id']}"), 204)
        # The same server added again: its tools come back under the same names and places.
        again = add_source(admin, server.url)
        sync(admin, again)
        assert {n: t["position"] for n, t in live(admin).items()} == positions
        assert {t["source"] for t in live(admin).values()} == {f"mcp:{again['id']}"}
        # A deleted tool's name can be taken by a manual tool, and the other way round.
        admin.ok(admin.delete(f"/admin/v1/mcp/sources/{again['id']}"), 204)
        admin.ok(admin.post("/admin/v1/tools", {"name": "srv_t0", "description": "mine"}), 201)
        mine = admin.ok(admin.get("/admin/v1/tools", params={"limit": 1000}))["items"]
        assert [(t["name"], t["source"]) for t in mine] == [("srv_t0", "manual")]
        admin.ok(admin.delete(f"/admin/v1/tools/{mine[0]['id']}"), 204)
        third = add_source(admin, server.url)
        sync(admin, third)
        assert set(live(admin)) == {"srv_t0", "srv_t1"}


class TestBadConfiguration:
    def test_an_unreachable_url(self, admin: Caller) -> None:
        source = add_source(admin, "http://127.0.0.1:9/mcp")
        response = admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync")
        assert response.status_code == 502
        assert response.json()["error"]["message"]
        assert source_state(admin, source)["health"] == "unhealthy"
        assert registry(admin) == {}

    def test_an_invalid_schema_names_the_tool_and_loses_nothing(
        self, admin: Caller, server: LiveServer
    ) -> None:
        server.tools = catalog(3)
        source = add_source(admin, server.url)
        sync(admin, source)
        before = registry(admin)
        server.tools.append(
            {"name": "bad", "inputSchema": {"type": "object", "properties": {"a": {"type": 5}}}}
        )
        del server.tools[0]
        response = admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync")
        assert response.status_code == 502
        assert response.json()["error"]["field"] == "tools[bad].inputSchema"
        assert registry(admin) == before  # srv_t0 was not removed either

    def test_a_hundred_thousand_tools_are_refused(self, admin: Caller, server: LiveServer) -> None:
        server.tools = catalog(2)
        source = add_source(admin, server.url)
        sync(admin, source)
        before = registry(admin)
        server.page_size = 5000
        server.tools = [tool(f"t{i}") for i in range(100_000)]
        response = admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync")
        assert response.status_code == 502
        assert "more than 10000 tools" in response.json()["error"]["message"]
        assert registry(admin) == before

    def test_a_ten_megabyte_description_is_refused(self, admin: Caller, server: LiveServer) -> None:
        server.tools = catalog(2)
        source = add_source(admin, server.url)
        sync(admin, source)
        before = registry(admin)
        server.tools.append(tool("huge", "x" * 10_000_000))
        response = admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync")
        assert response.status_code == 502
        error = response.json()["error"]
        assert error["field"] == "tools[huge]"
        assert "10000070-byte definition" in error["message"]
        assert registry(admin) == before

    def test_a_name_another_tool_has_is_refused(self, admin: Caller, server: LiveServer) -> None:
        admin.ok(admin.post("/admin/v1/tools", {"name": "srv_t0", "description": "mine"}), 201)
        server.tools = catalog(2)
        source = add_source(admin, server.url)
        response = admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync")
        assert response.status_code == 502
        assert response.json()["error"]["field"] == "tools[t0].name"
        assert live(admin)["srv_t0"]["description"] == "mine"

    def test_the_advice_for_a_taken_name_can_be_followed(
        self, admin: Caller, server: LiveServer
    ) -> None:
        """A source's prefix cannot be changed (PATCH refuses it): the error must not ask
        for that, but for what the admin can do."""
        mine = admin.ok(admin.post("/admin/v1/tools", {"name": "srv_t0", "description": "x"}), 201)
        server.tools = catalog(2)
        source = add_source(admin, server.url)
        error = sync(admin, source, status=502)["error"]
        assert error["message"] == (
            "tool 't0' would be 'srv_t0', the name of a manual tool: delete that tool, or"
            " delete this source and add it again with another prefix (a source's prefix"
            " cannot be changed)"
        )
        patch = admin.patch(f"/admin/v1/mcp/sources/{source['id']}", {"prefix": "other"})
        assert patch.status_code == 422, patch.text
        # Either remedy works: another prefix for a new source...
        admin.ok(admin.delete(f"/admin/v1/mcp/sources/{source['id']}"), 204)
        again = add_source(admin, server.url, prefix="other")
        assert sync(admin, again)["created"] == 2
        # ...or the manual tool deleted, after which the name is free.
        taken = add_source(admin, server.url, name="srv2", prefix="srv")
        assert "a manual tool" in sync(admin, taken, status=502)["error"]["message"]
        admin.ok(admin.delete(f"/admin/v1/tools/{mine['id']}"), 204)
        assert sync(admin, taken)["status"] == "synced"
        assert live(admin)["srv_t0"]["source"] == f"mcp:{taken['id']}"

    def test_a_server_that_is_down_is_a_502_naming_the_url(self, admin: Caller) -> None:
        with socket.socket() as probe:  # a port nothing listens on once it is closed
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        source = add_source(admin, f"http://127.0.0.1:{port}/mcp")
        response = admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync")
        assert response.status_code == 502, response.text
        error = response.json()["error"]
        assert (error["code"], error["field"]) == ("mcp_server_error", "url")
        assert "ConnectError" in error["message"]
        assert source_state(admin, source)["last_error"] == error["message"]

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"transport": "http"}, "url"),
            ({"transport": "http", "url": "ftp://example.com/mcp"}, "url"),
            ({"transport": "http", "url": "https://u:p@example.com/mcp"}, "url"),
            ({"transport": "http", "url": "https://example.com", "command": "x"}, "command"),
            ({"transport": "stdio", "command": "/bin/sh"}, "command"),
            ({"transport": "stdio"}, "command"),
            ({"transport": "http", "url": "https://e.com", "headers": {"a b": "c"}}, "headers"),
            (
                {
                    "transport": "http",
                    "url": "https://e.com",
                    "headers": {"Authorization": "x"},
                    "bearer_token": "y",
                },
                "headers",
            ),
            (
                {"transport": "http", "url": "https://e.com", "default_permission": "nope"},
                "default_permission",
            ),
            (
                {"transport": "http", "url": "https://e.com", "default_permission": "mcp.review"},
                "default_permission",
            ),
            ({"transport": "http", "url": "https://e.com", "prefix": "a b"}, "prefix"),
            ({"transport": "carrier-pigeon", "url": "https://e.com"}, "transport"),
            ({"transport": "stdio", "command": PY, "env": {"LD_PRELOAD": "/tmp/x.so"}}, "env"),
            ({"transport": "stdio", "command": PY, "env": {"PYTHONWARNINGS": "x"}}, "env"),
            ({"transport": "stdio", "command": PY, "env": {"BROWSER": "sh -c id"}}, "env"),
            ({"transport": "stdio", "command": PY, "env": {"A=B": "c"}}, "env"),
        ],
    )
    def test_bad_source_input_names_the_field(
        self, admin: Caller, body: dict[str, Any], field: str
    ) -> None:
        response = admin.post("/admin/v1/mcp/sources", {"name": "srv", **body})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == field
        assert admin.ok(admin.get("/admin/v1/mcp/sources")) == []

    def test_a_disabled_source_is_not_synced(self, admin: Caller, server: LiveServer) -> None:
        server.tools = catalog(1)
        source = add_source(admin, server.url, enabled=False)
        response = admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync")
        assert (response.status_code, response.json()["error"]["field"]) == (409, "enabled")
        assert server.headers == []
        admin.ok(admin.patch(f"/admin/v1/mcp/sources/{source['id']}", {"enabled": True}))
        assert sync(admin, source)["created"] == 1

    def test_names_and_prefixes_are_unique(self, admin: Caller) -> None:
        add_source(admin, "https://e.com/mcp", name="one", prefix="p")
        taken = admin.post(
            "/admin/v1/mcp/sources", {"name": "one", "transport": "http", "url": "https://e.com"}
        )
        assert (taken.status_code, taken.json()["error"]["field"]) == (409, "name")
        prefix = admin.post(
            "/admin/v1/mcp/sources",
            {"name": "two", "transport": "http", "url": "https://e.com", "prefix": "p"},
        )
        assert (prefix.status_code, prefix.json()["error"]["field"]) == (409, "prefix")


class TestSecrets:
    def test_sent_to_the_server_and_never_shown(
        self, admin: Caller, server: LiveServer, owner_conn: Any
    ) -> None:
        header, token = "hdr-secret-1234567890", "tok-secret-abcdefghij"
        server.tools = catalog(1)
        body = {"headers": {"X-Api-Key": header}, "bearer_token": token}
        created = admin.post(
            "/admin/v1/mcp/sources",
            {"name": "srv", "transport": "http", "url": server.url, **body},
        )
        source = admin.ok(created, 201)
        assert (source["header_names"], source["has_bearer_token"]) == (["X-Api-Key"], True)
        sync(admin, source)
        assert server.headers[-1]["x-api-key"] == header
        assert server.headers[-1]["authorization"] == f"Bearer {token}"
        shown = [
            created.text,
            admin.get("/admin/v1/mcp/sources").text,
            admin.get(f"/admin/v1/mcp/sources/{source['id']}").text,
            admin.get("/admin/v1/audit").text,
        ]
        stored = owner_conn.execute("SELECT row_to_json(s)::text FROM mcp_sources s").fetchall()
        audited = owner_conn.execute("SELECT row_to_json(a)::text FROM audit_log a").fetchall()
        for text in [*shown, *(r[0] for r in stored), *(r[0] for r in audited)]:
            assert header not in text
            assert token not in text
        cleared = admin.ok(
            admin.patch(f"/admin/v1/mcp/sources/{source['id']}", {"bearer_token": None})
        )
        assert (cleared["has_bearer_token"], cleared["header_names"]) == (False, ["X-Api-Key"])
        sync(admin, source)
        assert "authorization" not in server.headers[-1]

    def test_an_error_never_carries_a_secret(
        self, admin: Caller, database: Database, settings: Settings, server: LiveServer
    ) -> None:
        token = "tok-secret-abcdefghij"
        source = add_source(admin, server.url, bearer_token=token)

        def leaky(target: Any) -> Any:
            raise FetchError(f"the server said: bad token {token}")

        result = sync_source(
            database, admin.tenant_id, source["id"], settings=settings, fetch=leaky
        )
        assert result.status == "failed"
        assert token not in (result.error or "")
        assert token not in (source_state(admin, source)["last_error"] or "")
        assert "[redacted]" in source_state(admin, source)["last_error"]

    @pytest.mark.parametrize(
        "quoted",
        [
            lambda v: v,
            lambda v: urllib.parse.quote(v),
            lambda v: urllib.parse.quote(v, safe=""),
            lambda v: urllib.parse.quote_plus(v),
            lambda v: json.dumps(v)[1:-1],
        ],
        ids=["raw", "quote", "quote-all", "quote-plus", "json"],
    )
    def test_a_secret_quoted_by_the_server_is_scrubbed_too(
        self,
        admin: Caller,
        database: Database,
        settings: Settings,
        server: LiveServer,
        quoted: Callable[[str], str],
    ) -> None:
        secret = 'hdr secret/&val"x'
        body = {"name": "srv", "transport": "http", "url": server.url, "headers": {"X-S": secret}}
        source = admin.ok(admin.post("/admin/v1/mcp/sources", body), 201)

        def leaky(target: Any) -> Any:
            raise FetchError(f"the server said: {quoted(secret)} is wrong")

        result = sync_source(
            database, admin.tenant_id, source["id"], settings=settings, fetch=leaky
        )
        assert result.error == "the server said: [redacted] is wrong"

    def test_production_refuses_secrets_under_the_development_key(
        self, admin: Caller, database: Database
    ) -> None:
        production = Settings(env="production", key_pepper="a-real-pepper")
        body = {"name": "srv", "transport": "http", "url": "https://e.com/mcp"}
        with database.unit_of_work(admin.tenant_id, permissions="*") as session:
            with pytest.raises(AppError) as refused:
                mcp.create(
                    session,
                    admin.tenant_id,
                    SourceCreate(**body, bearer_token="t"),
                    settings=production,
                )
            assert refused.value.field == "bearer_token"
            # Without secrets there is nothing to protect: accepted.
            mcp.create(session, admin.tenant_id, SourceCreate(**body), settings=production)


class TestOwnership:
    def test_the_server_owns_the_definition_the_admin_owns_examples(
        self, admin: Caller, agent: Caller, server: LiveServer
    ) -> None:
        server.tools = catalog(2)
        source = add_source(admin, server.url)
        sync(admin, source)
        t0 = live(admin)["srv_t0"]
        edited = admin.patch(f"/admin/v1/tools/{t0['id']}", {"description": "mine now"})
        assert (edited.status_code, edited.json()["error"]["field"]) == (409, "description")
        hinted = admin.patch(f"/admin/v1/tools/{t0['id']}", {"annotations": {"readOnlyHint": True}})
        assert (hinted.status_code, hinted.json()["error"]["field"]) == (409, "annotations")
        overwritten = admin.put("/admin/v1/tools", {"tools": [{"name": "srv_t0"}]})
        assert (overwritten.status_code, overwritten.json()["error"]["field"]) == (
            409,
            "tools[0].name",
        )
        examples = ["bill the customer"]
        admin.ok(admin.patch(f"/admin/v1/tools/{t0['id']}", {"examples": examples}))
        sync(admin, source)
        kept = live(admin)["srv_t0"]
        assert (kept["examples"], kept["version"]) == (examples, 2)
        assert "srv_t0" in agent.names("bill the customer", k=1)

    def test_a_tool_gone_from_its_server_keeps_its_name_for_the_source(
        self, admin: Caller, server: LiveServer
    ) -> None:
        """Removed from the server or deleted by hand, a tool is still its source's while the
        source exists: a manual write of its name would go live in its place and make every
        later sync of the source fail on the name."""
        server.tools = catalog(3)
        source = add_source(admin, server.url)
        sync(admin, source)
        before = live(admin)
        removed = server.tools.pop(1)
        sync(admin, source)
        admin.ok(admin.delete(f"/admin/v1/tools/{before['srv_t0']['id']}"), 204)
        for name in ("srv_t1", "srv_t0"):
            taken = admin.put("/admin/v1/tools", {"tools": [{"name": name, "description": "x"}]})
            assert (taken.status_code, taken.json()["error"]["field"]) == (409, "tools[0].name")
            assert "MCP source 'srv'" in taken.json()["error"]["message"]
            created = admin.post("/admin/v1/tools", {"name": name, "description": "x"})
            assert (created.status_code, created.json()["error"]["field"]) == (409, "name")
        server.tools.insert(1, removed)
        sync(admin, source)
        back = live(admin)
        assert set(back) == {"srv_t0", "srv_t1", "srv_t2"}
        assert all(back[n]["position"] == before[n]["position"] for n in back)
        assert {t["source"] for t in back.values()} == {f"mcp:{source['id']}"}
        assert source_state(admin, source)["health"] == "healthy"

    def test_a_rename_that_folds_to_the_same_name_keeps_the_tool(
        self, admin: Caller, server: LiveServer
    ) -> None:
        server.tools = [tool("get.order", "Get an order.")]
        source = add_source(admin, server.url)
        sync(admin, source)
        before = live(admin)["srv_get_order"]
        server.tools = [tool("get_order", "Get an order.")]
        result = sync(admin, source)
        assert (result["created"], result["removed"]) == (0, 0)
        after = live(admin)["srv_get_order"]
        assert (after["id"], after["position"]) == (before["id"], before["position"])
        listed = admin.ok(admin.get("/admin/v1/mcp/tools", params={"source_id": source["id"]}))
        assert [t["remote_name"] for t in listed] == ["get_order"]
