"""The HTTP application: admin API, agent API, health."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException
from starlette.routing import Match, Route

from . import __version__
from .access import endpoints_admin as access_endpoints
from .analytics import endpoints_admin as analytics_endpoints
from .analytics import endpoints_agent as feedback_endpoints
from .auth.deps import count_refusal
from .config import Settings, get_settings
from .db import Database, HotPool, tenant_gone
from .embedding import endpoints_admin as embedding_endpoints
from .errors import AppError, TenantDeleted
from .kit.limits import BodyLimit
from .mcp import endpoints_admin as mcp_endpoints
from .mcp.endpoint import McpEndpoint
from .ops import health
from .ops import logging as ops_logging
from .ops.middleware import REQUEST_ID_HEADER, RequestContext
from .security import endpoints_admin as audit_endpoints
from .security.ratelimit import RateLimiter, SettleReservations
from .selection import endpoints_agent as selection_endpoints
from .selection.endpoints_agent import query_embedder
from .tenants import endpoints_admin as tenant_endpoints
from .tools import endpoints_admin as tool_endpoints

DESCRIPTION = """
toolsift picks, for each agent turn, the few tool definitions the turn needs, within a token
budget, among the tools the caller may use.

* **Agent API** (`/v1`, agent key): `POST /v1/select`, `POST /v1/authorize`,
  `POST /v1/tool-calls` (which tool the model called).
* **Admin API** (`/admin/v1`, admin key): tenants, keys, permissions, roles, tools, analytics
  (and the dashboard at `/admin/v1/dashboard`).

Authenticate with `Authorization: Bearer tsk_...`. Errors are `{"error": {"code", "message",
"field"}}`; `field` names the offending input.
"""


def _warm_up(backend: object) -> None:
    """Load an in-process model on a thread of its own (an HTTP backend has nothing to load)."""
    warm_up = getattr(backend, "warm_up", None)
    if not callable(warm_up):
        return

    def run() -> None:
        try:
            warm_up()
        except Exception as error:  # the first select will say what is wrong, again
            _log.warning("query embedder warm-up failed: %s", error)

    threading.Thread(target=run, name="toolsift-warm-up", daemon=True).start()


def _field(loc: Sequence[Any]) -> str:
    path = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "path") else loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "body"


def _message(error: Mapping[str, Any]) -> str:
    """pydantic's message, without the "Value error, " it puts before a validator's own."""
    message = str(error["msg"])
    if error["type"] == "value_error":
        return message.removeprefix("Value error, ")
    return message


async def _app_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, AppError)
    await count_refusal(request, error)  # a 401 for a presented key counts (a guess, maybe)
    return JSONResponse(error.body(), status_code=error.status_code, headers=error.headers)


_log = logging.getLogger(__name__)


async def _database_error(_request: Request, error: Exception) -> JSONResponse:
    """The database went away (restart, failover, pool exhausted): 503, retry later.

    The transaction was rolled back, so nothing of the request was written; the pool drops
    the dead connections and the next request reconnects without an API restart. A request
    whose tenant was deleted under it gets the 401 its key gets from now on.
    """
    if tenant_gone(error):
        return await _app_error(_request, TenantDeleted())
    if isinstance(error, psycopg.Error):
        raise error
    if (
        isinstance(error, DBAPIError)
        and not isinstance(error, OperationalError)
        and not error.connection_invalidated
    ):
        raise error
    cause = error.orig if isinstance(error, DBAPIError) else error
    if isinstance(cause, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure):
        # Rolled back as a whole, like an outage: the same 503 and Retry-After, in its words.
        _log.warning("transaction conflict: %s", type(cause).__name__)
        message = "the request conflicted with a concurrent one and was rolled back; retry"
        body = {"error": {"code": "conflict_retry", "message": message}}
        return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})
    _log.warning("database unavailable: %s", type(error).__name__)
    body = {"error": {"code": "database_unavailable", "message": "database unavailable; retry"}}
    return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed(request: Request) -> str:
    """Every method of the path: Starlette's 405 names none, or only the first route that
    matched. Each method is tried against every route, through `matches` alone: routers
    included by FastAPI are routes of their own that keep their routes' methods private."""
    return ", ".join(
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL
            for route in request.app.router.routes
        )
    )


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    """The framework's own errors (unknown route, wrong method, unreadable body) in our shape."""
    assert isinstance(error, HTTPException)
    code = _HTTP_CODES.get(error.status_code, "http_error")
    body: dict[str, Any] = {"error": {"code": code, "message": str(error.detail)}}
    if error.status_code in (400, 413):  # the framework's: the body could not be read
        body["error"]["field"] = "body"
    headers = dict(error.headers or {})
    if error.status_code == 405:
        headers["Allow"] = _allowed(request)
    return JSONResponse(body, status_code=error.status_code, headers=headers)


async def _validation_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    # The offending input is not echoed back: it may be large, and it is the caller's anyway.
    problems = [
        {"field": _field(e["loc"]), "message": _message(e), "type": e["type"]}
        for e in error.errors()
    ]
    for e in error.errors():
        if e["type"] == "json_invalid":
            reason = (e.get("ctx") or {}).get("error")
            message = f"body is not valid JSON ({reason})" if reason else "body is not valid JSON"
            malformed = {"code": "malformed_json", "message": message, "field": "body"}
            return JSONResponse({"error": malformed}, status_code=400)
    first = problems[0]
    detail: dict[str, Any] = {
        "code": "validation_error",
        "message": f"{first['field']}: {first['message']}",
        "field": first["field"],
        "errors": problems,
    }
    return JSONResponse({"error": detail}, status_code=422)


def create_app(settings: Settings | None = None, database: Database | None = None) -> FastAPI:
    settings = settings or get_settings()
    settings.check_secrets()
    ops_logging.configure_from(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = database is None
        if database is None:
            if not settings.database_url:
                raise RuntimeError("DATABASE_URL is not set (`toolsift up` sets it for you)")
            app.state.database = Database(settings.database_url, pool_size=settings.db_pool_size)
        app.state.hot_pool = HotPool(app.state.database.url, size=settings.select_pool_size)
        await app.state.hot_pool.open()
        # The backend is imported now, not in a request, and its model loads in the
        # background: a first select waiting out a cold load would be served by BM25 alone.
        embedder = query_embedder(app.state)
        if embedder is not None:
            _warm_up(embedder.backend)
        mcp_endpoint.bind(app.state.database, embedder, app.state.rate_limiter)
        async with mcp_endpoint.run():
            yield
        await app.state.hot_pool.close()
        if owned:
            app.state.database.dispose()
        if app.state.rate_limiter is not None:
            app.state.rate_limiter.close()
            await app.state.rate_limiter.aclose()

    app = FastAPI(title="toolsift", version=__version__, description=DESCRIPTION, lifespan=lifespan)
    app.state.settings = settings
    app.state.rate_limiter = RateLimiter.from_settings(settings)
    if database is not None:
        app.state.database = database
    app.add_exception_handler(AppError, _app_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    for database_error in (
        OperationalError,
        DBAPIError,
        PoolTimeout,
        psycopg.errors.IntegrityError,
    ):
        app.add_exception_handler(database_error, _database_error)
    # Innermost: it sees the status the exception handlers gave (a 401 keeps its reservation).
    app.add_middleware(SettleReservations)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    if settings.cors_origins:  # off unless origins are configured
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["authorization", "content-type", REQUEST_ID_HEADER],
            expose_headers=[REQUEST_ID_HEADER, "retry-after"],
        )
    # Outermost: every response, 413s and CORS preflights included, carries the request id.
    app.add_middleware(RequestContext, max_query_bytes=settings.max_query_bytes)

    # The agent routes first: every request is matched against the routes in order, and
    # selects are most of the traffic.
    app.include_router(selection_endpoints.router, prefix="/v1")
    app.include_router(feedback_endpoints.router, prefix="/v1")
    admin = [tenant_endpoints.router, access_endpoints.permissions, access_endpoints.roles]
    admin += [access_endpoints.keys, tool_endpoints.router, embedding_endpoints.router]
    admin += [audit_endpoints.router, analytics_endpoints.router, analytics_endpoints.dashboard]
    admin += [mcp_endpoints.router]
    for router in admin:
        app.include_router(router, prefix="/admin/v1")
    app.include_router(health.router)
    # MCP for agents (streamable HTTP, agent key): `search_tools` runs the caller's select.
    mcp_endpoint = McpEndpoint(database, settings)
    # `/mcp` itself too: the mount alone answers it with a 307 to `/mcp/`, before the key is
    # looked at, and clients that do not follow a redirected POST then fail.
    app.router.routes.append(Route("/mcp", mcp_endpoint, include_in_schema=False))
    app.mount("/mcp", mcp_endpoint)
    return app
