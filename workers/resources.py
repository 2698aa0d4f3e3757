"""Per-process resources of a worker, created lazily after fork."""

from __future__ import annotations

from toolsift.config import get_settings
from toolsift.db import Database

_database: Database | None = None


def database() -> Database:
    global _database
    if _database is None:
        url = get_settings().database_url
        if not url:
            raise RuntimeError("DATABASE_URL is not set")
        _database = Database(url, pool_size=2)
    return _database


def reset() -> None:
    global _database
    if _database is not None:
        _database.engine.dispose(close=False)
    _database = None
