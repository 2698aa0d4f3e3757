"""schemathesis against the app's own OpenAPI document: no 5xx, every response as documented.

The real app (ASGI, in process) on the real database, called with real keys: an admin key
for /admin/v1, an agent key for /v1, the operator key for tenant creation. The tenant has
the design note's catalog, so generated selects and tool writes meet real rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import schemathesis
import uvicorn
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from psycopg import sql
from schemathesis import checks as core_checks
from schemathesis.specs.openapi import checks

from tests.conftest import OPERATOR_KEY
from tests.fixtures.factories import PEPPER, agent_key, new_tenant, support_catalog
from toolsift.app import create_app
from toolsift.config import Settings
from toolsift.db import Database
from toolsift.models import Base

EXAMPLES = 30
# No 5xx, and every status, content type, header and body as the document says. Left out:
# the checks that call a 4xx for a business rule the schema cannot state (a duplicate name,
# an unknown permission, a random id) a failure, and those that fight the fixed keys below.
CHECKS = [
    core_checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.allow_header_conformance,
    checks.unsupported_method,
]


@pytest.fixture(scope="module")
def keys(
    database_url: str,
    _session_database: Database,
    owner_conn: psycopg.Connection[tuple[object, ...]],
) -> Iterator[dict[str, str]]:
    settings = Settings(
        env="testing", database_url=database_url, key_pepper=PEPPER, operator_key=OPERATOR_KEY
    )
    with TestClient(create_app(settings, _session_database)) as client:
        admin = new_tenant(client, _session_database, "schemathesis")
        support_catalog(admin)
        agent = agent_key(admin, ["support", "billing"])
        yield {"admin": admin.key, "agent": agent.key, "operator": OPERATOR_KEY}
    tables = sql.SQL(", ").join(sql.Identifier(t.name) for t in Base.metadata.sorted_tables)
    owner_conn.execute(sql.SQL("TRUNCATE {} CASCADE").format(tables))


@pytest.fixture(scope="module")
def served(database_url: str, _session_database: Database) -> Iterator[str]:
    """The app under uvicorn on a free local port, in a thread; its lifespan runs once."""
    settings = Settings(
        env="testing", database_url=database_url, key_pepper=PEPPER, operator_key=OPERATOR_KEY
    )
    app = create_app(settings, _session_database)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "uvicorn exited"
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


# The document the served app publishes at /openapi.json (it needs no database to be built).
schema = schemathesis.openapi.from_dict(create_app(Settings(env="testing")).openapi())


def _key(path: str, method: str, keys: dict[str, str]) -> str:
    if path.startswith("/admin/v1/tenants"):  # create and delete: the operator's
        return keys["operator"]
    return keys["admin"] if path.startswith("/admin/") else keys["agent"]


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_api(case: Any, served: str, keys: dict[str, str]) -> None:
    headers = {"Authorization": f"Bearer {_key(case.path, case.method, keys)}"}
    case.call_and_validate(base_url=served, headers=headers, checks=CHECKS)
