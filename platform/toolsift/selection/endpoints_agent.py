from __future__ import annotations

import threading

from fastapi import APIRouter, Request, Response
from starlette.datastructures import State

from ..auth.deps import AgentContext, PresentedKey, confirm_async, limit_async
from ..embedding.base import get_backend
from ..embedding.cache import CachedBackend
from ..kit.errors import ERRORS
from ..kit.routing import StrictJSONRoute
from ..ops.middleware import note_select_mode
from .schemas import AuthorizeRequest, AuthorizeResponse, SelectRequest, SelectResponse
from .service import selection as selection_service

router = APIRouter(route_class=StrictJSONRoute, tags=["agent"], responses=ERRORS)
_EMBEDDER_LOCK = threading.Lock()


def query_embedder(state: State) -> CachedBackend | None:
    """One cached query embedder per app, made on first use (the model loads lazily)."""
    embedder: CachedBackend | None = getattr(state, "query_embedder", None)
    if embedder is None:
        with _EMBEDDER_LOCK:
            embedder = getattr(state, "query_embedder", None)
            if embedder is None:
                settings = state.settings
                # A select cannot wait out the worker's retries and back-offs: one try, and no
                # longer than the select waits anyway.
                for_queries = settings.model_copy(
                    update={
                        "embedding_http_retries": 0,
                        "embedding_http_timeout": min(
                            settings.embedding_http_timeout, settings.embedding_query_timeout
                        ),
                    }
                )
                try:
                    embedder = CachedBackend(get_backend(for_queries))
                except ValueError:
                    return None  # misconfigured: dense stays out, BM25 serves
                state.query_embedder = embedder
    return embedder


@router.post("/select", response_model=SelectResponse, response_model_exclude_none=True)
async def select_tools(data: SelectRequest, key: PresentedKey, request: Request) -> Response:
    """Pick the tools for this turn among those the caller may use, within the budget.

    Core tools come first, then the rest in fixed registry order, so the prompt-cache prefix
    survives from turn to turn. Forbidden tools are filtered out before scoring.
    """
    note_select_mode(data.mode)
    await limit_async(request, key.key_hash, "agent")
    embedder = query_embedder(request.app.state) if data.mode != "bm25" else None
    body = await selection_service.serve(
        request.app.state.hot_pool,
        key,
        data,
        embedder,
        embedding_deadline=request.app.state.settings.embedding_query_timeout,
    )
    await confirm_async(request, key.key_hash)  # the statement checked the key
    # The database renders the body; FastAPI would only parse and validate it again.
    return Response(body, media_type="application/json")


@router.post("/authorize", response_model=AuthorizeResponse)
def authorize_call(data: AuthorizeRequest, ctx: AgentContext) -> AuthorizeResponse:
    """Re-check one tool call at execution time: selection is not authorization."""
    return selection_service.authorize(ctx.session, ctx.principal, data)
