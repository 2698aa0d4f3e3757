"""`toolsift bench load` fault runs, small: the checks the full runs are judged by must pass.

Each run is a whole private stack (PostgreSQL, Redis, API, Celery worker) for a few seconds
of traffic, with the catalogs' embedding still in progress, so a fault meets queued jobs.
Not timed: the latency goal is for the full command (docs/benchmarks.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from toolsift.cli import app
from toolsift_tooling.bench.loadrun import LoadOptions, benchmark

pytestmark = pytest.mark.timeout(900)

SMALL = LoadOptions(
    clients=4, duration=8, tenants=6, fault_at=2.5, outage=1.5, workers=1, settle=False
)


def _failed(result: dict[str, Any]) -> dict[str, Any]:
    return {name: check for name, check in result["checks"].items() if not check["ok"]}


def _assert_traffic(result: dict[str, Any]) -> None:
    assert result["selects"]["ok"] > 0
    assert result["writes"]["ok"] > 0, "no write succeeded: the partial-write check is empty"
    jobs, _ = result["fault"]["backlog_at_fault"]
    assert jobs > 0, "no job was queued when the fault struck: 'no job lost' is vacuous"


def test_postgres_restart_fails_in_flight_requests_with_503_and_recovers() -> None:
    # Long enough for traffic 5 s after PostgreSQL is back: the recovery check's window.
    options = {**SMALL.__dict__, "fault": "postgres-restart", "duration": 16}
    result = benchmark(LoadOptions(**options))
    assert not _failed(result), _failed(result)
    _assert_traffic(result)
    # Not vacuous: requests did meet the outage, and each failed with a 503.
    assert result["fault"]["failed"] > 0
    assert set(result["fault"]["failed_statuses"]) == {"503"}
    assert result["consistency"]["acknowledged_writes_missing"] == 0


def test_redis_restart_keeps_selects_working_and_loses_no_job() -> None:
    result = benchmark(LoadOptions(**{**SMALL.__dict__, "fault": "redis-restart"}))
    assert not _failed(result), _failed(result)
    _assert_traffic(result)
    assert result["selects"]["errors"] == 0


def test_worker_sigkill_loses_no_job_through_the_command(tmp_path: Path) -> None:
    figures = tmp_path / "load.json"
    argv = ["bench", "load", "--clients", "4", "--duration", "8", "--tenants", "6"]
    argv += ["--fault", "worker-kill", "--fault-at", "2.5", "--outage", "1.5", "--workers", "1"]
    argv += ["--no-settle", "--json", str(figures)]
    outcome = CliRunner().invoke(app, argv)
    assert outcome.exit_code == 0, outcome.output
    result = json.loads(figures.read_text())
    assert not _failed(result)
    _assert_traffic(result)
    assert "no job lost" in result["checks"]
    assert "PASS" in outcome.output


def test_an_unknown_fault_is_refused_naming_the_option() -> None:
    outcome = CliRunner().invoke(app, ["bench", "load", "--fault", "disk-full"])
    assert outcome.exit_code == 2
    assert "--fault" in outcome.output
