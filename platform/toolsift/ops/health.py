"""/healthz (the process is alive), /readyz (it can serve), /metrics (Prometheus)."""

from __future__ import annotations

import hmac
import logging
from concurrent.futures import TimeoutError as FutureTimeout
from functools import lru_cache
from typing import Any, Literal

import redis
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from redis.backoff import NoBackoff
from redis.retry import Retry
from sqlalchemy import text

from ..kit.errors import ErrorBody
from ..kit.routing import StrictJSONRoute
from ..migrate import head_revision
from . import metrics
from .bounded import SingleFlight

router = APIRouter(route_class=StrictJSONRoute, tags=["health"])
_log = logging.getLogger(__name__)
_BROKER_TIMEOUT = 1.0
# A database that accepts connections and never answers (a stopped postmaster, a network
# partition) would hold the probe as long as the socket stays open: the check runs in a
# thread of its own, and past this the probe answers without it.
_DATABASE_TIMEOUT = 2.0
_checks: SingleFlight[str | None] = SingleFlight("readyz")


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ok", "degraded", "unavailable"]
    checks: dict[str, str]


@lru_cache
def _head() -> str | None:
    return head_revision()


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """The process is alive (no dependency is checked)."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "A dependency is down"}},
)
def readyz(request: Request) -> JSONResponse:
    """Ready to serve: database reachable, migrations at head (503 names what failed).

    The broker is checked and named too, but without it the API still serves: selects
    never touch Redis, and a write's embedding job waits in the outbox until the broker is
    back. So a broker that is down is `degraded` with a 200, and an orchestrator keeps
    sending traffic; alert on it from the body or from `toolsift_outbox_depth`.
    """
    checks = {"database": "ok", "migrations": "ok", "broker": "ok"}
    try:
        current = _database_revision(request.app.state.database)
        head = _head()
        if current != head:
            checks["migrations"] = f"at {current}, head is {head}"
    except Exception as error:
        _log.warning("readyz: database check failed: %s", type(error).__name__)
        reason = "timeout" if isinstance(error, FutureTimeout) else type(error).__name__
        checks["database"] = f"unreachable ({reason})"
        checks["migrations"] = "unknown"
    url = request.app.state.settings.redis_url
    if not url:
        checks["broker"] = "not configured"
    else:
        client = redis.Redis.from_url(
            url,
            socket_timeout=_BROKER_TIMEOUT,
            socket_connect_timeout=_BROKER_TIMEOUT,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            client.ping()
        except redis.RedisError as error:
            checks["broker"] = f"unreachable ({type(error).__name__})"
        finally:
            client.close()
    failed = [name for name in ("database", "migrations") if checks[name] != "ok"]
    broker_down = checks["broker"] not in ("ok", "not configured")
    body = Readiness(
        status="unavailable" if failed else "degraded" if broker_down else "ok", checks=checks
    )
    return JSONResponse(body.model_dump(), status_code=503 if failed else 200)


def _database_revision(database: Any) -> str | None:
    """The schema revision, within `_DATABASE_TIMEOUT` (`ops.bounded`)."""
    return _checks.result(lambda: _revision(database), _DATABASE_TIMEOUT)


def _revision(database: Any) -> str | None:
    with database.unit_of_work(None) as session:
        revision: str | None = session.execute(text("SELECT toolsift_schema_revision()")).scalar()
    return revision


def _metrics_allowed(request: Request) -> bool:
    token: str | None = request.app.state.settings.metrics_token
    if not token:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    # Constant time: the comparison does not tell how much of a guess was right.
    return scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), token.encode())


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}}},
        401: {"model": ErrorBody, "description": "TOOLSIFT_METRICS_TOKEN is set and not given"},
    },
)
def prometheus_metrics(request: Request) -> Response:
    """Prometheus text exposition: request counts and latencies, select latency per mode,
    rate limiting, and database gauges (outbox depth, embedding lag, sync failures).

    With `TOOLSIFT_METRICS_TOKEN` set, send it as `Authorization: Bearer <token>`."""
    if not _metrics_allowed(request):
        body = {"error": {"code": "unauthenticated", "message": "missing or wrong metrics token"}}
        return JSONResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})
    exposition = metrics.exposition(request.app.state.database)
    return Response(exposition, media_type="text/plain; version=0.0.4; charset=utf-8")
