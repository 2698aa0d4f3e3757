"""Selection logs and tool calls with known answers for every analytics view.

Times are fixed and spread over two UTC days; every expected figure in the tests is worked out
by hand from the rows below.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
from sqlalchemy import text

from tests.fixtures.factories import Caller, support_catalog, tool_body
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.models import SelectionLog, ToolCall, ToolEmbedding

OwnerConn = psycopg.Connection[tuple[Any, ...]]

D1 = datetime(2026, 11, 10, tzinfo=UTC)
D2 = datetime(2026, 11, 11, tzinfo=UTC)


def at(day: datetime, hour: int, minute: int = 0) -> datetime:
    return day.replace(hour=hour, minute=minute)


@dataclass
class Selection:
    created_at: datetime
    mode: str
    query: str
    tools: list[str]
    tokens: int
    catalog_tokens: int
    latency_ms: float
    candidate_count: int
    calls: list[str] = field(default_factory=list)


# search_help is the catalog's core tool; every select offers it.
SELECTIONS = [
    Selection(at(D1, 10), "bm25", "where is my order", ["search_help", "order_status"],
              100, 1000, 10.0, 3, calls=["order_status", "lookup_account"]),
    Selection(at(D1, 11), "bm25", "refund please", ["search_help", "refund_policy"],
              150, 1000, 20.0, 2, calls=["issue_refund"]),
    Selection(at(D1, 12), "hybrid", "xyzzy", ["search_help"], 50, 1000, 30.0, 0),
    Selection(at(D2, 10), "hybrid", "delete everything", ["search_help"], 50, 500, 40.0, 4),
    Selection(at(D2, 11), "hybrid", "order and account", ["search_help", "order_status",
              "lookup_account"], 200, 500, 50.0, 5, calls=["order_status"]),
    Selection(at(D2, 12), "hybrid", "xyzzy", ["search_help"], 50, 500, 60.0, 0),
]  # fmt: skip

# Unit vectors: cosine(refund_policy, lookup_account) = 0.96, every other pair <= 0.28.
VECTORS = {
    "refund_policy": [1.0, 0.0, 0.0],
    "lookup_account": [0.96, 0.28, 0.0],
    "order_status": [0.0, 1.0, 0.0],
    "delete_account": [0.0, 0.0, 1.0],
}
# order_status gets version 2 (a new description) between the first and second select.
VERSION_2_AT = at(D1, 10, 30)


@dataclass
class Seeded:
    tenant_id: UUID
    tools: dict[str, UUID]
    selections: list[UUID]


def seed_tenant(admin: Caller, database: Database, owner_conn: OwnerConn) -> Seeded:
    ids = support_catalog(admin)
    extra = admin.ok(
        admin.post(
            "/admin/v1/tools",
            tool_body("get_order_status", "Status of an order", "orders.read"),
        ),
        201,
    )
    ids["get_order_status"] = extra["id"]
    names = [
        "search_help", "lookup_account", "order_status", "issue_refund", "refund_policy",
        "delete_account", "get_order_status",
    ]  # fmt: skip
    tools = {name: UUID(str(ids[name])) for name in names}
    admin.ok(
        admin.patch(
            f"/admin/v1/tools/{tools['order_status']}",
            {"description": "Shipping status and tracking link of an order"},
        )
    )
    # Versions carry the time of their write; place them on the seeded timeline.
    owner_conn.execute(
        "UPDATE tool_versions SET changed_at = CASE version WHEN 1 THEN %s ELSE %s END"
        " WHERE tenant_id = %s AND tool_id = %s",
        (D1, VERSION_2_AT, admin.tenant_id, tools["order_status"]),
    )
    owner_conn.execute(
        "UPDATE tool_versions SET changed_at = %s WHERE tenant_id = %s AND tool_id <> %s",
        (D1, admin.tenant_id, tools["order_status"]),
    )
    selections = write_selections(database, admin.tenant_id, tools, SELECTIONS)
    with database.unit_of_work(admin.tenant_id, permissions=ALL_PERMISSIONS) as session:
        for name, vector in VECTORS.items():
            session.add(
                ToolEmbedding(
                    tenant_id=admin.tenant_id,
                    tool_id=tools[name],
                    model="test-model",
                    version=1,
                    dimension=3,
                    embedding=vector,
                    position=0,
                )
            )
    return Seeded(admin.tenant_id, tools, selections)


def write_selections(
    database: Database, tenant_id: UUID, tools: dict[str, UUID], selections: list[Selection]
) -> list[UUID]:
    """Log rows and calls as the app writes them (app role, tenant scope)."""
    written: list[UUID] = []
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        for s in selections:
            log_id = uuid.uuid4()
            session.add(
                SelectionLog(
                    tenant_id=tenant_id,
                    id=log_id,
                    key_id=None,
                    roles=[],
                    mode=s.mode,
                    format="anthropic",
                    query=s.query,
                    k=5,
                    budget_tokens=4000,
                    tool_ids=[tools[n] for n in s.tools],
                    tool_names=s.tools,
                    details=[
                        {"name": n, "reason": "core" if n == "search_help" else "ranked"}
                        for n in s.tools
                    ],
                    candidate_count=s.candidate_count,
                    tokens=s.tokens,
                    catalog_tokens=s.catalog_tokens,
                    latency_ms=s.latency_ms,
                    created_at=s.created_at,
                )
            )
            for minute, name in enumerate(s.calls, start=1):
                session.add(
                    ToolCall(
                        tenant_id=tenant_id,
                        id=uuid.uuid4(),
                        selection_id=log_id,
                        selection_created_at=s.created_at,
                        tool_name=name,
                        allowed=True,
                        success=True,
                        created_at=s.created_at.replace(minute=minute),
                    )
                )
            written.append(log_id)
    return written


# A busy tenant: more (tool, day) rows of `tool_usage_daily` than any API or report reads at
# once (MAX_ROWS, 10,000). Each of 30 days one select offers all 400 fillers (12,000 rows) and
# is followed by a call of t000. The five oldest days also hold ten selects each that offer
# old_favourite, each followed by its call: summed over the newest 10,000 daily rows only, it
# would be missing, and every filler would count 25 instead of 30.
BUSY_FIRST_DAY = datetime(2026, 10, 1, tzinfo=UTC)
BUSY_DAYS = 30
BUSY_FILLERS = 400
BUSY_TOP = [("old_favourite", 50, 50), ("t000", 30, 30), ("t001", 30, 0), ("t002", 30, 0)]
_BUSY = """
WITH logs AS (
    INSERT INTO selection_logs (tenant_id, id, roles, mode, format, query, k, budget_tokens,
        tool_ids, tool_names, details, candidate_count, tokens, catalog_tokens, latency_ms,
        created_at)
    SELECT :tenant_id, gen_random_uuid(), '{}', 'bm25', 'anthropic', 'q', 5, 4000, '{}',
           picked.names, '[]', 1, 1, 1, 1.0, CAST(:first_day AS timestamptz) + d * interval '1 day'
    FROM generate_series(0, :days - 1) AS d
    CROSS JOIN LATERAL (
        SELECT array_agg('t' || lpad(CAST(i AS text), 3, '0') ORDER BY i) AS names
        FROM generate_series(0, :fillers - 1) AS i
        UNION ALL
        SELECT ARRAY['old_favourite'] FROM generate_series(1, 10) WHERE d < 5
    ) AS picked
    RETURNING id, created_at, tool_names
)
INSERT INTO tool_calls (tenant_id, id, selection_id, selection_created_at, tool_name, allowed)
SELECT :tenant_id, gen_random_uuid(), id, created_at,
       CASE WHEN tool_names = ARRAY['old_favourite'] THEN 'old_favourite' ELSE 't000' END, true
FROM logs
"""


def seed_busy(database: Database, tenant_id: UUID) -> None:
    """The busy tenant's logs (see BUSY_TOP), written in one statement as the app role."""
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        session.execute(
            text(_BUSY),
            {
                "tenant_id": tenant_id,
                "first_day": BUSY_FIRST_DAY,
                "days": BUSY_DAYS,
                "fillers": BUSY_FILLERS,
            },
        )
