"""Engine, sessions and the unit of work: one transaction, one owner, the only code that commits."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

from .config import APP_ROLE, libpq_url, normalise_database_url
from .models.base import json_text

ALL_PERMISSIONS = "*"
#: Reads a few columns across tenants (metrics, the operator's tenant list); migrations grant it.
OBSERVER_ROLE = "toolsift_observer"

_log = logging.getLogger(__name__)

# The role again, transaction-locally: it survives a pooler's RESET ALL / DISCARD ALL between
# transactions, which would drop the connection-level SET ROLE below.
_SET_TENANT = text(
    f"SELECT set_config('role', '{APP_ROLE}', true),"
    " set_config('app.tenant_id', :tenant_id, true),"
    " set_config('app.permissions', :permissions, true)"
)


def _as_app_role(dbapi_connection: Any, _record: Any) -> None:
    """Whatever login the URL names, queries run as the RLS-bound application role.

    A superuser or table owner would silently bypass row-level security; SET ROLE makes one
    DATABASE_URL safe for both migrations (as the login) and the app (as toolsift_app).
    """
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        if cursor.fetchone()[0] != APP_ROLE:
            cursor.execute(f"SET ROLE {APP_ROLE}")
    dbapi_connection.commit()


def tenant_gone(error: BaseException) -> bool:
    """Whether a write failed because its tenant was deleted while the request ran: every
    tenant table's foreign key to `tenants` is named `fk_<table>_tenant_id_tenants`."""
    cause = error.orig if isinstance(error, DBAPIError) else error
    return isinstance(cause, psycopg.errors.ForeignKeyViolation) and (
        cause.diag.constraint_name or ""
    ).endswith("_tenant_id_tenants")


def as_observer(session: Session) -> None:
    """Switch this transaction to the observer role, which reads its granted columns of every
    tenant. Only a login that is a member may (the migrating login is; the app role is not),
    so a request served as the app role cannot widen its own view."""
    session.execute(text("SELECT set_config('role', :role, true)"), {"role": OBSERVER_ROLE})


class Database:
    """The application's engine and session factory (one per process)."""

    def __init__(self, url: str, *, pool_size: int = 10, max_overflow: int = 20) -> None:
        self.url = normalise_database_url(url)
        self.engine = create_engine(
            self.url,
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_recycle=3600,
            pool_pre_ping=True,
            json_serializer=json_text,
        )
        event.listen(self.engine, "connect", _as_app_role)
        self._snapshot_engine = self.engine.execution_options(isolation_level="REPEATABLE READ")
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        event.listen(self.sessions, "after_begin", _apply_scope)

    @contextmanager
    def unit_of_work(
        self,
        tenant_id: UUID | None,
        *,
        permissions: str | Sequence[UUID] = (),
        snapshot: bool = False,
    ) -> Iterator[Session]:
        """A transaction scoped to one tenant; commits on success, rolls back on error.

        `permissions` is ALL_PERMISSIONS for admins or the permission ids an agent holds; the
        select path narrows it later with `set_permissions`, once roles are resolved.
        `snapshot`: every statement sees the database as the first one did (REPEATABLE READ),
        for reads that must agree with each other, such as a select.
        """
        info = {"tenant_id": tenant_id, "permissions": _encode(permissions)}
        bind = self._snapshot_engine if snapshot else self.engine
        with self.sessions(info=info, bind=bind) as session, session.begin():
            yield session

    def tenant_exists(self, tenant_id: UUID) -> bool:
        """Whether the tenant is there (it may have been deleted while a request ran)."""
        with self.unit_of_work(tenant_id) as session:
            found = session.scalar(text("SELECT 1 FROM tenants WHERE id = :t"), {"t": tenant_id})
        return found is not None

    def dispose(self) -> None:
        self.engine.dispose()


#: The hot pool's connections in pg_stat_activity.
HOT_POOL_NAME = "toolsift-select"


# Seconds the select pool keeps reconnecting on its own after losing its connections.
RECONNECT_TIMEOUT = 4.0
# Seconds a select's statement may take before it is cancelled and answered with a 503: a
# database that stops answering (a stopped postmaster, a partition) held it forever.
SELECT_TIMEOUT = 10.0


class HotPool:
    """The select hot path's connections: asyncio, autocommit, one statement per request.

    A select is one statement that scopes itself (`toolsift_select`), so it needs no
    transaction block, no tenant settings and no thread: it runs on the event loop, and
    the request is not handed to a worker thread and back (about 0.5 ms of CPU a select).
    Connections are not pinged when handed out (that would be a second round trip). One
    that died idle (a database restart) fails its statement, which reads as the ORM's
    OperationalError (a 503); the pool is then drained, so the connections that died with
    it fail no later request, and it reconnects in the background.
    """

    def __init__(
        self,
        url: str,
        *,
        size: int = 4,
        timeout: float = 5.0,
        statement_timeout: float = SELECT_TIMEOUT,
    ) -> None:
        self.conninfo = libpq_url(normalise_database_url(url))
        self.size = size
        self.timeout = timeout
        self.statement_timeout = statement_timeout
        self.pool = self._pool()
        self._drained_at = 0.0

    def _pool(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        # A fixed size: connections are made at start and after a loss, never per request.
        # Reconnecting backs off (1, 2, 4, ... s) until `reconnect_timeout`, and the pool's
        # default of 5 minutes let the wait between two attempts grow to half an outage: a
        # database down 35 s was back 18 s before the selects were. Past this shorter
        # timeout the pool stops trying on its own, and the next request that waits for a
        # connection makes it try again at once.
        return AsyncConnectionPool(
            self.conninfo,
            min_size=self.size,
            max_size=self.size,
            kwargs={"autocommit": True, "application_name": HOT_POOL_NAME},
            configure=_hot_connection,
            timeout=self.timeout,
            reconnect_timeout=RECONNECT_TIMEOUT,
            open=False,
            name="select",
        )

    async def open(self) -> None:
        """Connect before serving, so that no first request waits for it; a database that is
        not up yet does not stop the API: the pool then keeps connecting in the background."""
        try:
            await self.pool.open(wait=True, timeout=self.timeout)
        except PoolTimeout as error:  # `wait` closed that pool; a closed one cannot reopen
            _log.warning("select pool: database not reachable yet (%s); retrying", error)
            self.pool = self._pool()
            await self.pool.open(wait=False)

    async def close(self) -> None:
        await self.pool.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        try:
            async with self.pool.connection() as conn:
                # Cancelling sends the server a cancel request and waits up to 5 s for it;
                # a connection left in an unknown state is closed by the pool.
                async with asyncio.timeout(self.statement_timeout):
                    yield conn
        except PoolTimeout as error:  # busy or still reconnecting: nothing to drop
            raise OperationalError("select connection", None, error) from error
        except TimeoutError as error:
            raise OperationalError("select statement", None, error) from error
        except psycopg.OperationalError as error:
            if time.monotonic() - self._drained_at > 1.0:  # once for a burst of failures
                self._drained_at = time.monotonic()
                await self.pool.drain()
            raise OperationalError(
                "select statement", None, error, connection_invalidated=True
            ) from error


async def _as_app_role_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """`_as_app_role` for the hot pool's connections (autocommit: SET ROLE sticks)."""
    cursor = await conn.execute("SELECT current_user")
    row = await cursor.fetchone()
    if row is None or row[0] != APP_ROLE:
        await conn.execute(f"SET ROLE {APP_ROLE}")


async def _hot_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """The app role, and one snapshot per select: `toolsift_select` runs several statements,
    and under READ COMMITTED a tool write committed between them could make the budget count
    one version of a tool and the answer render another. The select only inserts its log
    row, so REPEATABLE READ never fails it with a serialization error."""
    await _as_app_role_async(conn)
    await conn.execute("SET default_transaction_isolation = 'repeatable read'")


def _encode(permissions: str | Sequence[UUID]) -> str:
    if isinstance(permissions, str):
        return permissions
    return ",".join(str(p) for p in permissions)


def _apply_scope(session: Session, _tx: SessionTransaction, connection: Connection) -> None:
    # set_config(..., true) is transaction-local, so a pooled connection forgets the tenant.
    tenant_id = session.info.get("tenant_id")
    connection.execute(
        _SET_TENANT,
        {
            "tenant_id": str(tenant_id) if tenant_id else "",
            "permissions": session.info.get("permissions", ""),
        },
    )


def set_permissions(session: Session, permissions: str | Sequence[UUID]) -> None:
    """Narrow the current transaction to these permissions (RLS reads them per statement)."""
    session.info["permissions"] = _encode(permissions)
    session.execute(
        text("SELECT set_config('app.permissions', :p, true)"), {"p": session.info["permissions"]}
    )


def set_tenant(session: Session, tenant_id: UUID) -> None:
    """Switch the current transaction to another tenant (used when a tenant is created)."""
    session.info["tenant_id"] = tenant_id
    session.execute(text("SELECT set_config('app.tenant_id', :t, true)"), {"t": str(tenant_id)})
