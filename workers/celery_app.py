from __future__ import annotations

import logging

from celery import Celery
from celery.signals import setup_logging, worker_process_init

from toolsift.config import get_settings
from toolsift.ops import logging as ops_logging

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
celery_app.conf.include = [
    "workers.system",
    "workers.embedding",
    "workers.analytics",
    "workers.mcp_sources",
]
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
    "mcp-schedule": {
        "task": "mcp.schedule",
        "schedule": settings.mcp_schedule_interval,
        "options": {"expires": settings.mcp_schedule_interval},
    },
}


@worker_process_init.connect
def _fresh_connections(**_: object) -> None:
    """Never share the parent's pooled database connections across fork."""
    from workers import resources

    resources.reset()


# A line per task received and done, and per beat send: eight lines a second for the
# relay alone at INFO. They are DEBUG detail here; tasks log what they did themselves.
_PER_TASK_LOGGERS = ("celery.worker.strategy", "celery.app.trace", "celery.beat")


@setup_logging.connect
def _logging(loglevel: int | str | None = None, **_: object) -> None:
    """The deployment's log format, level and redaction, as the API has them (connected,
    this replaces Celery's own logging setup in the worker and in beat). The level is the
    command's `--loglevel`, which `toolsift worker` takes from TOOLSIFT_LOG_LEVEL."""
    level = logging.getLevelName(loglevel) if isinstance(loglevel, int) else loglevel
    ops_logging.configure_from(settings, level=level or settings.log_level)
    quiet = max(logging.getLogger().getEffectiveLevel(), logging.WARNING)
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        for name in _PER_TASK_LOGGERS:
            logging.getLogger(name).setLevel(quiet)
