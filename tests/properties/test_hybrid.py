"""Mode hybrid: never a foreign or forbidden tool in any output; identical inputs, identical outputs."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from toolsift.db import Database
from toolsift.embedding.base import EmbeddingBackend

from .harness import run_in_process, run_over_http, run_over_mcp
from .world import World

# Thousands of cases: far past the suite's per-test timeout on a busy machine.
pytestmark = pytest.mark.timeout(1800)

MODE = "hybrid"


def test_in_process(
    world: World,
    store: Database,
    embedder: EmbeddingBackend,
    record_property: Callable[[str, object], None],
) -> None:
    run_in_process(MODE, world, store, embedder, record_property)


def test_over_http(
    world: World, http: TestClient, record_property: Callable[[str, object], None]
) -> None:
    run_over_http(MODE, world, http, record_property)


def test_the_search_tool_over_mcp(
    world: World, http: TestClient, record_property: Callable[[str, object], None]
) -> None:
    run_over_mcp(world, http, record_property)
