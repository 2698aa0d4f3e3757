"""The request's transaction commits before the response leaves: a failed commit is a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.orm import Session

from toolsift.app import create_app
from toolsift.config import Settings
from toolsift.db import Database

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
                "/admin/v1/permissions", json={"name": "crm.read"}, headers=admin.headers
            )
        assert response.status_code == 500
        assert admin.ok(admin.get("/admin/v1/permissions")) == []
