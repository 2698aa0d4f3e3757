"""The MCP endpoint for agents: one tool, `search_tools`, running the caller's select.

Streamable HTTP, stateless (every request stands alone, so any API process can serve it),
mounted in the FastAPI app at `/mcp`. Each HTTP request carries an agent key; the key is
checked before the MCP layer sees the request, and the select runs in the same kind of
transaction as `POST /v1/select`: the caller's tenant, the caller's roles, RLS before scoring.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, get_args

import anyio.to_thread
import jsonschema_rs
import mcp_types as types
import psycopg
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError
from starlette.types import Receive, Scope, Send

from .. import __version__
from ..access.schemas import NAME_PATTERN
from ..auth.deps import Principal, _authenticate, read_key
from ..config import Settings
from ..db import Database, tenant_gone
from ..embedding.base import EmbeddingBackend
from ..errors import AppError, Forbidden, TenantDeleted
from ..kit.asgi import send_json
from ..security.ratelimit import RateLimiter, scope_address
from ..selection.schemas import SelectRequest
from ..selection.service import selection
from ..tools.definitions import Format
from ..tools.schemas import MAX_TOOL_NAME

SEARCH_TOOLS = types.Tool(
    name="search_tools",
    title="Search tools",
    description=(
        "Find the tools for the task at hand among those you may use. Describe the task in "
        "`query`; returns the chosen tool definitions, core tools first, then registry order."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "maxLength": 32768, "description": "The task, in words."},
            "recent_tools": {
                "type": "array",
                "items": {"type": "string", "maxLength": MAX_TOOL_NAME},
                "maxItems": 50,
                "description": "Tools called recently, newest last.",
            },
            "roles": {
                "type": "array",
                "items": {"type": "string", "pattern": NAME_PATTERN},
                "maxItems": 50,
            },
            "k": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
            "budget_tokens": {"type": "integer", "minimum": 1, "maximum": 200000},
            "format": {"type": "string", "enum": list(get_args(Format)), "default": "mcp"},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
)


_ARGUMENTS = jsonschema_rs.Draft202012Validator(SEARCH_TOOLS.input_schema)


def argument_error(arguments: dict[str, Any]) -> tuple[str, str] | None:
    """The argument `tools/list` says is wrong, named as the caller wrote it, and why.

    Checked against the advertised schema before anything else: the select's own schema
    would name its internal fields (`messages.0.content`) and coerce `"5"` to a `k`.
    """
    properties = SEARCH_TOOLS.input_schema["properties"]
    for name in arguments:
        if name not in properties:
            return name[:64], f"unknown argument (expected one of {', '.join(properties)})"
    if "query" not in arguments:
        return "query", "required"
    for error in _ARGUMENTS.iter_errors(arguments):
        path = [str(p) for p in error.instance_path] or ["arguments"]
        # The message quotes the value: a 32 KB query would come back whole.
        message = error.message if len(error.message) <= 300 else error.message[:300] + "..."
        return path[0] + "".join(f"[{i}]" for i in path[1:]), message
    return None


def _request(arguments: dict[str, Any]) -> SelectRequest:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": arguments["query"]}],
        "task": {"recent_tools": arguments.get("recent_tools", [])},
        "format": arguments.get("format", "mcp"),
    }
    for name in ("roles", "k", "budget_tokens"):
        if name in arguments:
            value = arguments[name]
            # JSON Schema's "integer" admits 2.0; the select's strict fields do not.
            body[name] = int(value) if isinstance(value, float) and value.is_integer() else value
    return SelectRequest.model_validate(body)


def _error(message: str, field: str | None = None) -> types.CallToolResult:
    body = {"error": {"message": message, **({"field": field} if field else {})}}
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(body))], structured_content=body, is_error=True
    )


class McpEndpoint:
    """ASGI app: authenticate the agent key, then hand the request to the MCP transport."""

    def __init__(self, database: Database | None, settings: Settings) -> None:
        self._database = database
        self._embedder: EmbeddingBackend | None = None
        self._limiter: RateLimiter | None = None
        self.settings = settings
        self.server: Server[Any] = Server(
            "toolsift",
            version=__version__,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.manager = StreamableHTTPSessionManager(self.server, stateless=True, json_response=True)

    def bind(
        self,
        database: Database,
        embedder: EmbeddingBackend | None,
        limiter: RateLimiter | None = None,
    ) -> None:
        """The app's database, query embedder (dense and hybrid, as `/v1/select`) and rate
        limiter (a key's requests here count against the same agent budget)."""
        self._database = database
        self._embedder = embedder
        self._limiter = limiter

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    @property
    def database(self) -> Database:
        assert self._database is not None, "the app's lifespan binds the database"
        return self._database

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            principal = await anyio.to_thread.run_sync(self._principal, scope)
        except AppError as error:
            if self._limiter is not None:
                await self._limiter.count_refusal(error, scope)
            await _send_json(send, error.status_code, error.body(), error.headers)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.manager.handle_request(scope, receive, send)

    def _principal(self, scope: Scope) -> Principal:
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        scheme, _, raw = header.partition(" ")
        bearer = raw.strip() if scheme.lower() == "bearer" and raw else None
        parsed, key_hash = read_key(bearer, self.settings.key_pepper)
        if self._limiter is not None:  # before the lookup, as `auth.deps.limit`
            state = scope.setdefault("state", {})
            self._limiter.check(key_hash, "agent", scope_address(scope), state)
        with self.database.unit_of_work(parsed.tenant_id, permissions="") as session:
            principal = _authenticate(session, parsed, key_hash)
        if self._limiter is not None:
            self._limiter.confirm(key_hash, state)
        if principal.scope != "agent":
            raise Forbidden("this endpoint needs an agent key")
        return principal

    async def _list_tools(
        self, _ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[SEARCH_TOOLS])

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name != SEARCH_TOOLS.name:
            # A protocol error, as the MCP spec lists unknown tools (an argument the tool
            # refuses is the tool's own error, below).
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name[:64]!r}")
        principal: Principal = ctx.request.scope["state"]["principal"]
        arguments = params.arguments or {}
        if (wrong := argument_error(arguments)) is not None:
            field, why = wrong
            return _error(f"{field}: {why}", field)
        try:
            request = _request(arguments)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            field = {"messages.0.content": "query", "task.recent_tools": "recent_tools"}.get(
                field, field
            )
            return _error(f"{field}: {first['msg']}", field)
        try:
            body = await anyio.to_thread.run_sync(self._select, principal, request)
        except AppError as error:
            return _error(error.message, error.field)
        # The structured result serialized as the text too, as the spec asks of a tool that
        # returns both: a client that reads only text still gets the selection id to report.
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(body))], structured_content=body
        )

    def _select(self, principal: Principal, request: SelectRequest) -> dict[str, Any]:
        try:
            with self.database.unit_of_work(
                principal.tenant_id, permissions="", snapshot=True
            ) as session:
                response = selection.select(session, principal, request, self._embedder)
        except (DBAPIError, psycopg.Error) as error:
            # One snapshot: the log row's check of a tenant deleted since it was taken fails
            # as a serialization error (the hot path answers it the same way).
            cause = error.orig if isinstance(error, DBAPIError) else error
            conflict = isinstance(cause, psycopg.errors.SerializationFailure)
            if (conflict or tenant_gone(error)) and not self.database.tenant_exists(
                principal.tenant_id
            ):
                raise TenantDeleted() from None
            raise
        return response.model_dump(mode="json", exclude_none=True)


async def _send_json(
    send: Send, status: int, body: dict[str, Any], extra: dict[str, str] | None = None
) -> None:
    headers = {**(extra or {}), **({"WWW-Authenticate": "Bearer"} if status == 401 else {})}
    await send_json(send, status, body, headers)
