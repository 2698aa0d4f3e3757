from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..auth.deps import AdminContext
from ..kit.errors import ERRORS
from ..kit.routing import StrictJSONRoute
from . import audit as _hooks  # noqa: F401  (registers the flush hook)
from .schemas import AuditChain, AuditPage, AuditRead
from .service import audit as audit_service

router = APIRouter(route_class=StrictJSONRoute, prefix="/audit", tags=["audit"], responses=ERRORS)


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


@router.get("/verify", response_model=AuditChain)
def verify_audit(ctx: AdminContext) -> AuditChain:
    """Check this tenant's audit hash chain: each entry's hash covers the entry and the
    previous entry's hash. `broken_at` names the first entry that fails."""
    return audit_service.verify(ctx.session)
