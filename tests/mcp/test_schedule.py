"""Syncs that start by themselves: the schedule (beat), change notifications, a real worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import start_blocking_portal
from celery import Celery
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from tests.fixtures.factories import Caller, new_tenant
from toolsift.config import Settings
from toolsift.db import Database
from toolsift.mcp import listener
from toolsift.mcp.fetch import StdioTarget
from toolsift.mcp.sync import Due, due_sources, schedule, sync_source
from toolsift.models import McpSource

from .servers.live import LiveServer, tool
from .test_sync import add_source, live, source_state, sync


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


class TestSchedule:
    def test_due_sources_of_every_tenant_are_claimed_once(
        self, admin: Caller, client: TestClient, database: Database
    ) -> None:
        other = new_tenant(client, database, "globex")
        a = add_source(admin, "http://127.0.0.1:9/mcp")
        b = add_source(other, "http://127.0.0.1:9/mcp")
        add_source(admin, "http://127.0.0.1:9/mcp", name="off", enabled=False)
        queued: list[Due] = []
        assert schedule(database, queued.append) == 2
        assert {(d.tenant_id, str(d.source_id)) for d in queued} == {
            (admin.tenant_id, a["id"]),
            (other.tenant_id, b["id"]),
        }
        assert schedule(database, queued.append) == 0  # claimed: not queued twice

    def test_only_the_scheduler_reads_across_tenants(
        self, admin: Caller, database: Database
    ) -> None:
        add_source(admin, "http://127.0.0.1:9/mcp")
        assert len(due_sources(database)) == 1
        with database.unit_of_work(None) as session:
            assert session.scalars(select(McpSource.id)).all() == []
        with database.unit_of_work(None) as session:
            session.execute(text("SELECT set_config('app.scheduler', 'on', true)"))
            updated = session.execute(
                text("UPDATE mcp_sources SET name = 'stolen' RETURNING id")
            ).all()
            assert updated == []  # the scheduler policy is read-only

    def test_the_servers_list_ttl_sets_the_next_sync(
        self, admin: Caller, server: LiveServer
    ) -> None:
        server.tools = [tool("t0")]
        server.ttl_ms = 600_000
        source = add_source(admin, server.url, sync_interval_seconds=3600)
        before = datetime.now(UTC)
        sync(admin, source)
        state = source_state(admin, source)
        assert state["server_ttl_ms"] == 600_000
        wait = datetime.fromisoformat(state["next_sync_at"]) - before
        assert 590 <= wait.total_seconds() <= 610

    def test_a_failing_source_backs_off(self, admin: Caller, settings: Settings) -> None:
        source = add_source(admin, "http://127.0.0.1:9/mcp")
        waits = []
        for _ in range(3):
            before = datetime.now(UTC)
            admin.post(f"/admin/v1/mcp/sources/{source['id']}/sync")
            state = source_state(admin, source)
            waits.append((datetime.fromisoformat(state["next_sync_at"]) - before).total_seconds())
        minimum = settings.mcp_min_sync_interval
        assert [round(w / minimum) for w in waits] == [1, 2, 4]


class TestChangeNotification:
    def test_a_tools_list_changed_event_triggers_a_sync(
        self, admin: Caller, database: Database, settings: Settings, server: LiveServer
    ) -> None:
        server.tools = [tool("t0", "First tool.")]
        add_source(admin, server.url)
        syncs: list[str] = []

        def on_change(due: Due) -> None:
            result = sync_source(database, due.tenant_id, due.source_id, settings=settings)
            syncs.append(result.status)

        with start_blocking_portal() as portal:
            future = portal.start_task_soon(
                lambda: listener.supervise(
                    database, on_change, settings=settings, refresh=0.5, debounce=0.1
                )
            )
            try:
                wait_for(lambda: len(syncs) == 1)  # the catch-up sync on connect
                assert "srv_t0" in live(admin)
                server.tools.append(tool("t1", "Second tool."))
                server.notify()
                wait_for(lambda: "srv_t1" in live(admin))
                assert len(syncs) == 2  # one sync for the event, no polling
            finally:
                future.cancel()
        assert syncs
        assert set(syncs) == {"synced"}

    def test_a_server_that_announces_no_changes_is_not_held_open(self, tmp_path: Path) -> None:
        file = tmp_path / "catalog.json"
        file.write_text(json.dumps({"tools": [tool("t0")]}))
        target = StdioTarget(
            sys.executable,
            ["-m", "tests.mcp.servers.paged", str(file), "5"],
            env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
        events: list[int] = []

        async def on_event() -> None:
            events.append(1)

        with pytest.raises(listener.NoNotifications):
            anyio.run(lambda: listener.listen_once(target, on_event, timeout=30))
        assert events == []


@pytest.fixture(scope="module")
def worker(redis_url: str, database_url: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "TOOLSIFT_REDIS_URL": redis_url,
        "TOOLSIFT_DATABASE_URL": database_url,
        "TOOLSIFT_SECRET_KEY": "test-secret-key-for-mcp-sources",
    }
    command = [sys.executable, "-m", "celery", "-A", "workers", "worker", "--pool", "solo"]
    process = subprocess.Popen([*command, "--loglevel", "WARNING"], env=env)
    yield process
    process.terminate()
    process.wait(timeout=30)


class TestWorker:
    def test_the_schedule_task_syncs_due_sources_on_a_real_worker(
        self, admin: Caller, redis_url: str, worker: Any, server: LiveServer
    ) -> None:
        server.tools = [tool("t0"), tool("t1")]
        source = add_source(admin, server.url)
        celery = Celery("toolsift", broker=redis_url, backend=redis_url)
        celery.send_task("mcp.schedule")
        wait_for(lambda: source_state(admin, source)["health"] == "healthy", timeout=60)
        assert sorted(live(admin)) == ["srv_t0", "srv_t1"]
        # What the schedule changed is in the audit log, as the sync's doing.
        items = admin.ok(admin.get("/admin/v1/audit?limit=1000"))["items"]
        assert {(i["actor"], i["action"]) for i in items if i["table_name"] == "tools"} == {
            ("sync", "insert")
        }
