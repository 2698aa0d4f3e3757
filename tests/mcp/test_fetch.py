"""Reading a catalog from a real MCP server (the SDK's stdio transport, a server process)."""

from __future__ import annotations

import http.server
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from toolsift.mcp.fetch import FetchError, StdioTarget, fetch_catalog_sync

ROOT = Path(__file__).resolve().parents[2]


def _tools(n: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"tool_{i}",
            "description": f"Tool number {i}",
            "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}},
            "annotations": {"readOnlyHint": i % 2 == 0},
        }
        for i in range(n)
    ]


def _big(name: str, size: int) -> dict[str, Any]:
    return {"name": name, "description": "x" * size, "inputSchema": {"type": "object"}}


def _server(tmp_path: Path, tools: list[dict[str, Any]], page_size: int = 3) -> StdioTarget:
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"tools": tools}))
    return StdioTarget(
        command=sys.executable,
        args=["-m", "tests.mcp.servers.paged", str(catalog), str(page_size)],
        env={"PYTHONPATH": str(ROOT)},
    )


class TestFetch:
    def test_pages_through_to_the_end(self, tmp_path: Path) -> None:
        catalog = fetch_catalog_sync(_server(tmp_path, _tools(8), page_size=3))
        assert catalog.pages == 3
        assert [t["name"] for t in catalog.tools] == [f"tool_{i}" for i in range(8)]
        assert catalog.tools[0]["inputSchema"]["properties"] == {"x": {"type": "string"}}
        assert catalog.tools[0]["annotations"] == {"readOnlyHint": True}

    def test_too_many_tools_is_a_clear_error(self, tmp_path: Path) -> None:
        with pytest.raises(FetchError, match="more than 5 tools"):
            fetch_catalog_sync(_server(tmp_path, _tools(8), page_size=3), max_tools=5)

    def test_too_large_a_catalog_is_a_clear_error(self, tmp_path: Path) -> None:
        with pytest.raises(FetchError, match="take more than 1 MiB as JSON"):
            fetch_catalog_sync(
                _server(tmp_path, [*_tools(8), _big("huge", 2 << 20)]), max_bytes=1 << 20
            )

    def test_too_many_pages_is_a_clear_error(self, tmp_path: Path) -> None:
        with pytest.raises(FetchError, match="within 2 pages"):
            fetch_catalog_sync(_server(tmp_path, _tools(8), page_size=3), max_pages=2)

    def test_a_command_that_is_no_server_is_a_clear_error(self, tmp_path: Path) -> None:
        target = StdioTarget(command=sys.executable, args=["-c", "print('hello')"])
        with pytest.raises(FetchError):
            fetch_catalog_sync(target, timeout=20)

    def test_a_line_on_stdout_that_is_no_mcp_message_is_named(self) -> None:
        script = "import time; print('starting server v1.2', flush=True); time.sleep(30)"
        target = StdioTarget(command=sys.executable, args=["-c", script])
        with pytest.raises(FetchError) as failed:
            fetch_catalog_sync(target, timeout=2)
        assert str(failed.value) == (
            "the server did not list its tools within 2 s; it wrote a line to stdout that is"
            " not an MCP message ('starting server v1.2'): a stdio server must keep stdout for"
            " the protocol"
        )

    @pytest.mark.parametrize(
        ("status", "named"),
        [
            (401, "HTTP 401 Unauthorized"),
            (403, "HTTP 403 Forbidden"),
            (500, "HTTP 500 Internal Server Error"),
        ],
    )
    def test_an_http_status_that_refuses_the_listing_is_named(
        self, status: int, named: str
    ) -> None:
        class Refuses(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            do_GET = do_DELETE = do_POST

            def log_message(self, *_: object) -> None:
                pass

        with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuses) as httpd:
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
            try:
                with pytest.raises(FetchError) as failed:
                    fetch_catalog_sync(f"http://127.0.0.1:{httpd.server_port}/mcp", timeout=20)
            finally:
                httpd.shutdown()
        assert str(failed.value).startswith(f"the server answered {named} (")
        assert ("check the source's headers or bearer token" in str(failed.value)) == (status < 500)

    def test_an_unreachable_url_is_a_clear_error(self) -> None:
        with pytest.raises(FetchError):
            fetch_catalog_sync("http://127.0.0.1:9/mcp", timeout=20)


def test_a_reply_that_does_not_fit_the_protocol_is_named_where() -> None:
    import mcp_types
    from pydantic import ValidationError

    from toolsift.mcp.fetch import describe_error

    with pytest.raises(ValidationError) as caught:
        mcp_types.ListToolsResult.model_validate(
            {"tools": [{"name": "ok", "inputSchema": {"type": "object"}}, {"name": 5}]}
        )
    described = describe_error(caught.value)
    assert described.startswith("the server's reply does not fit ListToolsResult: tools.1.")
