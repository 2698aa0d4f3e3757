"""The embedded stack `toolsift eval` starts when no `--url` is given, in a temporary folder.

PostgreSQL and the API come from the benchmark's stack (`toolsift_tooling.bench.stack`); Redis and a
Celery worker are added only when a mode needs embeddings. Everything is stopped in reverse
order by the caller's ExitStack, on success, error or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from toolsift.db import Database
from toolsift.tenants.schemas import TenantCreate
from toolsift.tenants.service import tenant as tenant_service

from ..bench.stack import ApiServer, Worker, start_database, start_redis


@dataclass(frozen=True)
class Served:
    url: str
    admin_key: str


def start(
    work_dir: Path,
    stack: contextlib.ExitStack,
    *,
    embeddings: bool,
    settings: Mapping[str, str] | None = None,
) -> Served:
    """Database, a fresh tenant, the API (and Redis + worker when `embeddings`); `settings`
    are the API's and the worker's (`TOOLSIFT_<NAME>`)."""
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
        _redis, redis_url = start_redis(work_dir / "redis", stack)
        worker = Worker(database_url, redis_url, work_dir, settings=settings)
        stack.callback(worker.stop)
        worker.start()
    api = ApiServer(database_url, workers=1, pepper=pepper, work_dir=work_dir, settings=settings)
    stack.callback(api.stop)
    return Served(api.start(), created.admin_key.secret)
