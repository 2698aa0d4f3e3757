"""Engine, sessions and the unit of work: one transaction, one owner, the only code that commits."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import psycopg
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

from .config import APP_ROLE, normalise_database_url

ALL_PERMISSIONS = "*"

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


class Database:
    """The application's engine and session factory (one per process)."""

    def __init__(self, url: str, *, pool_size: int = 10, max_overflow: int = 20) -> None:
        def engine(**options: Any) -> Engine:
            made = create_engine(
                normalise_database_url(url),
                pool_size=pool_size,
                max_overflow=max_overflow,
                pool_recycle=3600,
                **options,
            )
            event.listen(made, "connect", _as_app_role)
            return made

        self.engine = engine(pool_pre_ping=True)
        # The select path's single statements: autocommit, no pre-ping (see `autocommit`).
        self.hot_engine = engine(isolation_level="AUTOCOMMIT")
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        event.listen(self.sessions, "after_begin", _apply_scope)

    @contextmanager
    def unit_of_work(
        self, tenant_id: UUID | None, *, permissions: str | Sequence[UUID] = ()
    ) -> Iterator[Session]:
        """A transaction scoped to one tenant; commits on success, rolls back on error.

        `permissions` is ALL_PERMISSIONS for admins or the permission ids an agent holds; the
        select path narrows it later with `set_permissions`, once roles are resolved.
        """
        info = {"tenant_id": tenant_id, "permissions": _encode(permissions)}
        with self.sessions(info=info) as session, session.begin():
            yield session

    @contextmanager
    def autocommit(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled driver connection in autocommit: one statement is its own transaction,
        sent in one round trip with no BEGIN or COMMIT (the select hot path).

        This pool does not ping a connection before handing it out, which would be a second
        round trip. A connection that died idle in it (a database restart) fails its
        statement instead, which reads as the ORM's OperationalError (a 503), and the whole
        pool is dropped then, so the connections that died with it fail no later request.
        No tenant is set here: the statement must scope itself (`toolsift_select`).
        """
        try:
            # The pool hands the driver's own error out of a failed connect: wrap it too.
            pooled = self.hot_engine.raw_connection()
        except psycopg.OperationalError as error:
            raise OperationalError("autocommit connect", None, error) from error
        try:
            conn = pooled.driver_connection
            assert isinstance(conn, psycopg.Connection)
            yield conn
        except psycopg.OperationalError as error:
            pooled.invalidate(error)
            self.hot_engine.dispose()
            raise OperationalError(
                "autocommit statement", None, error, connection_invalidated=True
            ) from error
        finally:
            pooled.close()

    def dispose(self) -> None:
        self.engine.dispose()
        self.hot_engine.dispose()


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
