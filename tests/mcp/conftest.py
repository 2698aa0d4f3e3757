from __future__ import annotations

from ..fixtures.mcp import OPERATOR_KEY, SECRET_KEY, server, settings

__all__ = ["OPERATOR_KEY", "SECRET_KEY", "server", "settings"]
