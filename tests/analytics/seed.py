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
