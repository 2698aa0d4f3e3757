"""A real Celery worker on a real Redis broker, started by the test."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from celery import Celery


@pytest.fixture(scope="module")
def worker(redis_url: str, database_url: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "TOOLSIFT_REDIS_URL": redis_url, "TOOLSIFT_DATABASE_URL": database_url}
    command = [sys.executable, "-m", "celery", "-A", "workers", "worker", "--pool", "solo"]
    process = subprocess.Popen([*command, "--loglevel", "WARNING"], env=env)
    yield process
    process.terminate()
    process.wait(timeout=30)


class TestWorker:
    def test_ping_runs_through_broker_worker_and_database(
        self, worker: subprocess.Popen[bytes], redis_url: str
    ) -> None:
        client = Celery("toolsift", broker=redis_url, backend=redis_url)
        result = client.send_task("system.ping")
        assert result.get(timeout=60) == {"status": "pong", "database_role": "toolsift_app"}
        assert worker.poll() is None
