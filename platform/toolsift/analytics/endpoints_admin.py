from __future__ import annotations

from datetime import date
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import FileResponse

from ..auth.deps import AdminContext
from ..errors import NotFound
from ..kit.errors import ERRORS
from ..kit.routing import StrictJSONRoute
from . import schemas
from .service import analytics as analytics_service

router = APIRouter(
    route_class=StrictJSONRoute, prefix="/analytics", tags=["analytics"], responses=ERRORS
)

Since = Annotated[date | None, Query(description="First day included (UTC), YYYY-MM-DD.")]
Until = Annotated[date | None, Query(description="First day excluded (UTC), YYYY-MM-DD.")]
Limit = Annotated[int, Query(ge=1, le=10_000)]


def _rows(ctx: AdminContext, view: str, since: date | None, until: date | None, limit: int) -> Any:
    return analytics_service.rows(ctx.session, view, since=since, until=until, limit=limit)


@router.get("/recall", response_model=list[schemas.RecallRow])
def recall(ctx: AdminContext, since: Since = None, until: Until = None, limit: Limit = 1000) -> Any:
    """Recall of the called tool (view `analytics.called_tool_recall`): of the tools the model
    called, the share the select had offered, by day and mode."""
    return _rows(ctx, "called_tool_recall", since, until, limit)


@router.get("/tokens", response_model=list[schemas.TokensRow])
def tokens(ctx: AdminContext, since: Since = None, until: Until = None, limit: Limit = 1000) -> Any:
    """Tokens sent per turn against the whole allowed catalog, by day."""
    return _rows(ctx, "tokens_per_turn", since, until, limit)


@router.get("/latency", response_model=list[schemas.LatencyRow])
def latency(
    ctx: AdminContext, since: Since = None, until: Until = None, limit: Limit = 1000
) -> Any:
    """Select latency percentiles (ms), by day and mode."""
    return _rows(ctx, "latency_percentiles", since, until, limit)


@router.get("/zero-results", response_model=list[schemas.ZeroResultRow])
def zero_results(
    ctx: AdminContext, since: Since = None, until: Until = None, limit: Limit = 100
) -> Any:
    """Queries that matched no tool, or brought back core tools only (last seen in range)."""
    return _rows(ctx, "zero_result_queries", since, until, limit)


@router.get("/tool-usage", response_model=list[schemas.ToolUsageRow])
def tool_usage(
    ctx: AdminContext, since: Since = None, until: Until = None, limit: Limit = 1000
) -> Any:
    """Per day and tool: how often it was offered and how often the model called it."""
    return _rows(ctx, "tool_usage_daily", since, until, limit)


@router.get("/top-tools", response_model=list[schemas.TopToolRow])
def top_tools(
    ctx: AdminContext, since: Since = None, until: Until = None, limit: Limit = 100
) -> Any:
    """Per tool over the whole range: how often it was offered and how often the model called
    it, most offered first (then most called, then by name)."""
    return analytics_service.top_tools(ctx.session, since=since, until=until, limit=limit)


@router.get("/never-selected", response_model=list[schemas.NeverSelectedRow])
def never_selected(ctx: AdminContext, limit: Limit = 1000) -> Any:
    """Live tools that no logged select has offered."""
    return _rows(ctx, "tools_never_selected", None, None, limit)


@router.get("/never-called", response_model=list[schemas.NeverCalledRow])
def never_called(ctx: AdminContext, limit: Limit = 1000) -> Any:
    """Live tools offered by selects but never called by the model."""
    return _rows(ctx, "tools_selected_never_called", None, None, limit)


@router.get("/near-duplicates", response_model=list[schemas.NearDuplicateRow])
def near_duplicates(ctx: AdminContext, limit: Limit = 100) -> Any:
    """Pairs of tools whose vectors (cosine >= 0.9) or names (trigram >= 0.6) are so close
    that they split scores: merge them or make their descriptions contrast."""
    return _rows(ctx, "near_duplicate_tools", None, None, limit)


@router.get("/drift", response_model=list[schemas.DriftRow])
def drift(ctx: AdminContext, since: Since = None, until: Until = None, limit: Limit = 1000) -> Any:
    """A tool's share of selects before and after each new version (changed in range)."""
    return _rows(ctx, "tool_version_drift", since, until, limit)


@router.get("/analyst", response_model=dict[str, str | None])
def analyst(ctx: AdminContext) -> dict[str, str | None]:
    """The tenant's analyst login, if any (never its password)."""
    return {"login": analytics_service.analyst_login(ctx.session)}


@router.post("/analyst", response_model=schemas.AnalystLogin, status_code=201)
def create_analyst(ctx: AdminContext) -> schemas.AnalystLogin:
    """Create the tenant's read-only PostgreSQL analyst login, or replace its password.

    The password is shown once. The login reads the `analytics` views (and the columns of the
    base tables they use) of this tenant only, and can write nothing.
    """
    return analytics_service.create_analyst_login(ctx.session)


@router.delete("/analyst", status_code=204)
def drop_analyst(ctx: AdminContext) -> Response:
    """Remove the tenant's analyst login."""
    analytics_service.drop_analyst_login(ctx.session)
    return Response(status_code=204)


# The dashboard: static files, no data in them. The page asks for an admin key, keeps it in
# the tab's sessionStorage and sends it as a Bearer header to the JSON endpoints above; the
# key never appears in a URL (and so in no access log).
dashboard = APIRouter(
    route_class=StrictJSONRoute, prefix="/dashboard", tags=["analytics"], include_in_schema=False
)
STATIC = Path(str(files("toolsift.analytics") / "static"))
_ASSETS = {
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
    "chart.umd.min.js": "text/javascript",
    "LICENSE.chart.js.md": "text/plain; charset=utf-8",
}
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self';"
        " img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@dashboard.get("")
def dashboard_page() -> FileResponse:
    return FileResponse(STATIC / "dashboard.html", media_type="text/html", headers=_HEADERS)


@dashboard.get("/{asset}")
def dashboard_asset(asset: str) -> FileResponse:
    if asset not in _ASSETS:
        raise NotFound("no such file", field="asset")
    return FileResponse(STATIC / asset, media_type=_ASSETS[asset], headers=_HEADERS)
