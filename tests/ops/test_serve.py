"""`toolsift serve` as the image runs it: a process, uvicorn workers, shared metrics files."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from ..fixtures.served import free_port, serve_process


def _spawned_workers(pid: int) -> int:
    """uvicorn's worker processes under `pid` (multiprocessing's spawn children)."""
    count = 0
    for proc in Path("/proc").iterdir():
        try:
            status = (proc / "status").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if f"\nPPid:\t{pid}\n" in status and b"spawn_main" in cmdline:
            count += 1
    return count


@pytest.mark.timeout(120)
def test_serve_starts_on_a_metrics_folder_nobody_made(database_url: str, tmp_path: Path) -> None:
    # compose mounts an empty tmpfs on /tmp, so the image's PROMETHEUS_MULTIPROC_DIR
    # (/tmp/metrics) does not exist when the API starts: the API makes it.
    metrics = tmp_path / "tmpfs" / "metrics"
    port = free_port()
    # Port and workers from `.env`, as every other setting may be.
    (tmp_path / ".env").write_text(f"TOOLSIFT_PORT={port}\nTOOLSIFT_API_WORKERS=2\n")
    env = {
        **os.environ,
        "TOOLSIFT_DATABASE_URL": database_url,
        "PROMETHEUS_MULTIPROC_DIR": str(metrics),
    }
    for name in (
        "TOOLSIFT_METRICS_TOKEN",
        "TOOLSIFT_PORT",
        "TOOLSIFT_API_WORKERS",
        "TOOLSIFT_HOST",
    ):
        env.pop(name, None)
    with serve_process(env, tmp_path, port) as server:
        assert _spawned_workers(server.pid) == 2
        for _ in range(4):  # likely both workers: each writes its own files
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        exposed = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert exposed.status_code == 200, exposed.text
        assert 'route="/healthz"' in exposed.text
        assert any(metrics.glob("*.db"))
