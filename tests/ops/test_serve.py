"""`toolsift serve` as the image runs it: a process, uvicorn workers, shared metrics files."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.timeout(120)
def test_serve_starts_on_a_metrics_folder_nobody_made(database_url: str, tmp_path: Path) -> None:
    # compose mounts an empty tmpfs on /tmp, so the image's PROMETHEUS_MULTIPROC_DIR
    # (/tmp/metrics) does not exist when the API starts: the API makes it.
    metrics = tmp_path / "tmpfs" / "metrics"
    port = _free_port()
    env = {
        **os.environ,
        "TOOLSIFT_DATABASE_URL": database_url,
        "PROMETHEUS_MULTIPROC_DIR": str(metrics),
    }
    env.pop("TOOLSIFT_METRICS_TOKEN", None)
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "toolsift.cli", "serve", "--port", str(port), "--workers", "2"],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        for _ in range(4):  # likely both workers: each writes its own files
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        exposed = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert exposed.status_code == 200, exposed.text
        assert 'route="/healthz"' in exposed.text
        assert any(metrics.glob("*.db"))
    finally:
        server.terminate()
        server.wait(timeout=30)
