from __future__ import annotations

# The world of the delete tests has an MCP source in it.
from ..fixtures.mcp import server, settings

__all__ = ["server", "settings"]
