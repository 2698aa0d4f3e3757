"""Partition upkeep of the selection logs (on a beat schedule)."""

from __future__ import annotations

from typing import Any

from toolsift.analytics.service import analytics
from toolsift.config import get_settings
from workers import resources
from workers.celery_app import celery_app


@celery_app.task(name="analytics.maintain_partitions")
def maintain_partitions() -> dict[str, Any]:
    """Create the coming months' partitions and apply retention; running it twice is harmless."""
    settings = get_settings()
    with resources.database().unit_of_work(None) as session:
        result = analytics.maintain_partitions(
            session,
            months_ahead=settings.partition_months_ahead,
            default_retention_days=settings.log_retention_days,
        )
    return result.model_dump()
