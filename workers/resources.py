"""Per-process resources of a worker, created lazily after fork."""

from __future__ import annotations

from toolsift.config import get_settings
from toolsift.db import Database
from toolsift.embedding.base import EmbeddingBackend, get_backend

_database: Database | None = None
_backend: EmbeddingBackend | None = None


def database() -> Database:
    global _database
    if _database is None:
        url = get_settings().database_url
        if not url:
            raise RuntimeError("DATABASE_URL is not set")
        _database = Database(url, pool_size=2)
    return _database


def embedding_backend() -> EmbeddingBackend:
    """The configured model, loaded once per worker process (on first use, after fork)."""
    global _backend
    if _backend is None:
        _backend = get_backend(get_settings())
    return _backend


def reset() -> None:
    global _database
    if _database is not None:
        _database.engine.dispose(close=False)
    _database = None
