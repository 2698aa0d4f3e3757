"""`bench load`'s checks on hand-made samples: a check whose window held no request measured
nothing, and says so instead of passing. The runs themselves are in tests/ops/test_load.py."""

from __future__ import annotations

from typing import Any

import pytest

from toolsift_tooling.bench.httpload import Sample
from toolsift_tooling.bench.loadrun import (
    RECOVERY_GRACE_S,
    LoadOptions,
    _fault_figures,
    _summary,
    benchmark,
    judge,
)

DOWN, UP = 3.0, 5.0


def _result(fault: str, samples: list[Sample]) -> dict[str, Any]:
    """What loadrun.benchmark hands to judge, for these samples and a clean database."""
    seconds = max(s.at + s.ms / 1000 for s in samples)
    return {
        "options": {"rate": None},
        "selects": _summary([s for s in samples if s.kind == "select"], seconds),
        "writes": _summary([s for s in samples if s.kind == "write"], seconds),
        "fault": _fault_figures(samples, DOWN, UP),
        "api_restarted": False,
        "consistency": {
            "tools_without_postings": 0,
            "tenants_with_wrong_statistics": 0,
            "tools_without_job_or_vector": 0,
            "acknowledged_writes_missing": 0,
            "refused_writes_stored": 0,
            "stray_tools": 0,
        },
        "drain_seconds": 1.0,
        "backlog_left": (0, 0),
    }


def _traffic(until: float, status: Any = lambda at: 200) -> list[Sample]:
    """A select every 0.1 s up to `until`; `status(at)` is its answer."""
    return [Sample("select", n / 10, 2.0, status(n / 10)) for n in range(int(until * 10))]


def _outage(at: float) -> int:
    return 503 if DOWN <= at < UP else 200


def _verdicts(fault: str, samples: list[Sample]) -> dict[str, str]:
    checks = judge(_result(fault, samples), fault)
    return {
        name: "not measured" if not c["measured"] else "pass" if c["ok"] else "fail"
        for name, c in checks.items()
    }


def test_a_postgres_restart_after_the_traffic_measured_nothing() -> None:
    verdicts = _verdicts("postgres-restart", _traffic(until=DOWN - 1))
    assert verdicts["in-flight requests fail with 503"] == "not measured"
    assert verdicts["recovers without an API restart"] == "not measured"
    checks = judge(_result("postgres-restart", _traffic(until=DOWN - 1)), "postgres-restart")
    assert not all(c["ok"] for c in checks.values()), "a run that measured nothing fails"


def test_recovery_is_not_measured_when_the_run_ends_within_the_grace() -> None:
    verdicts = _verdicts("postgres-restart", _traffic(until=UP + 1, status=_outage))
    assert verdicts["in-flight requests fail with 503"] == "pass"
    assert verdicts["recovers without an API restart"] == "not measured"


def test_recovery_is_judged_when_the_run_outlasts_the_grace() -> None:
    samples = _traffic(until=UP + RECOVERY_GRACE_S + 1, status=_outage)
    assert set(_verdicts("postgres-restart", samples).values()) == {"pass"}


def test_a_failure_measured_before_the_run_ended_is_a_fail_not_a_gap() -> None:
    samples = _traffic(until=UP + 1, status=lambda at: 503 if at >= DOWN else 200)
    assert _verdicts("postgres-restart", samples)["recovers without an API restart"] == "fail"


@pytest.mark.parametrize("fault", ["redis-restart", "worker-kill"])
def test_no_errors_is_not_measured_when_no_request_met_the_fault(fault: str) -> None:
    assert _verdicts(fault, _traffic(until=DOWN - 1))["0 errors"] == "not measured"
    assert _verdicts(fault, _traffic(until=UP + 1))["0 errors"] == "pass"


def test_a_fault_at_or_after_the_end_is_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="fault_at"):
        benchmark(
            LoadOptions(
                duration=2, fault="worker-kill", fault_at=2, clients=1, tenants=1, settle=False
            )
        )
