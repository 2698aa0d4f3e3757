"""Syncing MCP sources across units of work: which are due, and one source's sync.

A sync reads the server outside any transaction (a slow server holds no connection), then
applies what it listed in a unit of work of the source's tenant (`service.McpService.apply`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from sqlalchemy import func, select, text
from sqlalchemy.exc import DataError, IntegrityError

from ..config import Settings
from ..db import ALL_PERMISSIONS, Database
from ..errors import AppError, NotFound, Unprocessable
from ..models import McpSource
from ..security import audit
from .catalog import CatalogError
from .fetch import Catalog, FetchError, Target, fetch_catalog_sync
from .schemas import SyncRead
from .secrets import SecretsUnreadable, scrub
from .service import mcp, secrets_field, utc_now

_log = logging.getLogger(__name__)
# Lets the scheduler's reads see every tenant's sources (the `scheduler_read` policy).
_SCHEDULER = text("SELECT set_config('app.scheduler', 'on', true)")


@dataclass(frozen=True)
class Due:
    tenant_id: UUID
    source_id: UUID


def sync_source(
    database: Database,
    tenant_id: UUID,
    source_id: UUID,
    *,
    settings: Settings,
    actor: audit.Actor | None = None,
    fetch: Callable[[Target], Catalog] | None = None,
) -> SyncRead:
    """Fetch the catalog (outside any transaction), then apply it in one transaction.

    A failing server or a catalog the registry cannot take marks the source unhealthy with
    the error and changes nothing else. Secrets never reach the message: they are scrubbed.
    A failure names the field to look at: the source's `url` (or `command`) when the server
    gave no catalog, the tool the registry cannot take, or the setting that stopped it.
    """
    started = utc_now()
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        source = mcp.get(session, source_id)
        if not source.enabled:
            # Disabled after a scheduler claimed it: nothing to do, nothing to report.
            return SyncRead(source_id=source_id, status="skipped", error="the source is disabled")
        server_field = "command" if source.transport == "stdio" else "url"
        try:
            target, secrets = mcp.target(source, settings=settings)
        except (SecretsUnreadable, Unprocessable) as refused:
            message = getattr(refused, "message", str(refused))
            where = refused.field if isinstance(refused, Unprocessable) else secrets_field(source)
            mcp.record_failure(session, source, message, settings=settings)
            return SyncRead(source_id=source_id, status="failed", error=message, field=where)
    error: str | None = None
    field: str | None = None
    catalog: Catalog | None = None
    try:
        if fetch is not None:
            catalog = fetch(target)
        else:
            catalog = fetch_catalog_sync(target, secrets=secrets.values())
    except FetchError as failure:
        error, field = scrub(str(failure), secrets), server_field
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        if actor is not None:
            audit.track(session, actor)
        # The tenant's admin lock before the source row, in the order an admin write that
        # changes this source takes them (the lock at its flush, then the row).
        audit.lock_chain(session, tenant_id)
        locked = session.scalar(
            select(McpSource).where(McpSource.id == source_id).with_for_update()
        )
        if locked is None:
            raise NotFound("source not found", field="source_id")
        source = locked
        if source.last_synced_at is not None and source.last_synced_at > started:
            # A sync that started later already applied a newer catalog.
            return SyncRead(source_id=source_id, status="skipped")
        if catalog is not None:
            try:
                with session.begin_nested():
                    result = mcp.apply(session, source, catalog, settings=settings)
                _log.info(
                    "mcp sync of %s: %d tools, %d created, %d updated, %d removed, %d held",
                    source_id,
                    result.tools,
                    result.created,
                    result.updated,
                    result.removed,
                    result.held,
                )
                return result
            except (CatalogError, AppError) as failure:
                error = scrub(str(getattr(failure, "message", failure)), secrets)
                field = failure.field
            except (IntegrityError, DataError) as refused:
                # A catalog the checks above let through but the database would not store:
                # a bug of ours, recorded on the source (not a 500 that leaves it "healthy").
                _log.exception("mcp sync of %s: the database refused the catalog", source_id)
                reason = str(refused.orig).splitlines()[0]
                error = scrub(f"the registry could not store this catalog: {reason}", secrets)
                field = "tools"
        assert error is not None
        mcp.record_failure(session, source, error, settings=settings)
        _log.warning("mcp sync of %s failed: %s", source_id, error)
        return SyncRead(source_id=source_id, status="failed", error=error, field=field)


def due_sources(database: Database, *, limit: int = 1000) -> list[Due]:
    """Enabled sources whose next sync is due, across tenants (ids only)."""
    with database.unit_of_work(None) as session:
        session.execute(_SCHEDULER)
        rows = session.execute(
            select(McpSource.tenant_id, McpSource.id)
            .where(
                McpSource.enabled.is_(True),
                (McpSource.next_sync_at.is_(None)) | (McpSource.next_sync_at <= func.now()),
            )
            .order_by(McpSource.next_sync_at.nulls_first())
            .limit(limit)
        ).all()
    return [Due(t, s) for t, s in rows]


def schedule(database: Database, enqueue: Callable[[Due], None]) -> int:
    """Claim each due source in its tenant's transaction and enqueue its sync after commit."""
    count = 0
    for due in due_sources(database):
        with database.unit_of_work(due.tenant_id, permissions=ALL_PERMISSIONS) as session:
            claimed = mcp.claim(session, due.source_id)
        if claimed:
            enqueue(due)
            count += 1
    return count


def listening_sources(database: Database) -> dict[Due, datetime]:
    """Enabled sources that want change notifications, across tenants, with their
    last-change time (a changed source's listener is restarted)."""
    with database.unit_of_work(None) as session:
        session.execute(_SCHEDULER)
        rows = session.execute(
            select(McpSource.tenant_id, McpSource.id, McpSource.updated_at).where(
                McpSource.enabled.is_(True), McpSource.listen.is_(True)
            )
        ).all()
    return {Due(t, s): u for t, s, u in rows}
