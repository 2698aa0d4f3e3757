from __future__ import annotations

from fastapi import APIRouter

from ..auth.deps import AgentContext
from ..kit.errors import ERRORS
from ..kit.routing import StrictJSONRoute
from .schemas import ToolCallCreate, ToolCallRead
from .service import analytics as analytics_service

router = APIRouter(route_class=StrictJSONRoute, tags=["agent"], responses=ERRORS)


@router.post("/tool-calls", response_model=ToolCallRead, status_code=201)
def report_tool_call(data: ToolCallCreate, ctx: AgentContext) -> ToolCallRead:
    """Report the tool the model called after a select (by `selection_id`).

    This is what makes recall of the called tool measurable. Report with the key that made
    the selection: an unknown selection id, or one of another key or tenant, gets 404 and
    nothing is stored.
    """
    return analytics_service.record_call(ctx.session, ctx.principal, data)
