from __future__ import annotations

from fastapi import APIRouter

from ..auth.deps import AgentContext
from ..kit.errors import ERRORS
from ..ops.middleware import note_select_mode
from .schemas import AuthorizeRequest, AuthorizeResponse, SelectRequest, SelectResponse
from .service import selection as selection_service

router = APIRouter(tags=["agent"], responses=ERRORS)


@router.post("/select", response_model=SelectResponse, response_model_exclude_none=True)
def select_tools(data: SelectRequest, ctx: AgentContext) -> SelectResponse:
    """Pick the tools for this turn among those the caller may use, within the budget.

    Core tools come first, then the rest in fixed registry order, so the prompt-cache prefix
    survives from turn to turn. Forbidden tools are filtered out before scoring.
    """
    note_select_mode(data.mode)
    return selection_service.select(ctx.session, ctx.principal, data)


@router.post("/authorize", response_model=AuthorizeResponse)
def authorize_call(data: AuthorizeRequest, ctx: AgentContext) -> AuthorizeResponse:
    """Re-check one tool call at execution time: selection is not authorization."""
    return selection_service.authorize(ctx.session, ctx.principal, data)
