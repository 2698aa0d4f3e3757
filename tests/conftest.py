from __future__ import annotations

import gc
import signal
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from toolsift.app import create_app
from toolsift.config import Settings
from toolsift.db import Database

from .fixtures.db import _session_database, database, database_url, owner_conn, pg_server
from .fixtures.factories import PEPPER, Caller, agent_key, new_tenant, support_catalog
from .fixtures.redis import redis_server, redis_url

__all__ = [
    "_session_database", "database", "database_url", "owner_conn", "pg_server", "redis_server",
    "redis_url",
]  # fmt: skip

OPERATOR_KEY = "operator-test-key"


@pytest.fixture(scope="module", autouse=True)
def _collect_each_module() -> Iterator[None]:
    """Whatever a module leaves unclosed (a socket in a reference cycle) warns in that
    module's last test, not in whichever test of another file the collector happens to run
    during: `filterwarnings = error` then names the module that leaked."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def worker_id(request: pytest.FixtureRequest) -> str:
    """xdist's worker id, or "main" without xdist."""
    return str(getattr(request.config, "workerinput", {}).get("workerid", "main"))


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(
        env="testing", database_url=database_url, key_pepper=PEPPER, operator_key=OPERATOR_KEY
    )


@pytest.fixture
def client(settings: Settings, database: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database)) as test_client:
        yield test_client


@pytest.fixture
def admin(client: TestClient, database: Database) -> Caller:
    return new_tenant(client, database, "acme")


@pytest.fixture
def catalog(admin: Caller) -> dict[str, str]:
    return support_catalog(admin)


@pytest.fixture
def support_agent(admin: Caller, catalog: dict[str, str]) -> Caller:
    """An agent key that may act as support (crm.read + orders.read) or billing."""
    return agent_key(admin, ["support", "billing"])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The cases property tests ran, as each recorded them (xdist ships user_properties back)."""
    counts: dict[str, int] = {}
    for report in terminalreporter.stats.get("passed", []):
        for name, value in getattr(report, "user_properties", []):
            if name == "property_cases":
                counts[report.nodeid] = int(value)
    if counts:
        terminalreporter.write_sep("-", f"property cases: {sum(counts.values())} in total")
        for nodeid, count in sorted(counts.items()):
            terminalreporter.write_line(f"{count:6d}  {nodeid}")


@pytest.fixture
def interruptible() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt, as in a terminal. A runner started in the background by
    a script (`make test &`) inherits SIGINT ignored, and Python then installs no handler."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
