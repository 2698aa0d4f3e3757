"""Embedding tasks: the outbox relay (on a beat schedule) and the batched, idempotent embed."""

from __future__ import annotations

from uuid import UUID

from sqlalchemy.exc import OperationalError

from toolsift.config import get_settings
from toolsift.embedding import service
from toolsift.embedding.base import EmbeddingUnavailable
from workers import resources
from workers.celery_app import celery_app


@celery_app.task(name="outbox.relay", ignore_result=True)
def relay() -> int:
    """Publish due outbox jobs as `tools.embed` batches."""
    settings = get_settings()

    def publish(tenant_id: UUID, jobs: list[UUID]) -> None:
        embed.apply_async(
            args=[str(tenant_id), [str(j) for j in jobs]],
            # A broker that is down fails this run at once; the jobs stay for the next run.
            retry=False,
        )

    return service.relay(
        resources.database(),
        publish,
        lease_seconds=settings.outbox_lease_seconds,
        batch_tools=settings.embed_batch_tools,
    )


@celery_app.task(
    name="tools.embed",
    ignore_result=True,
    acks_late=True,
    autoretry_for=(EmbeddingUnavailable, OperationalError),
    retry_backoff=True,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=20,
)
def embed(tenant_id: str, jobs: list[str]) -> dict[str, int | str]:
    """Embed the tools of these jobs; repeating it is harmless (versions decide)."""
    result = service.embed_jobs(
        resources.database(),
        resources.embedding_backend(),
        UUID(tenant_id),
        [UUID(j) for j in jobs],
    )
    return {
        "jobs": result.jobs,
        "embedded": result.embedded,
        "carried": result.carried,
        "model": result.model,
    }
