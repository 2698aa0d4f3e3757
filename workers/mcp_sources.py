"""MCP source syncs: a beat task finds due sources, one task per source syncs it."""

from __future__ import annotations

from uuid import UUID

from sqlalchemy.exc import OperationalError

from toolsift.config import get_settings
from toolsift.mcp import service
from toolsift.mcp import sync as syncing
from workers import resources
from workers.celery_app import celery_app


@celery_app.task(name="mcp.schedule", ignore_result=True)
def schedule() -> int:
    """Claim due sources (their own schedule, or the server's list TTL) and queue their syncs."""

    def enqueue(due: syncing.Due) -> None:
        sync.apply_async(
            kwargs={"tenant_id": str(due.tenant_id), "source_id": str(due.source_id)},
            # A claim lasts CLAIM_SECONDS; a sync still queued by then is redundant.
            expires=service.CLAIM_SECONDS,
        )

    return syncing.schedule(resources.database(), enqueue)


@celery_app.task(
    name="mcp.sync",
    ignore_result=True,
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    retry_backoff_max=60,
    max_retries=5,
)
def sync(*, tenant_id: str, source_id: str) -> dict[str, object]:
    """Sync one source; repeating it is harmless (an unchanged catalog changes nothing)."""
    result = syncing.sync_source(
        resources.database(),
        UUID(tenant_id),
        UUID(source_id),
        settings=get_settings(),
        actor=service.SYNC_ACTOR,
    )
    return result.model_dump(mode="json")
