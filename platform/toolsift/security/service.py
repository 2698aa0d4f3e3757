"""Reading the audit trail (writing it is the flush hook in audit.py)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from ..kit.pagination import KeysetCursor
from ..models import AuditEntry
from .audit import GENESIS, entry_hash
from .schemas import AuditChain, ChainBreak

CURSOR = KeysetCursor(b"a", field="before", legacy_separator="~")


class AuditService:
    def page(
        self, session: Session, *, before: str | None, limit: int
    ) -> tuple[Sequence[AuditEntry], str | None]:
        """Newest first; `before` is the previous page's `next_cursor`."""
        query = select(AuditEntry).order_by(AuditEntry.created_at.desc(), AuditEntry.id.desc())
        if before is not None:
            at, entry_id = CURSOR.read(before)
            query = query.where(tuple_(AuditEntry.created_at, AuditEntry.id) < (at, entry_id))
        return CURSOR.page(session.scalars(query.limit(limit + 1)).all(), limit)

    def verify(self, session: Session) -> AuditChain:
        """Walk the tenant's chain from its first entry: every link and every hash must hold.

        A changed entry fails its own hash, a removed one leaves a gap in `seq`, an entry
        rewritten with a fresh hash fails the next link. Removing the newest entries leaves a
        shorter valid chain: compare `head` with a copy kept elsewhere to catch that.
        """
        rows = session.scalars(
            select(AuditEntry).where(AuditEntry.seq.is_not(None)).order_by(AuditEntry.seq)
        )
        expected_seq, prev, count = 1, GENESIS, 0
        for entry in rows:
            problem = None
            if entry.seq != expected_seq:
                problem = f"expected seq {expected_seq}: an entry is missing"
            elif entry.prev_hash != prev:
                problem = "prev_hash is not the previous entry's hash"
            elif entry_hash(entry) != entry.entry_hash:
                problem = "the entry does not match its hash: it was changed"
            if problem is not None:
                broken = ChainBreak(id=entry.id, seq=entry.seq or 0, reason=problem)
                return AuditChain(ok=False, entries=count, head=prev, broken_at=broken)
            expected_seq, prev, count = expected_seq + 1, entry.entry_hash or "", count + 1
        return AuditChain(ok=True, entries=count, head=prev, broken_at=None)


audit = AuditService()
