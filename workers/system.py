from __future__ import annotations

from sqlalchemy import text

from workers import resources
from workers.celery_app import celery_app


@celery_app.task(name="system.ping")
def ping() -> dict[str, str]:
    """Liveness of the whole path: broker -> worker -> database (as the RLS-bound app role)."""
    with resources.database().unit_of_work(None) as session:
        role = session.execute(text("SELECT current_user")).scalar_one()
    return {"status": "pong", "database_role": str(role)}
