"""Reading the audit trail (writing it is the flush hook in audit.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from ..errors import BadRequest
from ..models import AuditEntry


class AuditService:
    def page(
        self, session: Session, *, before: str | None, limit: int
    ) -> tuple[Sequence[AuditEntry], str | None]:
        """Newest first; `before` is the previous page's `next_cursor`."""
        query = select(AuditEntry).order_by(AuditEntry.created_at.desc(), AuditEntry.id.desc())
        if before is not None:
            at, entry_id = _parse_cursor(before)
            query = query.where(tuple_(AuditEntry.created_at, AuditEntry.id) < (at, entry_id))
        rows = session.scalars(query.limit(limit + 1)).all()
        cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            cursor = f"{rows[-1].created_at.isoformat()}~{rows[-1].id}"
        return rows, cursor


def _parse_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        at, entry_id = cursor.split("~", 1)
        parsed = datetime.fromisoformat(at)
        if parsed.tzinfo is None:
            raise ValueError("naive")
        return parsed, UUID(entry_id)
    except ValueError:
        raise BadRequest("not a cursor from this endpoint", field="before") from None


audit = AuditService()
