"""The world the property tests draw callers and requests against, and their clients."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql

from tests.fixtures.factories import PEPPER
from toolsift.app import create_app
from toolsift.config import Settings
from toolsift.db import Database
from toolsift.embedding.base import EmbeddingBackend, EmbeddingConfig, get_backend
from toolsift.embedding.cache import CachedBackend
from toolsift.models import Base

from .world import World, build_world

SEED = 20261203


@pytest.fixture(scope="module")
def world(
    _session_database: Database, owner_conn: psycopg.Connection[tuple[object, ...]]
) -> Iterator[World]:
    """Four tenants of 24 tools (+4 without vectors, 3 deleted), built once per module."""
    yield build_world(_session_database, tenants=4, tools=24, seed=SEED)
    tables = sql.SQL(", ").join(sql.Identifier(t.name) for t in Base.metadata.sorted_tables)
    owner_conn.execute(sql.SQL("TRUNCATE {} CASCADE").format(tables))


@pytest.fixture(scope="module")
def store(_session_database: Database) -> Database:
    """The worker's application database (the world lives in it for the module)."""
    return _session_database


@pytest.fixture(scope="module")
def embedder() -> EmbeddingBackend:
    """The API's query embedder: the bundled ONNX model behind the same LRU."""
    return CachedBackend(get_backend(EmbeddingConfig()))


@pytest.fixture(scope="module")
def http(database_url: str, _session_database: Database, world: World) -> Iterator[TestClient]:
    settings = Settings(env="testing", database_url=database_url, key_pepper=PEPPER)
    with TestClient(create_app(settings, _session_database)) as client:
        yield client
