"""The select pool and the metrics' database gauges when the database goes away or hangs."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest
from sqlalchemy.exc import OperationalError

from toolsift.db import RECONNECT_TIMEOUT, Database, HotPool
from toolsift.embedded.postgres import EmbeddedPostgres
from toolsift.migrate import ensure_database, upgrade
from toolsift.ops import metrics
from toolsift.ops.bounded import SingleFlight

# Long enough that the pool's own reconnect attempts, backing off 1, 2, 4, 8 s, are asleep
# when the database returns: with the pool's default timeout the next was 14 s away.
OUTAGE = 16.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of this module's own, since the tests stop it."""
    server = EmbeddedPostgres(tmp_path_factory.mktemp("pg") / "data", fast=True)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def url(server: EmbeddedPostgres) -> str:
    database_url = ensure_database(server.url, "toolsift")
    upgrade(database_url)
    return database_url


@contextmanager
def frozen(server: EmbeddedPostgres) -> Iterator[None]:
    """Every process of the server stopped (SIGSTOP): it accepts connections, answers none."""
    postmaster = int((server.pgdata / "postmaster.pid").read_text().split()[0])
    processes = [psutil.Process(postmaster), *psutil.Process(postmaster).children()]
    for process in processes:
        os.kill(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for process in processes:
            os.kill(process.pid, signal.SIGCONT)


async def _select_one(hot: HotPool) -> None:
    async with hot.connection() as conn:
        await conn.execute("SELECT 1")


def test_selects_are_answered_soon_after_a_long_outage_ends(
    server: EmbeddedPostgres, url: str
) -> None:
    async def outage(hot: HotPool) -> float:
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

    async def run() -> float:
        hot = HotPool(url, size=2, timeout=2.0)
        try:
            return await outage(hot)
        finally:
            await hot.close()

    lag = asyncio.run(run())
    assert lag < RECONNECT_TIMEOUT, f"the first select was answered {lag:.1f} s after"


def test_a_database_that_stops_answering_fails_a_select_instead_of_holding_it(
    server: EmbeddedPostgres, url: str
) -> None:
    async def run() -> tuple[float, float]:
        hot = HotPool(url, size=1, timeout=2.0, statement_timeout=1.0)
        try:
            await hot.open()
            await _select_one(hot)
            with frozen(server):
                started = time.monotonic()
                with pytest.raises(OperationalError):
                    await _select_one(hot)
                failed_after = time.monotonic() - started
            started = time.monotonic()
            while True:  # and once it answers again, so do selects
                try:
                    await _select_one(hot)
                    return failed_after, time.monotonic() - started
                except OperationalError:
                    assert time.monotonic() - started < 30

        finally:
            await hot.close()

    failed_after, recovered_after = asyncio.run(run())
    # The statement's second, then up to 5 s for the cancel request and 5 s for its answer.
    assert failed_after < 12, failed_after
    assert recovered_after < 10, recovered_after


def test_a_scrape_does_not_wait_for_a_database_that_stops_answering(
    server: EmbeddedPostgres, url: str
) -> None:
    database = Database(url, pool_size=1)
    try:
        gauges = {m.name: m.samples[0].value for m in metrics.DatabaseGauges(database).collect()}
        assert gauges["toolsift_database_up"] == 1
        with frozen(server):
            started = time.monotonic()
            gauges = {
                m.name: m.samples[0].value for m in metrics.DatabaseGauges(database).collect()
            }
            waited = time.monotonic() - started
        assert gauges == {"toolsift_database_up": 0}
        assert waited < metrics.GAUGES_TIMEOUT + 1, waited
        # The read that waited on the frozen server finishes now, and gives its connection
        # back before the pool is closed; the scrapes after it read the gauges again.
        deadline = time.monotonic() + 30
        while not gauges.get("toolsift_database_up"):
            assert time.monotonic() < deadline, "the gauges were not read again"
            gauges = {
                m.name: m.samples[0].value for m in metrics.DatabaseGauges(database).collect()
            }
    finally:
        database.dispose()


def test_a_call_stuck_past_its_time_is_given_up_and_does_not_hold_the_exit() -> None:
    """One hung call (a stopped backend) must not answer for every later probe, nor keep
    the process from exiting."""
    flight: SingleFlight[str] = SingleFlight("test", abandon_after=0.5)
    release = threading.Event()
    with pytest.raises(TimeoutError):
        flight.result(lambda: (release.wait(), "stuck")[1], timeout=0.1)
    with pytest.raises(TimeoutError):  # still in flight: waited on, not started again
        flight.result(lambda: "fresh", timeout=0.1)
    time.sleep(0.5)
    assert flight.result(lambda: "fresh", timeout=1.0) == "fresh"
    stuck = [t for t in threading.enumerate() if t.name == "test" and t.is_alive()]
    assert stuck
    assert all(t.daemon for t in stuck)
    release.set()
