from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Query

from ..auth.deps import AdminContext
from ..kit.errors import ERRORS
from ..kit.pagination import Page
from ..kit.routing import StrictJSONRoute
from .schemas import ToolBulkUpsert, ToolCreate, ToolRead, ToolUpdate, UpsertResult
from .service import tool as tool_service

router = APIRouter(route_class=StrictJSONRoute, prefix="/tools", tags=["tools"], responses=ERRORS)


@router.post("", response_model=ToolRead, status_code=201)
def create_tool(data: ToolCreate, ctx: AdminContext) -> ToolRead:
    """Add a tool at the end of the registry. It is searchable by BM25 once this returns."""
    tool = tool_service.create(ctx.session, ctx.principal.tenant_id, data)
    return tool_service.read(ctx.session, [tool])[0]


@router.put("", response_model=UpsertResult)
def upsert_tools(data: ToolBulkUpsert, ctx: AdminContext) -> UpsertResult:
    """Create or update up to 1,000 tools by name, in one transaction. Idempotent: an
    unchanged tool keeps its version and position; new tools append in request order.
    An existing tool keeps its `required_permission`, `core` and `examples` where its item
    leaves them out (send `null`, `false` or `[]` to clear them): a catalog written again
    from elsewhere never makes a restricted tool public.
    The body must also fit the server's limit (`TOOLSIFT_MAX_BODY_BYTES`, 256 KiB by
    default, else 413): send a large catalog in several requests."""
    named = [frozenset(item.model_fields_set) for item in data.tools]
    return tool_service.upsert(ctx.session, ctx.principal.tenant_id, data.tools, named=named)


@router.get("", response_model=Page[ToolRead])
def list_tools(
    ctx: AdminContext,
    after: Annotated[
        int | None,
        # Positions are bigint: a larger cursor is a 422, not an overflow in the database.
        Query(ge=-1, le=2**63 - 1, description="`next_cursor` of the previous page"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    include_deleted: bool = False,
) -> Page[ToolRead]:
    """Tools in registry order (the order agents receive them in)."""
    tools, cursor = tool_service.list_page(
        ctx.session, after=after, limit=limit, include_deleted=include_deleted
    )
    return Page(items=tool_service.read(ctx.session, tools), next_cursor=cursor)


@router.get("/{tool_id}", response_model=ToolRead)
def get_tool(tool_id: UUID, ctx: AdminContext) -> ToolRead:
    """One tool, deleted or not."""
    return tool_service.read(ctx.session, [tool_service.get(ctx.session, tool_id)])[0]


@router.patch("/{tool_id}", response_model=ToolRead)
def update_tool(tool_id: UUID, data: ToolUpdate, ctx: AdminContext) -> ToolRead:
    """Change a tool; a changed definition gets a new version at the same position."""
    tool = tool_service.update(ctx.session, tool_id, data)
    return tool_service.read(ctx.session, [tool])[0]


@router.delete("/{tool_id}", status_code=204)
def delete_tool(tool_id: UUID, ctx: AdminContext) -> None:
    """Soft-delete: the tool leaves selection at once; its position is never reused."""
    tool_service.delete(ctx.session, tool_id)
