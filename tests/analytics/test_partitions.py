"""Monthly partitions: no select fails for a missing month; upkeep and retention by task."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy.exc
from celery import Celery
from fastapi.testclient import TestClient

from tests.analytics.seed import OwnerConn, Selection, write_selections
from tests.fixtures.factories import Caller, new_tenant, tool_body
from toolsift.analytics.service import analytics as analytics_service
from toolsift.db import Database


def maintain(database: Database, *, ahead: int = 3, retention: int = 100_000) -> Any:
    with database.unit_of_work(None) as session:
        return analytics_service.maintain_partitions(
            session, months_ahead=ahead, default_retention_days=retention
        )


def where(owner_conn: OwnerConn, table: str, column: str = "id") -> dict[UUID, str]:
    key = "id" if table == "selection_logs" else "selection_id"
    return {
        row[0]: row[1]
        for row in owner_conn.execute(f"SELECT {key}, tableoid::regclass::text FROM {table}")
    }


def exists(owner_conn: OwnerConn, name: str) -> bool:
    row = owner_conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
    return bool(row and row[0])


@pytest.fixture
def tools(admin: Caller) -> dict[str, UUID]:
    made = admin.ok(admin.post("/admin/v1/tools", tool_body("order_status", "Order status")), 201)
    return {"order_status": UUID(made["id"])}


def log_at(
    database: Database, tenant_id: UUID, tools: dict[str, UUID], when: datetime, calls: int = 1
) -> UUID:
    selection = Selection(
        when, "bm25", "q", ["order_status"], 1, 1, 1.0, 1, calls=["order_status"] * calls
    )
    return write_selections(database, tenant_id, tools, [selection])[0]


class TestPartitions:
    def test_a_select_goes_to_this_months_partition(
        self, support_agent: Caller, owner_conn: OwnerConn
    ) -> None:
        body = support_agent.ok(support_agent.select("order status", roles=["support"]))
        month = datetime.now(UTC).strftime("y%Ym%m")
        assert where(owner_conn, "selection_logs")[UUID(body["selection_id"])] == (
            f"selection_logs_{month}"
        )

    def test_a_month_without_partition_lands_in_the_default_one(
        self, admin: Caller, database: Database, tools: dict[str, UUID], owner_conn: OwnerConn
    ) -> None:
        far = datetime(2031, 5, 10, tzinfo=UTC)
        log = log_at(database, admin.tenant_id, tools, far)
        assert where(owner_conn, "selection_logs")[log] == "selection_logs_default"
        assert where(owner_conn, "tool_calls")[log] == "tool_calls_default"

    def test_stranded_rows_move_into_their_new_month_with_their_calls(
        self, admin: Caller, database: Database, tools: dict[str, UUID], owner_conn: OwnerConn
    ) -> None:
        old = datetime(2026, 8, 15, tzinfo=UTC)
        log = log_at(database, admin.tenant_id, tools, old, calls=2)
        assert where(owner_conn, "selection_logs")[log] == "selection_logs_default"
        result = maintain(database)
        assert "2026-08" in result.created
        assert result.deleted == 0
        assert where(owner_conn, "selection_logs")[log] == "selection_logs_y2026m08"
        assert where(owner_conn, "tool_calls")[log] == "tool_calls_y2026m08"
        count = owner_conn.execute(
            "SELECT count(*) FROM tool_calls WHERE selection_id = %s", (log,)
        )
        assert count.fetchone() == (2,)
        # The coming months are ready; a second run finds nothing to do.
        now = datetime.now(UTC).replace(day=1)
        for ahead in range(4):
            month = (now + timedelta(days=32 * ahead)).strftime("y%Ym%m")
            assert exists(owner_conn, f"selection_logs_{month}"), month
            assert exists(owner_conn, f"tool_calls_{month}"), month
        again = maintain(database)
        assert (again.created, again.dropped, again.deleted) == ([], [], 0)

    def test_retention_per_tenant_and_whole_months_past_the_longest(
        self,
        admin: Caller,
        client: TestClient,
        database: Database,
        tools: dict[str, UUID],
        owner_conn: OwnerConn,
    ) -> None:
        now = datetime.now(UTC)
        short, other = admin, new_tenant(client, database, "globex")
        odd = new_tenant(client, database, "initech")
        short.ok(short.patch("/admin/v1/tenant", {"settings": {"log_retention_days": 10}}))
        # Not a whole number of days, stored before the API checked it: the default applies,
        # and nobody else's upkeep fails. The API refuses it now.
        refused = odd.patch("/admin/v1/tenant", {"settings": {"log_retention_days": "10"}})
        assert refused.status_code == 422
        owner_conn.execute(
            """UPDATE tenants SET settings = settings || '{"log_retention_days": "10"}'"""
            " WHERE id = %s",
            (odd.tenant_id,),
        )
        other_tools = {
            "order_status": UUID(
                other.ok(other.post("/admin/v1/tools", tool_body("order_status", "x")), 201)["id"]
            )
        }
        odd_tools = {
            "order_status": UUID(
                odd.ok(odd.post("/admin/v1/tools", tool_body("order_status", "x")), 201)["id"]
            )
        }
        twenty_days = now - timedelta(days=20)
        short_old = log_at(database, short.tenant_id, tools, twenty_days)
        short_new = log_at(database, short.tenant_id, tools, now - timedelta(days=1))
        other_old = log_at(database, other.tenant_id, other_tools, twenty_days)
        odd_old = log_at(database, odd.tenant_id, odd_tools, twenty_days)
        ancient = log_at(database, other.tenant_id, other_tools, datetime(2025, 1, 15, tzinfo=UTC))

        result = maintain(database, retention=30)

        left = where(owner_conn, "selection_logs")
        assert set(left) == {short_new, other_old, odd_old}
        assert {short_old, ancient} & set(where(owner_conn, "tool_calls")) == set()
        assert result.deleted == 2
        # January 2025 got its partition for the stranded row, then went as a whole month.
        assert "2025-01" in result.created
        assert "2025-01" in result.dropped
        assert not exists(owner_conn, "selection_logs_y2025m01")
        assert not exists(owner_conn, "tool_calls_y2025m01")
        this_month = now.strftime("y%Ym%m")
        assert exists(owner_conn, f"selection_logs_{this_month}")

    def test_arguments_are_checked(self, database: Database) -> None:
        for ahead, days in ((0, 30), (25, 30), (1, 0)):
            with pytest.raises(sqlalchemy.exc.DataError):
                maintain(database, ahead=ahead, retention=days)


@pytest.fixture
def worker(redis_url: str, database_url: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "TOOLSIFT_REDIS_URL": redis_url, "TOOLSIFT_DATABASE_URL": database_url,
           "TOOLSIFT_LOG_RETENTION_DAYS": "30"}  # fmt: skip
    command = [sys.executable, "-m", "celery", "-A", "workers", "worker", "--pool", "solo"]
    process = subprocess.Popen([*command, "--loglevel", "WARNING"], env=env)
    yield process
    process.terminate()
    process.wait(timeout=30)


def test_the_worker_task_runs_the_upkeep(
    worker: subprocess.Popen[bytes],
    redis_url: str,
    admin: Caller,
    database: Database,
    tools: dict[str, UUID],
    owner_conn: OwnerConn,
) -> None:
    old = log_at(database, admin.tenant_id, tools, datetime.now(UTC) - timedelta(days=45))
    client = Celery("toolsift", broker=redis_url, backend=redis_url)
    result = client.send_task("analytics.maintain_partitions").get(timeout=60)
    assert result["deleted"] == 1
    assert old not in where(owner_conn, "selection_logs")
    assert worker.poll() is None


def test_the_beat_schedule_runs_the_upkeep() -> None:
    from workers.celery_app import celery_app

    entries = {e["task"] for e in celery_app.conf.beat_schedule.values()}
    assert "analytics.maintain_partitions" in entries
