from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from toolsift.config import Settings

from ..fixtures.factories import PEPPER
from .servers.live import LiveServer

OPERATOR_KEY = "operator-test-key"
SECRET_KEY = "test-secret-key-for-mcp-sources"


@pytest.fixture
def settings(database_url: str) -> Settings:
    """The root settings, plus this interpreter as the one stdio command sources may run."""
    return Settings(
        env="testing",
        database_url=database_url,
        key_pepper=PEPPER,
        operator_key=OPERATOR_KEY,
        secret_key=SECRET_KEY,
        mcp_stdio_commands=[sys.executable],
    )


@pytest.fixture
def server() -> Iterator[LiveServer]:
    live = LiveServer().start()
    yield live
    live.stop()
