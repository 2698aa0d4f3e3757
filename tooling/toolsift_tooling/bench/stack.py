"""The benchmark's own servers: embedded PostgreSQL and Redis, the API and a Celery worker.

Everything lives in one temporary directory and is stopped in reverse order by the caller's
ExitStack, so an error or Ctrl-C never leaves a server behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType

import httpx
import psutil

from toolsift.embedded._common import log_tail
from toolsift.embedded.postgres import EmbeddedPostgres
from toolsift.embedded.redis import EmbeddedRedis
from toolsift.kit.processes import stop_process
from toolsift.migrate import ensure_database, upgrade

DATABASE_NAME = "toolsift_bench"
_READY_TIMEOUT = 60.0


def start_database(data_dir: Path, stack: contextlib.ExitStack) -> tuple[EmbeddedPostgres, str]:
    """A throwaway cluster (fsync off) with the schema migrated; returns it and the DB URL.

    SIGTERM unwinds `stack` as Ctrl-C does while it is open, so a benchmark that is killed
    stops its cluster instead of leaving it running (signals reach the main thread only)."""
    if threading.current_thread() is threading.main_thread():
        stack.enter_context(sigterm_as_interrupt())
    server = EmbeddedPostgres(data_dir, fast=True)
    stack.callback(server.stop)  # registered first: stop() is a no-op if start() failed early
    server_url = server.start()
    url = ensure_database(server_url, DATABASE_NAME)
    upgrade(url)
    return server, url


def start_redis(data_dir: Path, stack: contextlib.ExitStack) -> tuple[EmbeddedRedis, str]:
    """A throwaway Redis, stopped by `stack`; returns it (fault runs restart it) and its URL."""
    redis = EmbeddedRedis(data_dir)
    stack.callback(redis.stop)
    return redis, redis.start()


def postmaster_pid(server: EmbeddedPostgres) -> int | None:
    try:
        return int((server.pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def environment(settings: Mapping[str, str]) -> dict[str, str]:
    """This process's environment for a server of ours: none of our own variables inherited
    (a developer's shell must not change what is measured), only `settings`, each as
    `TOOLSIFT_<NAME>`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSIFT_")}
    env.update({f"TOOLSIFT_{k.upper()}": v for k, v in settings.items()})
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ApiServer:
    """`uvicorn --factory toolsift.app:create_app` in its own session, so we alone stop it.

    The access log is off: at hundreds of requests a second it would be a benchmark of logging.
    """

    def __init__(
        self,
        database_url: str,
        *,
        workers: int,
        pepper: str,
        work_dir: Path,
        factory: str = "toolsift.app:create_app",
        app_dir: Path | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        """`factory`/`app_dir` let what-if scripts serve a patched app the same way;
        `settings` become `TOOLSIFT_<NAME>` variables of the server, as the worker's."""
        self.database_url = database_url
        self.settings = dict(settings or {})
        self.factory = factory
        self.app_dir = app_dir
        self.workers = workers
        self.pepper = pepper
        self.work_dir = work_dir
        self.log_file = work_dir / "uvicorn.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        argv = [
            sys.executable, "-m", "uvicorn", "--factory", self.factory,
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(self.workers),
            "--no-access-log", "--log-level", "info",
        ]  # fmt: skip
        if self.app_dir is not None:
            argv += ["--app-dir", str(self.app_dir)]
        env = environment(
            {
                **self.settings,
                "database_url": self.database_url,
                "key_pepper": self.pepper,
                "env": "production",
            }
        )
        with self.log_file.open("ab") as log:
            # cwd: the temp dir, so a developer's .env cannot change what is measured.
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, cwd=self.work_dir, start_new_session=True,
            )  # fmt: skip
        self._await_ready()
        return self.url

    def _await_ready(self) -> None:
        """Ready when every worker has logged startup and /healthz answers."""
        deadline = time.monotonic() + _READY_TIMEOUT
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"uvicorn exited with {self._proc.returncode}:\n{log_tail(self.log_file)}"
                )
            started = self.log_file.read_text(errors="replace").count(
                "Application startup complete"
            )
            if started >= self.workers:
                try:
                    if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        raise RuntimeError(f"uvicorn not ready after {_READY_TIMEOUT}s:\n{log_tail(self.log_file)}")

    def pids(self) -> list[int]:
        """The supervisor and its workers, for CPU accounting."""
        if self._proc is None:
            return []
        try:
            parent = psutil.Process(self._proc.pid)
            return [parent.pid, *(c.pid for c in parent.children(recursive=True))]
        except psutil.Error:
            return []

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 10 s; then whatever of its process group is left."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc, "uvicorn", grace=10.0)


class Worker:
    """`celery -A workers worker --beat` in its own process group, so a kill takes beat too.

    `settings` become `TOOLSIFT_<NAME>` variables of the worker (nothing else of ours is
    inherited); `pool="solo"` runs tasks in the worker process itself (one core), and
    `concurrency` sets the number of child processes of the default (prefork) pool.
    """

    def __init__(
        self,
        database_url: str,
        redis_url: str,
        work_dir: Path,
        *,
        settings: Mapping[str, str] | None = None,
        pool: str | None = None,
        concurrency: int = 1,
    ) -> None:
        self.work_dir = work_dir
        self.log_file = work_dir / "worker.log"
        self.env = environment(
            {**(settings or {}), "database_url": database_url, "redis_url": redis_url}
        )
        self.pool = pool
        self.concurrency = concurrency
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        schedule = self.work_dir / f"celerybeat-schedule-{self.starts}"
        argv = [sys.executable, "-m", "celery", "-A", "workers", "worker"]
        argv += ["--concurrency", str(self.concurrency)]
        argv += ["--pool", self.pool] if self.pool else []
        argv += ["--beat", "--schedule", str(schedule), "--loglevel", "WARNING"]
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.env, cwd=self.work_dir, start_new_session=True,
            )  # fmt: skip

    def exited(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def kill(self) -> None:
        """SIGKILL to the whole group: no chance to ack, requeue or finish a batch."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is not None:
            stop_process(proc, "the worker", grace=20.0)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so `finally` blocks stop the servers either way."""

    def _raise(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
