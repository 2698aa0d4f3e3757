"""Real servers, no mocks: the bundled binaries are the thing under test."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
import redis

from toolsift.embedded import EmbeddedPostgres, EmbeddedRedis, EmbeddedServiceError
from toolsift.embedded._common import process_alive, wait_gone


def _postmaster_pid(pg: EmbeddedPostgres) -> int:
    return int((pg.pgdata / "postmaster.pid").read_text().split()[0])


def _socket_dir(pg: EmbeddedPostgres) -> Path:
    return Path((pg.pgdata / "postmaster.pid").read_text().splitlines()[4])


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


@pytest.fixture(scope="module")
def pg_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One cluster for the module: initdb is the only slow step (about a second)."""
    data_dir = tmp_path_factory.mktemp("pg")
    yield data_dir
    EmbeddedPostgres(data_dir).stop()


@pytest.fixture
def pg(pg_dir: Path) -> Iterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(pg_dir, fast=True)
    server.start()
    yield server
    server.stop()


def test_start_serves_tcp_and_pgvector(pg: EmbeddedPostgres) -> None:
    url = pg.url
    assert url == f"postgresql://postgres@127.0.0.1:{_port(url)}/postgres"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE TABLE IF NOT EXISTS items (id int PRIMARY KEY, v vector(3))")
        conn.execute(
            "INSERT INTO items VALUES (1, '[1,0,0]'), (2, '[0,1,0]') ON CONFLICT DO NOTHING"
        )
        row = conn.execute("SELECT id FROM items ORDER BY v <-> '[0.9,0.1,0]' LIMIT 1").fetchone()
        assert row == (1,)
        settings = conn.execute(
            "SELECT current_setting('max_connections'), current_setting('fsync'),"
            " current_setting('server_encoding'), current_user"
        ).fetchone()
        assert settings == ("200", "off", "UTF8", "postgres")
    if os.geteuid() == 0:
        assert psutil.Process(_postmaster_pid(pg)).username() != "root"


def test_start_is_idempotent(pg: EmbeddedPostgres) -> None:
    pid = _postmaster_pid(pg)
    other = EmbeddedPostgres(pg.data_dir)
    assert other.start() == pg.url
    assert _postmaster_pid(pg) == pid


def test_data_and_port_survive_restart(pg: EmbeddedPostgres) -> None:
    url = pg.url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS kept (note text)")
        conn.execute("INSERT INTO kept VALUES ('still here')")
    pid = _postmaster_pid(pg)
    pg.stop()
    assert not process_alive(pid)
    assert not (pg.pgdata / "postmaster.pid").exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2)

    again = EmbeddedPostgres(pg.data_dir)  # no port given: the remembered one
    assert again.start() == url
    with psycopg.connect(url) as conn:
        assert ("still here",) in conn.execute("SELECT note FROM kept").fetchall()
        assert conn.execute("SELECT extname FROM pg_extension WHERE extname = 'vector'").fetchone()


def test_a_cluster_left_without_toolsifts_settings_is_repaired(pg: EmbeddedPostgres) -> None:
    # A first start interrupted after initdb, before the include line was written.
    url = pg.url
    pg.stop()
    conf = pg.pgdata / "postgresql.conf"
    text = conf.read_text()
    conf.write_text(
        "".join(line for line in text.splitlines(keepends=True) if "toolsift" not in line)
    )
    again = EmbeddedPostgres(pg.data_dir, fast=True)
    assert again.start() == url
    with psycopg.connect(url, connect_timeout=5) as conn:
        assert conn.execute("SHOW port").fetchone() == (str(_port(url)),)


def test_start_failure_reports_log_tail(pg: EmbeddedPostgres) -> None:
    pg.stop()
    auto_conf = pg.pgdata / "postgresql.auto.conf"
    original = auto_conf.read_text()
    auto_conf.write_text(original + "shared_buffers = 'bogus'\n")
    try:
        with pytest.raises(
            EmbeddedServiceError, match='invalid value for parameter "shared_buffers"'
        ):
            pg.start()
    finally:
        auto_conf.write_text(original)
    pg.start()


def test_taken_port_is_reported(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(EmbeddedServiceError, match=f"port {port} .* taken"):
            EmbeddedPostgres(tmp_path, port=port).start()
    assert not (tmp_path / "pgdata").exists()  # refused before initdb


@pytest.fixture
def long_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    """A data dir too deep for sun_path (107 bytes) exercises the /tmp socket fallback."""
    server = EmbeddedPostgres(tmp_path_factory.mktemp("deep-" + "d" * 90), fast=True)
    server.start()
    socket_dir = _socket_dir(server)
    yield server
    server.stop()
    assert not socket_dir.exists()  # stop removes the dir it made


def test_killed_postmaster_leaves_no_trap(long_pg: EmbeddedPostgres) -> None:
    url = long_pg.url
    socket_dir = _socket_dir(long_pg)
    assert str(socket_dir).startswith("/tmp/toolsift-pg-")
    assert len(str(long_pg.pgdata)) > 107
    with psycopg.connect(host=str(socket_dir), port=_port(url), user="postgres") as conn:
        # fast=True means synchronous_commit=off: without this, kill -9 loses the commit.
        conn.execute("SET synchronous_commit = on")
        conn.execute("CREATE TABLE crash (n int)")
        conn.execute("INSERT INTO crash VALUES (42)")
        conn.commit()

    survivor = psycopg.connect(url)  # a backend that outlives its postmaster for a moment
    pid = _postmaster_pid(long_pg)
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid, 5.0)  # SIGKILL lands asynchronously
    try:
        # Stale postmaster.pid (and, where PID 1 never reaps, a zombie postmaster).
        assert (long_pg.pgdata / "postmaster.pid").exists()
        assert EmbeddedPostgres(long_pg.data_dir).start() == url
    finally:
        survivor.close()
    assert _postmaster_pid(long_pg) != pid
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT n FROM crash").fetchone() == (42,)


@pytest.fixture
def rds(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path)
    yield server
    server.stop()


def test_redis_persists_across_restart(rds: EmbeddedRedis) -> None:
    url = rds.start()
    assert url == f"redis://127.0.0.1:{_port(url)}/0"
    assert rds.start() == url  # idempotent
    with redis.Redis.from_url(url) as client:
        client.set("tool", "kept")
    pid = int(rds.pid_file.read_text())
    rds.stop()
    assert not process_alive(pid)

    again = EmbeddedRedis(rds.data_dir)
    assert again.start() == url
    with redis.Redis.from_url(url) as client:
        assert client.get("tool") == b"kept"


def test_redis_crash_reports_log_tail(tmp_path: Path) -> None:
    (tmp_path / "appendonly.aof").write_text("not an append only file\n")
    with pytest.raises(EmbeddedServiceError, match="Bad file format reading the append only file"):
        EmbeddedRedis(tmp_path).start()
