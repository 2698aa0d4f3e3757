"""Pages and their cursors.

The tools list's cursor is the last position, an integer. The lists ordered by time (the
audit log, the tenants) end a page at a row's `(created_at, id)`; their cursor is that pair
as an opaque base64url token without padding, so it can be pasted into a URL as it is. The
text form they gave before (`2026-12-05T02:39:55.851016+00:00~<id>`) carried a `+` that an
unencoded query string turns into a space, and the next page was refused.
"""

from __future__ import annotations

import base64
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar
from uuid import UUID

from pydantic import BaseModel

from ..errors import Unprocessable

T = TypeVar("T")
R = TypeVar("R")


class Page(BaseModel, Generic[T]):
    """Keyset page: `next_cursor` is passed back as `after` (stable under concurrent appends)."""

    items: list[T]
    next_cursor: int | None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# The list's tag, microseconds since the epoch, the row's id: 25 bytes, 34 characters.
_LAYOUT = struct.Struct(">cq16s")
_TOKEN = re.compile(r"[A-Za-z0-9_-]{34}")


@dataclass(frozen=True)
class KeysetCursor:
    """The cursor of one list ordered by `(created_at, id)`.

    `tag` sets its tokens apart from another list's, whose rows would page nonsensically.
    `legacy_separator` reads the text form earlier versions gave, a `+` that arrived as a
    space included, so a client holding one keeps paging.
    """

    tag: bytes
    field: str
    legacy_separator: str

    def issue(self, at: datetime, row_id: UUID) -> str:
        micros = (at - _EPOCH) // _MICROSECOND
        token = base64.urlsafe_b64encode(_LAYOUT.pack(self.tag, micros, row_id.bytes))
        return token.rstrip(b"=").decode()

    def page(self, rows: Sequence[R], limit: int) -> tuple[Sequence[R], str | None]:
        """The page of `rows`, read with a limit of `limit + 1` so that a full last page says
        it is the last, and the cursor after it (None on the last page). Each row has the
        `created_at` and `id` the list is ordered by."""
        if len(rows) <= limit:
            return rows, None
        last: Any = rows[limit - 1]
        return rows[:limit], self.issue(last.created_at, last.id)

    def read(self, cursor: str) -> tuple[datetime, UUID]:
        """The row a page ended at; a 422 naming the query parameter if `cursor` is not
        one of this list's."""
        try:
            if _TOKEN.fullmatch(cursor):
                tag, micros, raw = _LAYOUT.unpack(base64.urlsafe_b64decode(cursor + "=="))
                if tag == self.tag:
                    return _EPOCH + micros * _MICROSECOND, UUID(bytes=raw)
            elif self.legacy_separator in cursor:
                at, _, row_id = cursor.rpartition(self.legacy_separator)
                parsed = datetime.fromisoformat(at.replace(" ", "+"))
                if parsed.tzinfo is not None:
                    return parsed, UUID(row_id)
        except (ValueError, OverflowError):
            pass
        raise Unprocessable(
            f"{self.field}: not a cursor of this list (pass `next_cursor` back)", field=self.field
        )
