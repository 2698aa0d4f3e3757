"""/healthz (the process is alive), /readyz (it can serve), /metrics (Prometheus)."""

from __future__ import annotations

import hmac
import logging
from functools import lru_cache
from typing import Literal

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

router = APIRouter(route_class=StrictJSONRoute, tags=["health"])
_log = logging.getLogger(__name__)
_BROKER_TIMEOUT = 1.0


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ok", "unavailable"]
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
    """Ready to serve: database reachable, migrations at head, broker reachable.

    503 names what failed, so an orchestrator holds traffic back until all are `ok`.
    """
    checks = {"database": "ok", "migrations": "ok", "broker": "ok"}
    try:
        with request.app.state.database.unit_of_work(None) as session:
            current = session.execute(text("SELECT toolsift_schema_revision()")).scalar()
        head = _head()
        if current != head:
            checks["migrations"] = f"at {current}, head is {head}"
    except Exception as error:
        _log.warning("readyz: database check failed: %s", type(error).__name__)
        checks["database"] = f"unreachable ({type(error).__name__})"
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
    failed = [name for name, value in checks.items() if value not in ("ok", "not configured")]
    body = Readiness(status="unavailable" if failed else "ok", checks=checks)
    return JSONResponse(body.model_dump(), status_code=503 if failed else 200)


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
