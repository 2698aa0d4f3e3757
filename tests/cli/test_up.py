"""`toolsift up` as a user runs it: one per data dir, and a taken port refused up front."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from ..fixtures.served import free_port, wait_until_ok


def _up(data_dir: Path, port: int) -> list[str]:
    return [
        sys.executable, "-m", "toolsift.cli", "up", "--data-dir", str(data_dir),
        "--port", str(port), "--no-worker", "--no-demo",
    ]  # fmt: skip


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSIFT_")}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    return env


@pytest.mark.timeout(240)
def test_a_second_up_on_a_data_dir_refuses_and_leaves_the_first_running(tmp_path: Path) -> None:
    data, port = tmp_path / "data", free_port()
    log = tmp_path / "first.log"
    with log.open("wb") as out:
        first = subprocess.Popen(_up(data, port), env=_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until_ok(f"http://127.0.0.1:{port}/readyz", first, log, timeout=120)
        second = subprocess.run(
            _up(data, free_port()), env=_env(), capture_output=True, text=True, timeout=60
        )
        assert second.returncode == 2, second.stdout + second.stderr
        assert "another `toolsift up`" in second.stderr + second.stdout
        assert str(first.pid) in second.stderr + second.stdout
        # Another data dir, the first's port: refused before anything starts.
        other = tmp_path / "other"
        third = subprocess.run(
            _up(other, port), env=_env(), capture_output=True, text=True, timeout=60
        )
        assert third.returncode == 2, third.stdout + third.stderr
        assert f"port {port}" in third.stderr + third.stdout
        assert not (other / "postgres").exists()
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(timeout=60)


@pytest.mark.timeout(180)
def test_a_command_on_a_data_dir_no_up_has_served_works(tmp_path: Path) -> None:
    """`toolsift tenant create` straight after install: the embedded database is made and
    migrated for it, then stopped again."""
    data = tmp_path / "fresh"
    done = subprocess.run(
        [sys.executable, "-m", "toolsift.cli", "tenant", "create", "acme", "--data-dir", str(data)],
        env=_env(), capture_output=True, text=True, timeout=170, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "admin key (shown once): tsk_" in done.stdout
    assert not (data / "postgres" / "pgdata" / "postmaster.pid").exists()


@pytest.mark.timeout(180)
def test_a_remembered_port_now_taken_is_a_clear_error_and_stops_what_started(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    (data / "redis").mkdir(parents=True)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        taken = squatter.getsockname()[1]
        (data / "redis" / "redis.port").write_text(f"{taken}\n")
        done = subprocess.run(
            _up(data, free_port()), env=_env(), capture_output=True, text=True, timeout=170
        )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"port {taken} on 127.0.0.1 is taken" in done.stderr
    assert "Traceback" not in done.stderr
    # PostgreSQL had started first: it is stopped again.
    assert not (data / "postgres" / "pgdata" / "postmaster.pid").exists()


def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    from toolsift.kit.processes import stop_process

    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            " sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    assert stubborn.stdout is not None
    assert stubborn.stdout.readline() == b"ready\n"  # SIGTERM is ignored from here on
    started = time.monotonic()
    with stubborn.stdout:
        stop_process(stubborn, "the worker", grace=0.5)
    assert stubborn.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 10


# A parent that exits on SIGTERM, and a child that ignores it and would outlive it.
_SPAWNER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", CHILD, sys.argv[1]])
time.sleep(60)
"""
_CHILD = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


def test_what_a_worker_leaves_in_its_group_is_ended_with_it(tmp_path: Path) -> None:
    """Celery's beat or a pool child outlived a worker stopped by a signal sent to `up`
    alone; stopping the worker now ends its whole process group."""
    from toolsift.kit.processes import group_members, start_process, stop_process

    pid_file = tmp_path / "child.pid"
    spawner = f"CHILD = {_CHILD!r}\n{_SPAWNER}"
    worker = start_process([sys.executable, "-c", spawner, str(pid_file)], env=dict(os.environ))
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = psutil.Process(int(pid_file.read_text()))
    assert os.getpgid(child.pid) == worker.pid != os.getpgrp()
    stop_process(worker, "the worker", grace=0.5)
    assert worker.returncode == -signal.SIGTERM
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert group_members(worker.pid) == []


@pytest.mark.timeout(240)
def test_a_signal_to_up_alone_stops_every_process_of_its_worker(tmp_path: Path) -> None:
    """`kill -INT <up>` (a supervisor, a script), not a terminal's Ctrl-C to every process:
    the worker, its pool child and its embedded beat all stop with `up`."""
    from toolsift.kit.processes import group_members

    data, port = tmp_path / "data", free_port()
    log = tmp_path / "up.log"
    command = [part for part in _up(data, port) if part != "--no-worker"]
    with log.open("wb") as out:
        up = subprocess.Popen(command, env=_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until_ok(f"http://127.0.0.1:{port}/readyz", up, log, timeout=120)
        (worker,) = (c for c in psutil.Process(up.pid).children() if "celery" in c.cmdline())
        assert os.getpgid(worker.pid) == worker.pid != os.getpgid(up.pid)
        deadline = time.monotonic() + 60
        while len(group_members(worker.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(group_members(worker.pid)) == 3, log.read_text()  # main, pool child, beat
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=90)
    assert group_members(worker.pid) == [], log.read_text()
