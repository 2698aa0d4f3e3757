"""A what-if `SelectionService.select` for measuring proposals, not for production.

Historical: it measured the ORM path before migration 0006. HTTP now goes through
`SelectionService.serve`, which this does not replace, so `whatif_app.py` only changes the
in-process figures today (docs/benchmarks.md, "What-if measurements").

Less work per turn. Same tools and tokens as the service on 1,700 benchmark queries at a
4,000-token budget; at 600 tokens 3 of 850 differ, where 25 candidates run out before k fit:

* rank only `LEAN_POOL` candidates instead of 100 (the budget fill rarely needs more);
* fetch id/name/position/token_cost/core for candidates, core and used tools, then full rows
  (JSONB input_schema, examples) for the ~7 chosen tools only, instead of ~70 full ORM rows;
* build `Candidate` models only when `debug` is set;
* skip the whole-catalog `sum(token_cost)` (a maintained per-tenant total would replace it;
  the prototype logs 0);
* write the selection log with one Core INSERT instead of an ORM flush.

`install()` swaps it in; `benchmarks/whatif_app.py` does so inside each uvicorn worker.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from sqlalchemy import insert, or_, select
from sqlalchemy.orm import Session

from toolsift.auth.deps import Principal
from toolsift.models import SelectionLog, Tool
from toolsift.selection import bm25
from toolsift.selection import service as service_module
from toolsift.selection.query import build_query, used_tools
from toolsift.selection.schemas import SelectRequest, SelectResponse
from toolsift.tools.definitions import render

LEAN_POOL = 25
_ORIGINAL = service_module.SelectionService.select
_LIGHT = (Tool.id, Tool.name, Tool.position, Tool.token_cost, Tool.core)


def lean_select(
    self: service_module.SelectionService,
    session: Session,
    principal: Principal,
    request: SelectRequest,
) -> SelectResponse:
    if request.debug:
        return _ORIGINAL(self, session, principal, request)
    started = time.perf_counter()
    roles = service_module.resolve_roles(principal, request.roles)
    service_module.apply_roles(session, principal, roles)
    query = build_query(request)
    ranked = bm25.score(session, principal.tenant_id, query, limit=LEAN_POOL)
    used = used_tools(request)
    ids = [r.tool_id for r in ranked]
    wanted = [Tool.core, Tool.id.in_(ids)] + ([Tool.name.in_(used)] if used else [])
    light = {
        row.id: row
        for row in session.execute(select(*_LIGHT).where(Tool.deleted_at.is_(None), or_(*wanted)))
    }
    picks: list[tuple[Any, str]] = [
        (t, "core") for t in sorted(light.values(), key=lambda t: t.position) if t.core
    ]
    spent = sum(t.token_cost for t, _ in picks)
    taken = {t.id for t, _ in picks}
    by_name = {t.name: t for t in light.values()}
    for name in used:
        tool = by_name.get(name)
        if tool and tool.id not in taken and spent + tool.token_cost <= request.budget_tokens:
            picks.append((tool, "used"))
            spent += tool.token_cost
            taken.add(tool.id)
    added = 0
    for scored in ranked:
        tool = light.get(scored.tool_id)
        if tool is None or tool.id in taken or added >= request.k:
            continue
        if spent + tool.token_cost <= request.budget_tokens:
            picks.append((tool, "ranked"))
            spent += tool.token_cost
            taken.add(tool.id)
            added += 1
    picks.sort(key=lambda p: (p[1] != "core", p[0].position))
    full = {t.id: t for t in session.scalars(select(Tool).where(Tool.id.in_(list(taken))))}
    chosen = [(full[t.id], reason) for t, reason in picks]
    ranks = {r.tool_id: i + 1 for i, r in enumerate(ranked)}
    selection_id = uuid.uuid4()
    session.execute(
        insert(SelectionLog).values(
            tenant_id=principal.tenant_id,
            id=selection_id,
            key_id=principal.key_id,
            roles=roles,
            mode=request.mode,
            format=request.format,
            query=query,
            k=request.k,
            budget_tokens=request.budget_tokens,
            tool_ids=[t.id for t, _ in chosen],
            tool_names=[t.name for t, _ in chosen],
            details=[
                {"name": t.name, "reason": reason, "bm25_rank": ranks.get(t.id)}
                for t, reason in chosen
            ],
            candidate_count=len(ranked),
            tokens=spent,
            catalog_tokens=0,
            latency_ms=(time.perf_counter() - started) * 1000,
        )
    )
    return SelectResponse(
        selection_id=selection_id,
        mode=request.mode,
        format=request.format,
        tools=[render(t, request.format) for t, _ in chosen],
        tokens=spent,
        budget_tokens=request.budget_tokens,
    )


def install() -> None:
    service_module.SelectionService.select = lean_select  # type: ignore[method-assign]


def uninstall() -> None:
    service_module.SelectionService.select = _ORIGINAL  # type: ignore[method-assign]
