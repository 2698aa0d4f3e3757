"""Child processes a command starts and must not leave behind."""

from __future__ import annotations

import contextlib
import os
import subprocess

import psutil

from .commands import err


def start_process(command: list[str], *, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start `command` in a process group of its own, so `stop_process` can find what it
    leaves behind, and a terminal's Ctrl-C reaches it only as `up`'s orderly SIGTERM."""
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, process_group=0)


def stop_process(process: subprocess.Popen[bytes], what: str, *, grace: float = 30.0) -> None:
    """SIGTERM (a Celery worker then finishes its task), and SIGKILL after `grace` seconds:
    a worker stuck in its warm shutdown must not keep `up` from stopping the servers.

    Then the rest of its process group, if it leads one: Celery's embedded beat or a pool
    child outlived a worker stopped by a signal sent to `up` alone (not a terminal's Ctrl-C,
    which reaches every process), and kept running with no parent."""
    group = _led_group(process)
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        err.print(f"[yellow]{what} did not stop within {grace:g} s; killing it[/yellow]")
        process.kill()
        process.wait(timeout=10)
    if group is not None:
        _end_group(group, what, grace=min(grace, 5.0))


def _led_group(process: subprocess.Popen[bytes]) -> int | None:
    """The process group `process` leads, if it does (never the caller's own group). None
    once it was reaped: its pid, and so a group of that id, may be another's by now."""
    if process.returncode is not None:
        return None
    try:
        group = os.getpgid(process.pid)
    except ProcessLookupError:
        return None
    return group if group == process.pid and group != os.getpgrp() else None


def group_members(group: int) -> list[psutil.Process]:
    """The live processes of a process group (zombies are dead, awaiting their reaper)."""
    members = []
    for candidate in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(candidate.pid) == group and candidate.status() != psutil.STATUS_ZOMBIE:
                members.append(candidate)
    return members


def _end_group(group: int, what: str, *, grace: float) -> None:
    left = group_members(group)
    for member in left:
        with contextlib.suppress(psutil.Error):
            member.terminate()
    _, alive = psutil.wait_procs(left, timeout=grace)
    if alive:
        left_behind = f"{what} left {len(alive)} processes that did not stop; killing them"
        err.print(f"[yellow]{left_behind}[/yellow]")
        for member in alive:
            with contextlib.suppress(psutil.Error):
                member.kill()
        psutil.wait_procs(alive, timeout=10)
