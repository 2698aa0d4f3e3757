"""Reading a catalog over streamable HTTP from a real MCP server (the SDK's, under uvicorn)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
import pytest
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from toolsift.mcp.catalog import CatalogError, convert
from toolsift.mcp.fetch import FetchError, fetch_catalog_sync

CATALOG: list[dict[str, Any]] = []


def _app() -> Any:
    async def list_tools(_ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
        start = int(params.cursor) if params and params.cursor else 0
        page = CATALOG[start : start + 2]
        more = start + 2 < len(CATALOG)
        return types.ListToolsResult(
            tools=[types.Tool.model_validate(t) for t in page],
            next_cursor=str(start + 2) if more else None,
            ttl_ms=60_000,
        )

    manager = StreamableHTTPSessionManager(
        Server("http-test", on_list_tools=list_tools), stateless=True, json_response=True
    )

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with manager.run():
            yield

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            async with lifespan(None):
                message = await receive()
                assert message["type"] == "lifespan.startup"
                await send({"type": "lifespan.startup.complete"})
                await receive()
                await send({"type": "lifespan.shutdown.complete"})
            return
        await manager.handle_request(scope, receive, send)

    return app


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(_app(), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(timeout=20)


def _tool(name: str, description: str = "A tool.", **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": {"type": "object"}, **extra}


class TestFetchHttp:
    def test_pages_and_the_list_ttl(self, url: str) -> None:
        CATALOG[:] = [_tool(f"t{i}") for i in range(5)]
        catalog = fetch_catalog_sync(url)
        assert [t["name"] for t in catalog.tools] == ["t0", "t1", "t2", "t3", "t4"]
        assert catalog.pages == 3
        assert catalog.ttl_ms == 60_000

    def test_a_ten_megabyte_description_is_a_clear_error(self, url: str) -> None:
        CATALOG[:] = [_tool("t0"), _tool("huge", "x" * 10_000_000)]
        try:
            catalog = fetch_catalog_sync(url)
        except FetchError:
            return  # the transport refused the oversized message: also clear, nothing taken
        with pytest.raises(CatalogError, match="huge"):
            convert("srv", catalog.tools, permissions={}, default_permission=None)

    def test_an_invalid_schema_from_the_server_names_the_tool(self, url: str) -> None:
        bad = {"type": "object", "properties": {"a": {"type": 5}}}
        CATALOG[:] = [_tool("ok"), {"name": "bad", "inputSchema": bad}]
        catalog = fetch_catalog_sync(url)
        with pytest.raises(CatalogError) as caught:
            convert("srv", catalog.tools, permissions={}, default_permission=None)
        assert caught.value.field == "tools[bad].inputSchema"

    def test_a_hundred_thousand_tools_are_refused(self, url: str) -> None:
        CATALOG[:] = [_tool(f"t{i}") for i in range(100_000)]
        with pytest.raises(FetchError, match="more than 10 tools"):
            fetch_catalog_sync(url, max_tools=10)
        with pytest.raises(FetchError, match="within 50 pages"):
            fetch_catalog_sync(url, max_pages=50)
