"""The embedded default: PostgreSQL and Redis from wheels, in a data folder the user picks.

`DATABASE_URL` / `REDIS_URL` switch any of it to real servers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .config import Settings
from .embedded import EmbeddedPostgres, EmbeddedRedis
from .migrate import ensure_database, upgrade

DATABASE_NAME = "toolsift"


@dataclass
class Services:
    database_url: str
    redis_url: str | None


def postgres(settings: Settings) -> EmbeddedPostgres:
    return EmbeddedPostgres(settings.data_dir.resolve() / "postgres")


def redis(settings: Settings) -> EmbeddedRedis:
    return EmbeddedRedis(settings.data_dir.resolve() / "redis")


@contextmanager
def database_url(settings: Settings) -> Iterator[str]:
    """The configured database, or the embedded one (started for the block if it was down).

    The embedded one is migrated first, as `toolsift up` would: a command run on a data dir
    no `up` has served yet (`toolsift tenant create` right after install) then works,
    where it failed on a schema that was not there (`role "toolsift_app" does not exist`).
    """
    if settings.database_url:
        yield settings.database_url
        return
    server = postgres(settings)
    was_running = server.is_running()
    url = ensure_database(server.start(), DATABASE_NAME)
    upgrade(url)
    try:
        yield url
    finally:
        if not was_running:
            server.stop()


def state_file(settings: Settings) -> Path:
    return settings.data_dir.resolve() / "demo.json"


def write_private(path: Path, data: Mapping[str, object]) -> None:
    """Secrets on disk are readable by their owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2)
