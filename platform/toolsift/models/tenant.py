from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import BigInteger, Text
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, Timestamped


class Tenant(Timestamped, Base):
    __tablename__ = "tenants"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # Registry positions are handed out from here: append-only, never reused.
    next_position: Mapped[int] = mapped_column(BigInteger, default=0)
    # The model whose vectors serve dense scores; a new model takes over once complete.
    embedding_model: Mapped[str | None] = mapped_column(Text)
