"""Admin API of MCP sources: register, sync, review. Secrets go in and never come out."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Literal
from uuid import UUID

from fastapi import APIRouter, Query, Request

from ..auth.deps import AdminContext
from ..errors import Busy, Conflict
from ..kit.errors import ERRORS
from ..kit.routing import StrictJSONRoute
from ..security import audit
from .schemas import (
    McpToolRead,
    McpToolUpdate,
    ReviewDecision,
    SourceCreate,
    SourceRead,
    SourceUpdate,
    SyncRead,
)
from .service import McpServerError, SourceDisabled, mcp
from .sync import sync_source

router = APIRouter(route_class=StrictJSONRoute, prefix="/mcp", tags=["mcp"], responses=ERRORS)


@router.post("/sources", response_model=SourceRead, status_code=201)
def create_source(data: SourceCreate, ctx: AdminContext, request: Request) -> SourceRead:
    """Register an MCP server (streamable HTTP or, where the operator allows it, stdio).
    Nothing is fetched yet: `POST /mcp/sources/{id}/sync`, or wait for the schedule."""
    source = mcp.create(
        ctx.session, ctx.principal.tenant_id, data, settings=request.app.state.settings
    )
    return mcp.read(ctx.session, [source])[0]


@router.get("/sources", response_model=list[SourceRead])
def list_sources(ctx: AdminContext) -> list[SourceRead]:
    """Every source, with its health, last error and the number of tools held for review."""
    return mcp.read(ctx.session, mcp.list_sources(ctx.session))


@router.get("/sources/{source_id}", response_model=SourceRead)
def get_source(source_id: UUID, ctx: AdminContext) -> SourceRead:
    """One source: where it points (never its secrets), health and schedule."""
    return mcp.read(ctx.session, [mcp.get(ctx.session, source_id)])[0]


@router.patch("/sources/{source_id}", response_model=SourceRead)
def update_source(
    source_id: UUID, data: SourceUpdate, ctx: AdminContext, request: Request
) -> SourceRead:
    """Change a source; a new default permission applies to its tools at once."""
    source = mcp.update(ctx.session, source_id, data, settings=request.app.state.settings)
    return mcp.read(ctx.session, [source])[0]


@router.delete("/sources/{source_id}", status_code=204)
def delete_source(source_id: UUID, ctx: AdminContext) -> None:
    """Remove a source; its tools are soft-deleted and leave selection at once."""
    mcp.delete(ctx.session, source_id)


@router.post(
    "/sources/{source_id}/sync",
    response_model=SyncRead,
    responses={
        502: {"description": "No usable catalog (`field` says where to look); nothing changed"}
    },
)
def sync(source_id: UUID, ctx: AdminContext, request: Request) -> SyncRead:
    """Sync now: page through the server's tools/list to the end and apply it. A failure
    (502) marks the source unhealthy with the error and keeps the last good catalog.

    A sync holds a thread and a connection of this process while its server answers (up to a
    minute): each process runs at most `INLINE_SYNCS` at once (503 `busy` past them) and one
    per source (409), so slow servers cannot take the threads other requests need."""
    if not mcp.get(ctx.session, source_id).enabled:  # 404 or 409 before any network call
        raise SourceDisabled("the source is disabled; enable it first", field="enabled")
    with _sync_slot(source_id):
        result = sync_source(
            request.app.state.database,
            ctx.principal.tenant_id,
            source_id,
            settings=request.app.state.settings,
            actor=audit.Actor("key", ctx.principal.key_id),
        )
    if result.status == "failed":
        raise McpServerError(result.error or "sync failed", field=result.field)
    return result


#: Syncs one API process runs at once; the scheduler's, in the workers, are not counted.
INLINE_SYNCS = 4
_slots = threading.BoundedSemaphore(INLINE_SYNCS)
_syncing: set[UUID] = set()
_syncing_lock = threading.Lock()


@contextmanager
def _sync_slot(source_id: UUID) -> Iterator[None]:
    with _syncing_lock:
        if source_id in _syncing:
            raise Conflict("a sync of this source is already running; wait for its result")
        if not _slots.acquire(blocking=False):
            raise Busy(
                f"{INLINE_SYNCS} syncs are running in this API process; retry shortly",
                retry_after=5,
            )
        _syncing.add(source_id)
    try:
        yield
    finally:
        with _syncing_lock:
            _syncing.discard(source_id)
            _slots.release()


@router.get("/tools", response_model=list[McpToolRead])
def list_tools(
    ctx: AdminContext,
    source_id: UUID | None = None,
    state: Annotated[
        Literal["clean", "held", "approved", "rejected"] | None,
        Query(description="`held`: the review queue"),
    ] = None,
) -> list[McpToolRead]:
    """Tools imported from MCP sources, with review state, findings and definitions."""
    rows = mcp.list_tools(ctx.session, source_id=source_id, state=state)
    return mcp.read_tools(ctx.session, rows)


@router.get("/tools/{tool_id}", response_model=McpToolRead)
def get_tool(tool_id: UUID, ctx: AdminContext) -> McpToolRead:
    """One imported tool, by its registry id."""
    return mcp.read_tools(ctx.session, [mcp.get_tool(ctx.session, tool_id)])[0]


@router.patch("/tools/{tool_id}", response_model=McpToolRead)
def update_tool(tool_id: UUID, data: McpToolUpdate, ctx: AdminContext) -> McpToolRead:
    """Give one tool its own permission (`required_permission`, null for public), or
    `inherit` the source's default again."""
    return mcp.read_tools(ctx.session, [mcp.set_permission(ctx.session, tool_id, data)])[0]


@router.post("/tools/{tool_id}/approve", response_model=McpToolRead)
def approve(tool_id: UUID, data: ReviewDecision, ctx: AdminContext) -> McpToolRead:
    """Serve this definition (pass the `definition_hash` you reviewed). The hash is pinned:
    if the server later changes the tool, it goes back on hold."""
    row = mcp.approve(ctx.session, tool_id, data.definition_hash)
    return mcp.read_tools(ctx.session, [row])[0]


@router.post("/tools/{tool_id}/reject", response_model=McpToolRead)
def reject(tool_id: UUID, data: ReviewDecision, ctx: AdminContext) -> McpToolRead:
    """Keep this definition out: its tool is soft-deleted until the server changes it (then
    it is held for review again)."""
    row = mcp.reject(ctx.session, tool_id, data.definition_hash)
    return mcp.read_tools(ctx.session, [row])[0]
