"""The embedded stack `toolsift eval` starts when no `--url` is given, in a temporary folder.

PostgreSQL and the API come from the benchmark's stack (`toolsift.bench.stack`); Redis and a
Celery worker are added only when a mode needs embeddings. Everything is stopped in reverse
order by the caller's ExitStack, on success, error or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..bench.stack import ApiServer, start_database
from ..db import Database
from ..embedded.redis import EmbeddedRedis
from ..tenants.schemas import TenantCreate
from ..tenants.service import tenant as tenant_service


@dataclass(frozen=True)
class Served:
    url: str
    admin_key: str


def _worker(database_url: str, redis_url: str, work_dir: Path) -> subprocess.Popen[bytes]:
    """A Celery worker with an embedded beat (the outbox relay is a beat task)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSIFT_")}
    env.update(TOOLSIFT_DATABASE_URL=database_url, TOOLSIFT_REDIS_URL=redis_url)
    argv = [
        sys.executable, "-m", "celery", "-A", "workers", "worker", "--beat",
        "--loglevel", "WARNING", "--concurrency", "1",
        "--schedule", str(work_dir / "celerybeat-schedule"),
    ]  # fmt: skip
    log = (work_dir / "worker.log").open("ab")
    try:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=env, cwd=work_dir, start_new_session=True,
        )  # fmt: skip
    finally:
        log.close()


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def start(work_dir: Path, stack: contextlib.ExitStack, *, embeddings: bool) -> Served:
    """Database, a fresh tenant, the API (and Redis + worker when `embeddings`)."""
    pepper = secrets.token_hex(16)
    _server, database_url = start_database(work_dir / "pg", stack)
    database = Database(database_url, pool_size=1)
    try:
        # Made the way `toolsift tenant create` makes one; all else goes through the API.
        with database.unit_of_work(None) as session:
            created = tenant_service.create(
                session, TenantCreate(name="toolsift-eval"), pepper=pepper
            )
    finally:
        database.dispose()
    if embeddings:
        redis = EmbeddedRedis(work_dir / "redis")
        stack.callback(redis.stop)
        redis_url = redis.start()
        worker = _worker(database_url, redis_url, work_dir)
        stack.callback(_stop, worker)
    api = ApiServer(database_url, workers=1, pepper=pepper, work_dir=work_dir)
    stack.callback(api.stop)
    return Served(api.start(), created.admin_key.secret)
