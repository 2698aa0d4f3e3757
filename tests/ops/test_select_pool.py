"""The select pool after a database outage longer than its first few reconnect attempts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.exc import OperationalError

from toolsift.db import APP_ROLE, RECONNECT_TIMEOUT, HotPool
from toolsift.embedded.postgres import EmbeddedPostgres

# Long enough that the pool's own reconnect attempts, backing off 1, 2, 4, 8 s, are asleep
# when the database returns: with the pool's default timeout the next was 14 s away.
OUTAGE = 16.0


async def _select_one(hot: HotPool) -> None:
    async with hot.connection() as conn:
        await conn.execute("SELECT 1")


async def _outage(hot: HotPool, server: EmbeddedPostgres) -> float:
    """Seconds from the database's return to the first select answered."""
    await hot.open()
    await _select_one(hot)
    server.stop()
    with pytest.raises(OperationalError):  # the pool learns of the loss, and drains
        await _select_one(hot)
    await asyncio.sleep(OUTAGE)
    await asyncio.to_thread(server.start)
    back = time.monotonic()
    while True:
        try:
            await _select_one(hot)
            return time.monotonic() - back
        except OperationalError:
            if time.monotonic() - back > 60:
                raise


def test_selects_are_answered_soon_after_a_long_outage_ends(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path / "pg", fast=True)
    url = server.start()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {APP_ROLE} NOLOGIN")
        hot = HotPool(url, size=2, timeout=2.0)

        async def run() -> float:
            try:
                return await _outage(hot, server)
            finally:
                await hot.close()

        lag = asyncio.run(run())
    finally:
        server.stop()
    assert lag < RECONNECT_TIMEOUT, f"the first select was answered {lag:.1f} s after"
