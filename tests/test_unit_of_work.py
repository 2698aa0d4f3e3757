"""The request's transaction commits before the response leaves: a failed commit is a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from toolsift.app import create_app
from toolsift.config import Settings
from toolsift.db import ALL_PERMISSIONS, Database

from .fixtures.factories import Caller


class CommitFailed(Exception):
    pass


@contextmanager
def failing_commits(database: Database) -> Iterator[None]:
    def fail(_session: Session) -> None:
        raise CommitFailed("simulated commit failure")

    event.listen(database.sessions, "before_commit", fail)
    try:
        yield
    finally:
        event.remove(database.sessions, "before_commit", fail)


class TestCommitFailure:
    def test_failed_commit_is_a_server_error_and_nothing_is_written(
        self, admin: Caller, settings: Settings, database: Database
    ) -> None:
        app = create_app(settings, database)
        with TestClient(app, raise_server_exceptions=False) as client, failing_commits(database):
            response = client.post(
                "/admin/v1/permissions",
                json={"name": "crm.read"},
                headers={**admin.headers, "X-Request-ID": "rid-500"},
            )
        assert response.status_code == 500
        # In the API's error shape, with the id that finds the traceback in the logs.
        assert response.json() == {"error": {"code": "internal_error", "message": "internal error"}}
        assert response.headers["x-request-id"] == "rid-500"
        assert admin.ok(admin.get("/admin/v1/permissions")) == []


class TestSnapshot:
    @pytest.mark.parametrize("snapshot", [True, False])
    def test_a_snapshot_unit_reads_the_database_as_its_first_statement_did(
        self, admin: Caller, database: Database, snapshot: bool
    ) -> None:
        count = text("SELECT count(*) FROM tools")
        with database.unit_of_work(
            admin.tenant_id, permissions=ALL_PERMISSIONS, snapshot=snapshot
        ) as session:
            assert session.scalar(count) == 0
            admin.ok(admin.post("/admin/v1/tools", {"name": "late"}), 201)  # commits meanwhile
            assert session.scalar(count) == (0 if snapshot else 1)
        with database.unit_of_work(admin.tenant_id, permissions=ALL_PERMISSIONS) as session:
            level = session.scalar(text("SHOW transaction_isolation"))
        assert level == "read committed"  # the pooled connection was given back as it was
