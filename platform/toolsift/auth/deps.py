"""Who is calling, and the one transaction their request runs in."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any
from uuid import UUID

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import text
from sqlalchemy.orm import Session

from ..db import ALL_PERMISSIONS, Database
from ..errors import Forbidden, NoCredentials, Unauthenticated
from ..security import audit
from ..security.ratelimit import scope_address
from . import keys

bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer tsk_...`")


@dataclass(frozen=True)
class Principal:
    tenant_id: UUID
    key_id: UUID
    scope: str
    roles: frozenset[str]


@dataclass(frozen=True)
class Context:
    """The caller and the session of their request (already scoped to their tenant)."""

    principal: Principal
    session: Session


def get_database(request: Request) -> Database:
    database: Database = request.app.state.database
    return database


_KEY = text(
    """
    SELECT k.key_hash, k.scope, k.revoked_at IS NOT NULL AS revoked,
           coalesce(array_agg(r.name) FILTER (WHERE r.name IS NOT NULL), '{}') AS roles
    FROM api_keys k
    LEFT JOIN api_key_roles kr ON kr.tenant_id = k.tenant_id AND kr.key_id = k.id
    LEFT JOIN roles r ON r.tenant_id = kr.tenant_id AND r.id = kr.role_id
    WHERE k.tenant_id = :tenant_id AND k.id = :key_id
    GROUP BY k.key_hash, k.scope, k.revoked_at
    """
)


def _authenticate(session: Session, parsed: keys.ParsedKey, key_hash: str) -> Principal:
    """One round trip: the key row (under the tenant's RLS) and the roles it may assert.

    `key_hash`: the presented key's HMAC (`keys.hash_key`), which the caller also counts
    its rate limit by.
    """
    row = session.execute(_KEY, {"tenant_id": parsed.tenant_id, "key_id": parsed.key_id}).first()
    # One message for unknown, wrong and revoked keys: nothing to probe.
    if row is None or row.revoked or not keys.matches(key_hash, row.key_hash):
        raise Unauthenticated("invalid or revoked API key")
    return Principal(parsed.tenant_id, parsed.key_id, row.scope, frozenset(row.roles))


@dataclass(frozen=True)
class AgentKey:
    """An agent key as presented: parsed and hashed, not yet checked against the database.

    The select hot path checks it in its own first statement (`toolsift_agent_scope`), in the
    same transaction as the select, so a revoked key fails from the very next request.
    """

    tenant_id: UUID
    key_id: UUID
    key_hash: str


async def presented_key(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)
) -> AgentKey:
    """No I/O, so on the event loop: a sync dependency would cost a worker-thread hop."""
    parsed, key_hash = read_key(
        credentials.credentials if credentials else None, request.app.state.settings.key_pepper
    )
    return AgentKey(parsed.tenant_id, parsed.key_id, key_hash)


def read_key(raw: str | None, pepper: str) -> tuple[keys.ParsedKey, str]:
    """The presented key, parsed, and its HMAC. No key, or none shaped like one, is a 401
    that looked nothing up (`NoCredentials`)."""
    if raw is None:
        raise NoCredentials("missing API key (Authorization: Bearer ...)")
    parsed = keys.parse_key(raw)
    if parsed is None:
        raise NoCredentials("malformed API key")
    return parsed, keys.hash_key(raw, pepper)


def limit(request: Request, key_hash: str, scope: str) -> None:
    """The key's rate limit, counted by the presented key's HMAC, and the block of a client
    address past its failed authentications: one Redis round trip, before the key is
    checked, so neither a made-up key nor a blocked address costs a database lookup.

    Counted before the key is checked, a wrong secret spends a budget of its own, never the
    real key's.
    """
    limiter = request.app.state.rate_limiter
    if limiter is not None:
        limiter.check(key_hash, scope, _address(request), _state(request))


async def limit_async(request: Request, key_hash: str, scope: str) -> None:
    """`limit` for the select path, which runs on the event loop."""
    limiter = request.app.state.rate_limiter
    if limiter is not None:
        await limiter.check_async(key_hash, scope, _address(request), _state(request))


def confirm(request: Request, key_hash: str) -> None:
    """The database accepted the key: its reservation is given back now, and from now on
    its requests reserve no failure."""
    limiter = request.app.state.rate_limiter
    if limiter is not None:
        limiter.confirm(key_hash, _state(request))


async def confirm_async(request: Request, key_hash: str) -> None:
    """`confirm` for the select path, which runs on the event loop."""
    limiter = request.app.state.rate_limiter
    if limiter is not None:
        await limiter.confirm_async(key_hash, _state(request))


async def count_refusal(request: Request, error: Exception) -> None:
    """A refused request on its way out: see `RateLimiter.count_refusal`."""
    limiter = request.app.state.rate_limiter
    if limiter is not None:
        await limiter.count_refusal(error, request.scope)


def _state(request: Request) -> dict[str, Any]:
    """The request's ASGI state, where `limit` keeps a reserved failure."""
    state: dict[str, Any] = request.scope.setdefault("state", {})
    return state


def _address(request: Request) -> str:
    return scope_address(request.scope)


def _context(
    request: Request, credentials: HTTPAuthorizationCredentials | None, scope: str
) -> Iterator[Context]:
    parsed, key_hash = read_key(
        credentials.credentials if credentials else None, request.app.state.settings.key_pepper
    )
    limit(request, key_hash, scope)
    database = get_database(request)
    permissions = ALL_PERMISSIONS if scope == "admin" else ""
    with database.unit_of_work(parsed.tenant_id, permissions=permissions) as session:
        principal = _authenticate(session, parsed, key_hash)
        confirm(request, key_hash)
        if principal.scope != scope:
            raise Forbidden(f"this endpoint needs an {scope} key")
        if scope == "admin":
            audit.track(session, audit.Actor("key", principal.key_id))
        yield Context(principal, session)


def admin_context(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)
) -> Iterator[Context]:
    yield from _context(request, credentials, "admin")


def agent_context(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)
) -> Iterator[Context]:
    yield from _context(request, credentials, "agent")


# scope="function": the transaction commits before the response is sent, so a failed
# commit is a 5xx, never a 2xx for a write that did not happen.
AdminContext = Annotated[Context, Depends(admin_context, scope="function")]
AgentContext = Annotated[Context, Depends(agent_context, scope="function")]
PresentedKey = Annotated[AgentKey, Depends(presented_key)]
