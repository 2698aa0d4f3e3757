"""A real MCP server over streamable HTTP (the SDK's, under uvicorn) that a test can edit.

The catalog is a list the test changes between syncs; `notify()` publishes a tools-list-
changed event to `subscriptions/listen` streams; `stop()` takes the server down. Each request's
headers are kept, so a test can check what the importer sent.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from starlette.types import Receive, Scope, Send


def tool(name: str, description: str = "A tool.", **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": {"type": "object"}, **extra}


class LiveServer:
    def __init__(self, tools: list[dict[str, Any]] | None = None, *, page_size: int = 3) -> None:
        self.tools: list[dict[str, Any]] = list(tools or [])
        self.page_size = page_size
        self.ttl_ms = 0
        # When set, tools/list waits for it (a slow server); `waiting` counts those waiting.
        self.gate: threading.Event | None = None
        self.waiting = 0
        self.headers: list[dict[str, str]] = []
        self.bus = InMemorySubscriptionBus()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def _app(self) -> Any:
        async def list_tools(_ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
            if (gate := self.gate) is not None:
                self.waiting += 1
                await asyncio.to_thread(gate.wait, 60)
            start = int(params.cursor) if params and params.cursor else 0
            page = self.tools[start : start + self.page_size]
            more = start + self.page_size < len(self.tools)
            return types.ListToolsResult(
                tools=[types.Tool.model_validate(t) for t in page],
                next_cursor=str(start + self.page_size) if more else None,
                ttl_ms=self.ttl_ms,
            )

        server: Server[Any] = Server(
            "live", on_list_tools=list_tools, on_subscriptions_listen=ListenHandler(self.bus)
        )
        manager = StreamableHTTPSessionManager(server, stateless=True)

        @asynccontextmanager
        async def lifespan() -> AsyncIterator[None]:
            self._loop = asyncio.get_running_loop()
            async with manager.run():
                yield

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "lifespan":
                async with lifespan():
                    await receive()
                    await send({"type": "lifespan.startup.complete"})
                    await receive()
                    await send({"type": "lifespan.shutdown.complete"})
                return
            self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
            await manager.handle_request(scope, receive, send)

        return app

    def start(self) -> LiveServer:
        config = uvicorn.Config(self._app(), host="127.0.0.1", port=self.port, log_level="error")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            assert time.monotonic() < deadline, "the MCP server did not start"
            time.sleep(0.05)
        return self

    def notify(self) -> None:
        """Tell listening clients the tool list changed."""
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self.bus.publish(ToolsListChanged()), self._loop).result(
            timeout=10
        )

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._server.force_exit = True  # listen streams never end on their own
            self._thread.join(timeout=20)
            self._server = None
