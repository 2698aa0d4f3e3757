from __future__ import annotations

from celery import Celery
from celery.signals import worker_process_init

from toolsift.config import get_settings

settings = get_settings()

celery_app = Celery("toolsift", broker=settings.redis_url or "redis://127.0.0.1:6379/0")
celery_app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_serializer="json",
    accept_content=["json"],
    result_backend=settings.redis_url,
    result_expires=3600,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
celery_app.conf.include = ["workers.system", "workers.embedding", "workers.analytics"]
celery_app.conf.beat_schedule = {
    "outbox-relay": {
        "task": "outbox.relay",
        "schedule": settings.outbox_relay_interval,
        # Runs queued behind a backlog are redundant: the next one claims the same jobs.
        "options": {"expires": max(5.0, 5 * settings.outbox_relay_interval)},
    },
    # Monthly partitions of the selection logs ahead of time, and retention.
    "analytics-partitions": {
        "task": "analytics.maintain_partitions",
        "schedule": settings.partition_maintenance_interval,
        "options": {"expires": settings.partition_maintenance_interval},
    },
}


@worker_process_init.connect
def _fresh_connections(**_: object) -> None:
    """Never share the parent's pooled database connections across fork."""
    from workers import resources

    resources.reset()
