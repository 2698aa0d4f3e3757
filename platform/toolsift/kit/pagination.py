from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel

T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """Keyset page: `next_cursor` is passed back as `after` (stable under concurrent appends)."""

    items: list[T]
    next_cursor: int | None
