from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..auth.deps import AdminContext
from ..kit.errors import ERRORS
from . import audit as _hooks  # noqa: F401  (registers the flush hook)
from .schemas import AuditPage, AuditRead
from .service import audit as audit_service

router = APIRouter(prefix="/audit", tags=["audit"], responses=ERRORS)


@router.get("", response_model=AuditPage)
def list_audit(
    ctx: AdminContext,
    before: Annotated[
        str | None, Query(max_length=100, description="`next_cursor` of the previous page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> AuditPage:
    """Admin changes of this tenant, newest first: who (key id), what (table, key, changed
    columns) and SHA-256 hashes of the row before and after."""
    rows, cursor = audit_service.page(ctx.session, before=before, limit=limit)
    return AuditPage(items=[AuditRead.model_validate(r) for r in rows], next_cursor=cursor)
