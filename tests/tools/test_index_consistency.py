"""The BM25 index is maintained by differences; after any sequence of writes it must equal
what the live catalog gives when counted from scratch."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.fixtures.factories import Caller
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.lexical.index import analyse
from toolsift.models import Tool
from toolsift.tools.schemas import ToolCreate
from toolsift.tools.service import tool as tool_service

PERMISSIONS = ["crm.read", "billing.refund"]
WORDS = [
    "order",
    "refund",
    "payment",
    "invoice",
    "customer",
    "account",
    "shipping",
    "status",
    "label",
    "ticket",
    "note",
    "calendar",
    "meeting",
    "export",
    "report",
    "search",
    "archive",
    "restore",
    # Pairs of characters (migration 0035) are kept by differences like any other word.
    "查询火车票",
    "天气预报",
]


def _tool(rng: random.Random, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": " ".join(rng.choices(WORDS, k=rng.randint(2, 9))),
        "input_schema": {
            "type": "object",
            "properties": {rng.choice(WORDS): {"type": "string", "description": rng.choice(WORDS)}},
        },
        "required_permission": rng.choice([None, *PERMISSIONS]),
    }


def _write_randomly(admin: Caller, rng: random.Random, steps: int) -> None:
    names = [f"tool_{i}" for i in range(12)]
    ids: dict[str, str] = {}
    for _ in range(steps):
        action = rng.choice(["upsert", "upsert", "patch", "permission", "delete"])
        if action == "upsert" or not ids:
            batch = [_tool(rng, name) for name in rng.sample(names, rng.randint(1, 5))]
            for item in admin.ok(admin.put("/admin/v1/tools", {"tools": batch}))["tools"]:
                ids[item["name"]] = item["id"]
            continue
        tool_id = ids[rng.choice(sorted(ids))]
        change: dict[str, Any]
        if action == "patch":
            change = {"description": " ".join(rng.choices(WORDS, k=rng.randint(1, 12)))}
        elif action == "permission":
            change = {"required_permission": rng.choice([None, *PERMISSIONS])}
        else:
            assert admin.delete(f"/admin/v1/tools/{tool_id}").status_code == 204
            continue
        response = admin.patch(f"/admin/v1/tools/{tool_id}", change)
        assert response.status_code in (200, 404), response.text  # 404: deleted before


def _rows(owner: psycopg.Connection[Any], query: str, tenant: object) -> set[tuple[Any, ...]]:
    return set(owner.execute(query, (tenant,)).fetchall())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_incremental_index_equals_a_recount(
    admin: Caller, database: Database, owner_conn: psycopg.Connection[Any], seed: int
) -> None:
    for permission in PERMISSIONS:
        admin.ok(admin.post("/admin/v1/permissions", {"name": permission}), 201)
    _write_randomly(admin, random.Random(seed), steps=40)
    assert_index_is_a_recount(admin.tenant_id, database, owner_conn)


def test_concurrent_writers_of_one_tenant_neither_deadlock_nor_drift(
    admin: Caller, database: Database, owner_conn: psycopg.Connection[Any]
) -> None:
    """Writers of disjoint tools share terms, so they meet on the same statistics rows: they
    must lock them in one order (a deadlock aborts a write) and add up exactly."""

    def writer(index: int) -> None:
        rng = random.Random(index)
        for _ in range(12):
            batch = [
                ToolCreate.model_validate(_tool(rng, f"w{index}_{i}"))
                for i in rng.sample(range(6), 4)
            ]
            with database.unit_of_work(admin.tenant_id, permissions=ALL_PERMISSIONS) as session:
                tool_service.upsert(session, admin.tenant_id, batch)

    for permission in PERMISSIONS:
        admin.ok(admin.post("/admin/v1/permissions", {"name": permission}), 201)
    with ThreadPoolExecutor(4) as pool:
        for done in [pool.submit(writer, index) for index in range(4)]:
            done.result()  # re-raises a deadlock
    assert_index_is_a_recount(admin.tenant_id, database, owner_conn)


def test_concurrent_writes_of_the_same_tools_serialize(
    admin: Caller, database: Database, owner_conn: psycopg.Connection[Any]
) -> None:
    """One writer creates each tool, each change of a tool is a version of its own, and the
    statistics move from the version before it, whichever writer got there first."""
    names = ["shared_a", "shared_b", "shared_c"]
    for permission in PERMISSIONS:
        admin.ok(admin.post("/admin/v1/permissions", {"name": permission}), 201)

    def writer(index: int) -> int:
        rng = random.Random(100 + index)
        updates = 0
        for _ in range(10):
            batch = [ToolCreate.model_validate(_tool(rng, name)) for name in names]
            with database.unit_of_work(admin.tenant_id, permissions=ALL_PERMISSIONS) as session:
                result = tool_service.upsert(session, admin.tenant_id, batch)
            updates += result.updated
        return updates

    with ThreadPoolExecutor(4) as pool:
        updates = sum(pool.map(writer, range(4)))
    versions = owner_conn.execute(
        "SELECT sum(version - 1) FROM tools WHERE tenant_id = %s", (admin.tenant_id,)
    ).fetchone()
    assert versions is not None
    assert versions[0] == updates
    assert_index_is_a_recount(admin.tenant_id, database, owner_conn)


def assert_index_is_a_recount(
    tenant: UUID, database: Database, owner_conn: psycopg.Connection[Any]
) -> None:

    # Postings: those of a fresh analysis of each live tool, nothing for a deleted one.
    with database.unit_of_work(tenant, permissions=ALL_PERMISSIONS) as session:
        live = session.query(Tool).filter(Tool.deleted_at.is_(None)).all()
        stored_lengths = {t.id: t.doc_length for t in live}
        fresh = analyse(session, live)
        assert {t.id: t.doc_length for t in live} == stored_lengths
        expected = {
            (term, t.id, tf, t.doc_length, t.required_permission_id, t.position)
            for t in live
            for term, tf in fresh[t.id].items()
        }
        session.rollback()
    postings = _rows(
        owner_conn,
        "SELECT term, tool_id, tf, doc_length, required_permission_id, position"
        " FROM tool_terms WHERE tenant_id = %s",
        tenant,
    )
    assert postings == expected

    # Statistics: document frequencies and sizes per permission bucket, from the postings.
    bucket = "coalesce(required_permission_id, '00000000-0000-0000-0000-000000000000')"
    assert _rows(
        owner_conn, "SELECT permission_key, term, df FROM term_stats WHERE tenant_id = %s", tenant
    ) == _rows(
        owner_conn,
        f"SELECT {bucket}, term, count(*) FROM tool_terms WHERE tenant_id = %s GROUP BY 1, 2",
        tenant,
    )
    corpus = owner_conn.execute(
        "SELECT permission_key, doc_count, total_length,"
        " ARRAY[total_tokens, openai_total_tokens, mcp_total_tokens,"
        " openai_responses_total_tokens] FROM corpus_stats"
        " WHERE tenant_id = %s AND doc_count <> 0",
        (tenant,),
    ).fetchall()
    recount = owner_conn.execute(
        f"SELECT {bucket}, count(*), sum(doc_length),"
        " ARRAY[sum(token_cost), sum(openai_token_cost), sum(mcp_token_cost),"
        " sum(openai_responses_token_cost)] FROM tools"
        " WHERE tenant_id = %s AND deleted_at IS NULL GROUP BY 1",
        (tenant,),
    ).fetchall()
    assert {(k, n, tuple(t)) for k, n, _, t in corpus} == {
        (k, n, tuple(t)) for k, n, _, t in recount
    }
    lengths = {k: length for k, _, length, _ in recount}
    for key, _, length, _ in corpus:
        assert length == pytest.approx(lengths[key], rel=1e-12)
