"""One agent turn: permissions, query, scores, budget, registry order, log."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import anyio.to_thread
import jsonschema_rs
import psycopg
from psycopg.types.json import Jsonb
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ..auth.deps import AgentKey, Principal
from ..auth.keys import VouchedKeys
from ..db import HotPool
from ..embedding.base import EmbeddingBackend, EmbeddingError, vector_literal
from ..embedding.cache import CachedBackend
from ..errors import AppError, Forbidden, TenantDeleted, Unauthenticated
from ..lexical.analysis import TEXT_SEARCH_CONFIG
from ..models import Tool
from ..tools.schemas import TOOL_NAME_PATTERN
from . import bm25, dense
from .query import build_query, steps, used_tools
from .schemas import AuthorizeRequest, AuthorizeResponse, SelectRequest, SelectResponse

_log = logging.getLogger(__name__)
_TOOL_NAME = re.compile(TOOL_NAME_PATTERN)

# Ranked candidates considered for the budget: enough to skip big ones and try smaller ones.
CANDIDATE_POOL = 100

# The whole select (selection/sql/toolsift_select.sql); every argument typed, so the call
# resolves whatever the driver makes of a Python value.
_SELECT = """
    SELECT toolsift_select(
        %(tenant_id)s::uuid, %(key_id)s::uuid, %(key_hash)s::text, %(roles)s::text[],
        %(selection_id)s::uuid, %(query)s::text, %(config)s::regconfig, %(k1)s::float8,
        %(b)s::float8, %(fusion)s::jsonb, %(pool)s::integer, %(mode)s::text,
        %(vector)s::vector, %(model)s::text, %(used)s::text[], %(k)s::integer,
        %(budget)s::integer, %(format)s::text, %(debug)s::boolean, %(elapsed_ms)s::float8,
        %(steps)s::vector[])
"""
# The fusion's defaults, as SQL reads them: a tenant's own `fusion` setting overrides them.
_FUSION = Jsonb(dense.DEFAULTS)
# The key alone, before a query is embedded for it (toolsift_select checks it again).
_CHECK_KEY = (
    "SELECT toolsift_agent_scope(%(tenant_id)s::uuid, %(key_id)s::uuid, %(key_hash)s::text,"
    " NULL::text[])"
)
#: SQLSTATEs raised by toolsift_agent_scope and toolsift_select.
_BAD_KEY = "TSA01"
_ROLE_NOT_GRANTED = "TSA02"
_NOT_AGENT = "TSA03"

# The roles' grants as this transaction's permissions (migration 0008).
_APPLY_ROLES = text("SELECT toolsift_apply_roles(CAST(:tenant_id AS uuid), CAST(:roles AS text[]))")


def resolve_roles(principal: Principal, asserted: Sequence[str] | None) -> list[str]:
    """An agent key acts only in roles it was granted; default: all of them."""
    if asserted is None:
        return sorted(principal.roles)
    for index, role in enumerate(asserted):
        if role not in principal.roles:
            raise Forbidden(f"role {role!r} is not granted to this key", field=f"roles[{index}]")
    return sorted(set(asserted))


def apply_roles(session: Session, principal: Principal, roles: Sequence[str]) -> None:
    """From here on, RLS shows this transaction public tools and those the roles allow."""
    permissions = session.execute(
        _APPLY_ROLES, {"tenant_id": principal.tenant_id, "roles": list(roles)}
    ).scalar_one()
    session.info["permissions"] = permissions


def _refusal(error: psycopg.Error, request: SelectRequest) -> AppError | None:
    """The function's refusals (it raises before anything is scored or written) as the API's
    errors; None for any other error."""
    if error.sqlstate == _BAD_KEY:
        return Unauthenticated("invalid or revoked API key")
    if error.sqlstate == _NOT_AGENT:
        return Forbidden("this endpoint needs an agent key")
    if error.sqlstate == _ROLE_NOT_GRANTED and error.diag.message_detail:
        index = int(error.diag.message_detail)
        role = (request.roles or [])[index]
        return Forbidden(f"role {role!r} is not granted to this key", field=f"roles[{index}]")
    return None


async def _tenant_exists(conn: psycopg.AsyncConnection[Any], tenant_id: UUID) -> bool:
    async with conn.transaction():
        await conn.execute("SELECT set_config('app.tenant_id', %s, true)", (str(tenant_id),))
        cursor = await conn.execute(
            "SELECT EXISTS (SELECT 1 FROM tenants WHERE id = %s)", (tenant_id,)
        )
        row = await cursor.fetchone()
    return bool(row and row[0])


def _wants_vector(call: dict[str, Any]) -> bool:
    """A query vector serves this call: its mode has a dense part and there is a query."""
    return bool(call["mode"] != "bm25" and call["query"].strip())


# Threads that compute query embeddings, per process, and the rest after a failure.
_QUERY_THREADS = 4
_EMBEDDER_REST_SECONDS = 5.0


class SelectionService:
    def __init__(self) -> None:
        self._query_threads: anyio.CapacityLimiter | None = None
        self.vouched = VouchedKeys()

    async def serve(
        self,
        pool: HotPool,
        key: AgentKey,
        request: SelectRequest,
        embedder: CachedBackend | None = None,
        *,
        embedding_deadline: float = 2.0,
    ) -> bytes:
        """The HTTP hot path: the response body, from one statement in one round trip.

        `toolsift_select` (migration 0010) checks the key, applies the roles, scores, fills
        the budget, writes the log row and renders the definitions, in its own implicit
        transaction; the body it returns is passed through as it is. Only the query's
        embedding, when dense is asked for, leaves the event loop for a worker thread.
        """
        started = time.perf_counter()
        call = self._call(request, key.tenant_id, key.key_id, key.key_hash, request.roles)
        if embedder is not None and _wants_vector(call):
            if key.key_hash not in self.vouched:
                await self._check_key(pool, call, request)
            await self._embed_within(call, embedder, embedding_deadline)
        async with pool.connection() as conn:
            call["elapsed_ms"] = (time.perf_counter() - started) * 1000
            try:
                cursor = await conn.execute(_SELECT, call)
            except psycopg.errors.DataException as error:
                if "vector dimensions" not in str(error):
                    raise
                # Stored vectors of the query's model have another dimension (the model's
                # dimension was changed under the same name): BM25 serves, and it is said.
                _log.error("dense search off for tenant %s: %s", key.tenant_id, error)
                call["vector"], call["model"], call["steps"] = None, "", None
                cursor = await conn.execute(_SELECT, call)
            except psycopg.errors.SerializationFailure:
                # The select reads one snapshot (REPEATABLE READ): its log row's check of the
                # tenant fails so when the tenant was deleted since the select began.
                if not await _tenant_exists(conn, key.tenant_id):
                    raise TenantDeleted() from None
                raise
            except psycopg.Error as error:
                if (refusal := _refusal(error, request)) is None:
                    raise
                raise refusal from None
            row = await cursor.fetchone()
        assert row is not None
        body: str = row[0]
        return body.encode()

    async def _check_key(self, pool: HotPool, call: dict[str, Any], request: SelectRequest) -> None:
        """A 401 or 403 before the query is embedded, for a key not vouched for yet."""
        async with pool.connection() as conn:
            try:
                await conn.execute(_CHECK_KEY, call)
            except psycopg.Error as error:
                if (refusal := _refusal(error, request)) is None:
                    raise
                raise refusal from None
        self.vouched.add(call["key_hash"])

    def select(
        self,
        session: Session,
        principal: Principal,
        request: SelectRequest,
        embedder: EmbeddingBackend | None = None,
    ) -> SelectResponse:
        """The same select in a caller's unit of work (MCP, in-process measurements): the
        session is already scoped to the caller's tenant, so only the roles are applied."""
        started = time.perf_counter()
        roles = resolve_roles(principal, request.roles)
        call = self._call(request, principal.tenant_id, principal.key_id, None, roles)
        if embedder is not None and _wants_vector(call):
            self._embed(call, embedder)
        conn = session.connection().connection.driver_connection
        assert isinstance(conn, psycopg.Connection)
        return SelectResponse.model_validate_json(self._run(conn, call, request, started))

    def _call(
        self,
        request: SelectRequest,
        tenant_id: UUID,
        key_id: UUID,
        key_hash: str | None,
        roles: Sequence[str] | None,
    ) -> dict[str, Any]:
        call = {
            "tenant_id": tenant_id,
            "key_id": key_id,
            "key_hash": key_hash,
            "roles": None if roles is None else list(roles),
            "selection_id": uuid.uuid4(),
            "query": build_query(request),
            "config": TEXT_SEARCH_CONFIG,
            "k1": bm25.K1,
            "b": bm25.B,
            "fusion": _FUSION,
            "pool": CANDIDATE_POOL,
            "mode": request.mode,
            "vector": None,
            "model": None,
            "steps": None,
            "used": used_tools(request),
            "k": request.k,
            "budget": request.budget_tokens,
            "format": request.format,
            "debug": request.debug,
        }
        if _wants_vector(call):
            # Until a vector replaces it: '' says a vector was wanted and is not there (every
            # tool then counts as missing), None that none was wanted (migration 0017).
            call["model"] = ""
        return call

    def _run(
        self,
        conn: psycopg.Connection[Any],
        call: dict[str, Any],
        request: SelectRequest,
        started: float,
    ) -> str:
        call["elapsed_ms"] = (time.perf_counter() - started) * 1000
        try:
            row = conn.execute(_SELECT, call).fetchone()
        except psycopg.Error as error:
            if (refusal := _refusal(error, request)) is None:
                raise
            raise refusal from None
        assert row is not None
        body: str = row[0]
        return body

    async def _embed_within(
        self, call: dict[str, Any], embedder: CachedBackend, deadline: float
    ) -> None:
        """`_embed` off the event loop, for at most `deadline` seconds.

        Its threads are few and its own: a slow embedding server cannot take the thread pool
        that health checks and admin requests run on. Past the deadline the select goes on
        without the vector (BM25 serves), and after a failure or a timeout the embedder rests
        for a few seconds, so a burst of selects does not wait the deadline out one by one.
        """
        if time.monotonic() < embedder.rests_until:
            return
        if self._query_threads is None:
            self._query_threads = anyio.CapacityLimiter(_QUERY_THREADS)
        # The thread fills its own dict: one abandoned at the deadline must not write into
        # the call while its statement is being sent.
        found: dict[str, Any] = {"query": call["query"]}
        with anyio.move_on_after(deadline) as scope:
            await anyio.to_thread.run_sync(
                self._embed, found, embedder, limiter=self._query_threads, abandon_on_cancel=True
            )
        if scope.cancelled_caught or "vector" not in found:
            embedder.rests_until = time.monotonic() + _EMBEDDER_REST_SECONDS
            return
        call["vector"], call["model"] = found["vector"], found["model"]
        call["steps"] = found.get("steps")

    def _embed(self, call: dict[str, Any], embedder: EmbeddingBackend) -> None:
        """Add the query vector and its model to the call, and its steps' vectors where the
        request reads as several steps (one batch).

        A missing backend (the caller's test) or an embedding failure leaves dense out
        (BM25 still serves in hybrid): a select never fails for want of vectors.
        """
        texts = [call["query"], *steps(call["query"])]
        try:
            vector, *step_vectors = embedder.embed(texts)
        except EmbeddingError:
            return
        call["vector"], call["model"] = vector_literal(vector), embedder.model
        if step_vectors:
            # One array literal: a text[] parameter has no cast to vector[].
            call["steps"] = "{" + ",".join(f'"{vector_literal(v)}"' for v in step_vectors) + "}"

    def authorize(
        self, session: Session, principal: Principal, request: AuthorizeRequest
    ) -> AuthorizeResponse:
        """Selection narrows the menu; this is the check at execution time."""
        roles = resolve_roles(principal, request.roles)
        apply_roles(session, principal, roles)
        tool = None
        if _TOOL_NAME.fullmatch(request.tool):
            tool = session.scalar(
                select(Tool).where(Tool.name == request.tool, Tool.deleted_at.is_(None))
            )
        if tool is None:
            # Unknown and forbidden read the same: the answer never confirms a hidden tool.
            return AuthorizeResponse(allowed=False, reason="no such tool for this caller")
        if request.arguments is not None:
            errors = argument_errors(tool.input_schema, request.arguments)
            if errors:
                return AuthorizeResponse(
                    allowed=False, reason="arguments do not match the input schema", errors=errors
                )
        return AuthorizeResponse(allowed=True, reason="allowed")


# The regex engine bounds its backtracking: a schema's `pattern` (MCP servers' schemas are
# third-party text) cannot make one call hold the API's CPU for seconds, as `^(a+)+$` did
# under Python's `re`. A match that hits the limit is a failed check: the call is refused.
_PATTERNS = jsonschema_rs.FancyRegexOptions(backtrack_limit=100_000)


def argument_errors(schema: dict[str, Any], arguments: Any) -> list[str]:
    """Why `arguments` do not fit the tool's input schema ("path: reason"), or nothing.

    jsonschema-rs, offline (a `$ref` is never fetched): time bounded by its regex engine, and
    a schema whose `$ref`s loop (`{"$ref": "#"}`) is not an endless recursion.
    """
    try:
        validator = jsonschema_rs.Draft202012Validator(
            schema, pattern_options=_PATTERNS, offline=True
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as error:
        reason = str(error).splitlines()[0]
        return [f"(schema): the tool's input schema cannot check arguments: {reason}"]
    try:
        return sorted(
            f"{'/'.join(str(p) for p in e.instance_path) or '(root)'}: {e.message}"
            for e in validator.iter_errors(arguments)
        )
    except ValueError as error:  # the validator's own bounds (its recursion limit): a refusal
        return [f"(root): the arguments could not be checked: {str(error).splitlines()[0]}"]


selection = SelectionService()
