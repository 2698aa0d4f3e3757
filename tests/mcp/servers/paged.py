"""A real MCP server over stdio, written with the SDK: its catalog comes from a JSON file.

The file is read at every tools/list, so a test edits the catalog by rewriting it.
Run as `python -m tests.mcp.servers.paged CATALOG.json PAGE_SIZE`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


def build(catalog: Path, page_size: int) -> Server[Any]:
    async def list_tools(
        _ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        data = json.loads(catalog.read_text())
        start = int(params.cursor) if params and params.cursor else 0
        page = data["tools"][start : start + page_size]
        more = start + page_size < len(data["tools"])
        return types.ListToolsResult(
            tools=[types.Tool.model_validate(t) for t in page],
            next_cursor=str(start + page_size) if more else None,
        )

    return Server("paged", on_list_tools=list_tools)


async def main() -> None:
    server = build(Path(sys.argv[1]), int(sys.argv[2]))
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
