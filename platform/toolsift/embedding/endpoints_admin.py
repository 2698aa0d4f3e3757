from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request

from ..auth.deps import AdminContext
from ..kit.errors import ERRORS
from ..kit.routing import StrictJSONRoute
from . import service
from .base import configured_model
from .schemas import EmbeddingStatusRead, ReindexResult

router = APIRouter(
    route_class=StrictJSONRoute, prefix="/embeddings", tags=["embeddings"], responses=ERRORS
)


@router.get("", response_model=EmbeddingStatusRead)
def embedding_status(ctx: AdminContext, request: Request) -> EmbeddingStatusRead:
    """Poll until `missing == 0 and stale == 0` to wait for a catalog to be embedded."""
    status = service.status(ctx.session, ctx.principal.tenant_id)
    return EmbeddingStatusRead(
        **asdict(status), query_model=configured_model(request.app.state.settings)
    )


@router.post("/reindex", response_model=ReindexResult, status_code=202)
def reindex(ctx: AdminContext, force: bool = False) -> ReindexResult:
    """Queue every live tool; `force` recomputes current vectors too."""
    return ReindexResult(queued=service.reindex(ctx.session, ctx.principal.tenant_id, force=force))
