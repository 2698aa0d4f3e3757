"""One ASGI middleware for every request: request id in and out, access log, metrics, and
the query-string limit (bodies are bounded by kit.limits.BodyLimit)."""

from __future__ import annotations

import logging
import re
import time
import uuid
from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..kit.asgi import send_json
from . import metrics
from .logging import request_id

REQUEST_ID_HEADER = "x-request-id"
_VALID_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_access = logging.getLogger("toolsift.access")

# Filled by the select endpoint (in its worker thread; the dict itself is shared), read here.
_select_notes: ContextVar[dict[str, str] | None] = ContextVar("toolsift_select", default=None)


def note_select_mode(mode: str) -> None:
    """Label this request's latency in the per-mode select histogram."""
    notes = _select_notes.get()
    if notes is not None:
        notes["mode"] = mode


_PREFIXES = ("/admin/v1", "/v1")


def _route(scope: Scope) -> str:
    """The route template (`/admin/v1/tools/{tool_id}`), never raw ids, for bounded labels.

    Included routers hold their paths without the mount prefix, so the prefix is put back.
    """
    path = getattr(scope.get("route"), "path", None)
    if not path:
        return "unmatched"
    raw = str(scope.get("path", ""))
    prefix = next((p for p in _PREFIXES if raw.startswith(p + "/") and not path.startswith(p)), "")
    return f"{prefix}{path}"


class RequestContext:
    def __init__(self, app: ASGIApp, *, max_query_bytes: int) -> None:
        self.app = app
        self.max_query_bytes = max_query_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope["headers"]).get(REQUEST_ID_HEADER.encode(), b"").decode("latin-1")
        rid = incoming if _VALID_ID.match(incoming) else uuid.uuid4().hex
        token = request_id.set(rid)
        notes: dict[str, str] = {}
        notes_token = _select_notes.set(notes)
        started = time.perf_counter()
        status = 500
        responded = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, responded
            if message["type"] == "http.response.start":
                status, responded = message["status"], True
                headers = [(k, v) for k, v in message.get("headers", []) if k != b"x-request-id"]
                headers.append((b"x-request-id", rid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            if len(scope.get("query_string", b"")) > self.max_query_bytes:
                await self._refuse_query(send_with_id)
            else:
                await self.app(scope, receive, send_with_id)
        except Exception:
            _access.exception("unhandled error")
            if responded:  # too late for an answer of our own
                raise
            # Answered here rather than by the framework's outer handler, which sends plain
            # text and no request id: the id is what finds this traceback in the logs.
            error = {"code": "internal_error", "message": "internal error"}
            await send_json(send_with_id, 500, {"error": error})
        finally:
            elapsed = time.perf_counter() - started
            route = _route(scope)
            method = scope.get("method", "")
            metrics.REQUESTS.labels(method, route, str(status)).inc()
            metrics.REQUEST_SECONDS.labels(route).observe(elapsed)
            if "mode" in notes:
                metrics.SELECT_SECONDS.labels(notes["mode"], str(status)).observe(elapsed)
            if route not in ("/healthz", "/readyz", "/metrics"):
                extra: dict[str, Any] = {
                    "method": method,
                    "path": scope.get("path", ""),
                    "route": route,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 2),
                }
                _access.info("%s %s %s", method, scope.get("path", ""), status, extra=extra)
            _select_notes.reset(notes_token)
            request_id.reset(token)

    async def _refuse_query(self, send: Send) -> None:
        message = f"query string exceeds {self.max_query_bytes} bytes"
        error = {"code": "uri_too_long", "message": message, "field": "query"}
        await send_json(send, 414, {"error": error})
