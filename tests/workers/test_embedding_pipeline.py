"""Tool writes reach the vectors through the outbox, a real broker and a real worker, whatever fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from uuid import UUID

import psycopg
import pytest

from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.embedded import EmbeddedRedis
from toolsift.tenants.schemas import TenantCreate
from toolsift.tenants.service import tenant as tenant_service
from toolsift.tools.schemas import ToolCreate
from toolsift.tools.service import tool as tool_service

from ..fixtures.factories import PEPPER

OwnerConn = psycopg.Connection[tuple[object, ...]]
StartWorker = Callable[[], subprocess.Popen[bytes]]


@pytest.fixture
def start_worker(
    redis_server: EmbeddedRedis, database_url: str, tmp_path: Path
) -> Iterator[StartWorker]:
    """Workers with the relay schedule inside, in their own process group (beat is a child)."""
    started: list[subprocess.Popen[bytes]] = []
    env = {
        **os.environ,
        "TOOLSIFT_REDIS_URL": redis_server.url,
        "TOOLSIFT_DATABASE_URL": database_url,
        "TOOLSIFT_OUTBOX_RELAY_INTERVAL": "0.3",
        # Short, so a job lost with a killed worker is published again within the test.
        "TOOLSIFT_OUTBOX_LEASE_SECONDS": "5",
        "TOOLSIFT_EMBED_BATCH_TOOLS": "64",
    }

    def start() -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "celery", "-A", "workers", "worker", "--pool", "solo"]
        command += ["--beat", "--schedule", str(tmp_path / f"beat-{len(started)}")]
        process = subprocess.Popen(
            [*command, "--loglevel", "WARNING"], env=env, start_new_session=True
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _tenant(database: Database) -> UUID:
    with database.unit_of_work(None) as session:
        return tenant_service.create(session, TenantCreate(name="acme"), pepper=PEPPER).tenant.id


def _upsert(database: Database, tenant_id: UUID, tools: list[ToolCreate]) -> None:
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        tool_service.upsert(session, tenant_id, tools)


def _state(owner_conn: OwnerConn, tenant_id: UUID) -> tuple[int, int, int, int]:
    """(live tools, vectors at the tool's current version, vectors in all, pending jobs)."""
    row = owner_conn.execute(
        """
        SELECT (SELECT count(*) FROM tools WHERE tenant_id = %(t)s AND deleted_at IS NULL),
               (SELECT count(*) FROM tool_embeddings e JOIN tools t
                    ON t.tenant_id = e.tenant_id AND t.id = e.tool_id AND t.version = e.version
                WHERE e.tenant_id = %(t)s),
               (SELECT count(*) FROM tool_embeddings WHERE tenant_id = %(t)s),
               (SELECT count(*) FROM outbox WHERE tenant_id = %(t)s)
        """,
        {"t": tenant_id},
    ).fetchone()
    assert row is not None
    return (int(row[0]), int(row[1]), int(row[2]), int(row[3]))  # type: ignore[call-overload]


def _wait_until_embedded(owner_conn: OwnerConn, tenant_id: UUID, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tools, current, total, pending = _state(owner_conn, tenant_id)
        if tools == current == total and pending == 0:
            return
        time.sleep(0.3)
    pytest.fail(
        f"not embedded in {timeout}s: (tools, current, vectors, jobs) = {_state(owner_conn, tenant_id)}"
    )


def _catalog(count: int, word: str = "report") -> list[ToolCreate]:
    return [
        ToolCreate(name=f"tool_{i:05d}", description=f"Make the {word} number {i} for a customer")
        for i in range(count)
    ]


class TestPipeline:
    def test_a_write_and_then_an_update_reach_the_vectors(
        self, start_worker: StartWorker, database: Database, owner_conn: OwnerConn
    ) -> None:
        start_worker()
        tenant_id = _tenant(database)
        _upsert(database, tenant_id, [ToolCreate(name="order_status", description="Where is it")])
        _wait_until_embedded(owner_conn, tenant_id, timeout=90)
        _upsert(database, tenant_id, [ToolCreate(name="order_status", description="Track it")])
        _wait_until_embedded(owner_conn, tenant_id, timeout=60)
        version = owner_conn.execute(
            "SELECT version FROM tool_embeddings WHERE tenant_id = %s", (tenant_id,)
        ).fetchall()
        assert version == [(2,)]

    def test_a_worker_killed_mid_import_loses_nothing(
        self, start_worker: StartWorker, database: Database, owner_conn: OwnerConn
    ) -> None:
        tenant_id = _tenant(database)
        first = start_worker()
        tools = _catalog(2_000)
        for start in range(0, len(tools), 500):
            _upsert(database, tenant_id, tools[start : start + 500])
        # Some tools change again while the first versions are being embedded.
        _upsert(database, tenant_id, _catalog(100, word="invoice"))
        deadline = time.monotonic() + 120
        while _state(owner_conn, tenant_id)[2] < 100:
            assert time.monotonic() < deadline, "the first worker embedded nothing"
            time.sleep(0.1)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        tools_count, current, _, pending = _state(owner_conn, tenant_id)
        assert current < tools_count, "killed too late to prove anything"
        assert pending > 0
        start_worker()
        _wait_until_embedded(owner_conn, tenant_id, timeout=300)
        assert _state(owner_conn, tenant_id) == (2_000, 2_000, 2_000, 0)

    def test_writes_succeed_while_the_broker_is_down_and_embed_when_it_is_back(
        self,
        start_worker: StartWorker,
        redis_server: EmbeddedRedis,
        database: Database,
        owner_conn: OwnerConn,
    ) -> None:
        start_worker()
        tenant_id = _tenant(database)
        redis_server.stop()
        try:
            _upsert(database, tenant_id, _catalog(50))
            time.sleep(1.0)
            assert _state(owner_conn, tenant_id) == (50, 0, 0, 50)
        finally:
            redis_server.start()
        _wait_until_embedded(owner_conn, tenant_id, timeout=120)
