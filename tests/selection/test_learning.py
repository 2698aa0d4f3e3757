"""Learning from usage: a reported call teaches the tenant's dense ranking the query it followed.

Each case goes through the HTTP API and the real embed task (`embed_pending`: the ONNX model,
no Celery), and checks what a caller sees: where the tool ranks, and what the rows hold.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.analytics.seed import OwnerConn
from tests.fixtures.factories import (
    PEPPER,
    Caller,
    agent_key,
    embed_pending,
    new_tenant,
    support_catalog,
    tool_body,
)
from tests.selection.test_hot_path import _parts
from tests.tools.test_index_consistency import assert_index_is_a_recount
from toolsift.analytics.service import analytics
from toolsift.auth import keys
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.embedding.base import EmbeddingConfig, get_backend
from toolsift.embedding.learning import KEPT_PER_TOOL
from toolsift.embedding.service import embed_jobs
from toolsift.lexical.analysis import LEARNED_TERMS, LEARNED_WEIGHT
from toolsift.selection.dense import DEFAULTS, Fusion, fuse, lift_companions
from toolsift.tools.schemas import ToolUpdate
from toolsift.tools.service import tool as tool_service

# Words no description has: before learning, nothing about them points at any one tool.
TAUGHT = "zorp the blinket for gleeb"
ASKED = "please zorp my blinket for gleeb"


def ranks(caller: Caller, query: str, **body: Any) -> list[str]:
    """Every candidate the caller may see, best first (dense only: the learned part)."""
    result = caller.ok(caller.select(query, mode="dense", debug=True, k=50, **body))
    return [c["name"] for c in result["candidates"]]


def report(caller: Caller, query: str, tool: str, **call: Any) -> dict[str, Any]:
    """Select for `query` (BM25: no vector needed to learn) and report a call of `tool`."""
    selection = caller.ok(caller.select(query, mode="bm25"))
    body = {"selection_id": selection["selection_id"], "tool": tool, "allowed": True, **call}
    response: dict[str, Any] = caller.ok(caller.post("/v1/tool-calls", body), 201)
    return response


def learned(owner_conn: OwnerConn, caller: Caller) -> list[tuple[Any, ...]]:
    return owner_conn.execute(
        "SELECT t.name, q.query, q.calls, q.model IS NOT NULL, q.embedding IS NOT NULL"
        " FROM learned_queries q JOIN tools t ON t.tenant_id = q.tenant_id AND t.id = q.tool_id"
        " WHERE q.tenant_id = %s ORDER BY t.name, q.query",
        (caller.tenant_id,),
    ).fetchall()


def outlive_the_retention(
    admin: Caller, database: Database, owner_conn: OwnerConn, queries: list[str]
) -> int:
    """The tenant keeps 10 days, `queries` were last called 11 days ago, and the upkeep runs;
    how many learned queries it forgot."""
    admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"log_retention_days": 10}}))
    owner_conn.execute(
        "UPDATE learned_queries SET last_called_at = now() - interval '11 days'"
        " WHERE tenant_id = %s AND query = ANY(%s)",
        (admin.tenant_id, queries),
    )
    with database.unit_of_work(None) as session:
        result = analytics.maintain_partitions(
            session, months_ahead=1, default_retention_days=100_000
        )
    return result.forgotten


def last_ranked(caller: Caller, database: Database) -> str:
    """The tool dense puts last for `ASKED` today: the hardest one to teach."""
    embed_pending(database, caller.tenant_id)
    return ranks(caller, ASKED)[-1]


class TestACallTeaches:
    def test_the_called_tool_comes_first_for_a_like_query(
        self, support_agent: Caller, database: Database, owner_conn: OwnerConn
    ) -> None:
        tool = last_ranked(support_agent, database)
        body = report(support_agent, TAUGHT, tool, success=True)
        assert body["learned"] is True
        assert learned(owner_conn, support_agent) == [(tool, TAUGHT, 1, False, False)]
        # The vector is the worker's: until it runs, nothing changes.
        assert ranks(support_agent, ASKED)[0] != tool

        assert embed_pending(database, support_agent.tenant_id) == 0  # no tool re-embedded
        assert learned(owner_conn, support_agent) == [(tool, TAUGHT, 1, True, True)]
        assert ranks(support_agent, ASKED)[0] == tool
        # Hybrid serves it too, in its first five.
        names = support_agent.names(ASKED, mode="hybrid", k=5)
        assert tool in names

    def test_a_repeat_counts_and_is_not_embedded_again(
        self, support_agent: Caller, database: Database, owner_conn: OwnerConn
    ) -> None:
        report(support_agent, TAUGHT, "refund_policy")
        embed_pending(database, support_agent.tenant_id)
        assert report(support_agent, TAUGHT, "refund_policy")["learned"] is True
        jobs = owner_conn.execute(
            "SELECT count(*) FROM outbox WHERE tenant_id = %s AND kind = 'learn'",
            (support_agent.tenant_id,),
        ).fetchone()
        assert jobs == (0,)
        assert learned(owner_conn, support_agent) == [("refund_policy", TAUGHT, 2, True, True)]

    def test_a_refused_or_failed_call_teaches_nothing(
        self, support_agent: Caller, owner_conn: OwnerConn
    ) -> None:
        assert report(support_agent, TAUGHT, "refund_policy", allowed=False)["learned"] is False
        assert report(support_agent, TAUGHT, "refund_policy", success=False)["learned"] is False
        assert learned(owner_conn, support_agent) == []

    def test_a_tool_the_key_may_not_use_or_that_does_not_exist_is_not_learned(
        self, support_agent: Caller, owner_conn: OwnerConn
    ) -> None:
        # support + billing may not use delete_account (admin only).
        assert report(support_agent, TAUGHT, "delete_account")["learned"] is False
        assert report(support_agent, TAUGHT, "no_such_tool")["learned"] is False
        assert learned(owner_conn, support_agent) == []

    def test_the_oldest_queries_beyond_the_cap_are_dropped(
        self, support_agent: Caller, database: Database, owner_conn: OwnerConn
    ) -> None:
        for n in range(KEPT_PER_TOOL + 2):
            report(support_agent, f"{TAUGHT} number {n}", "refund_policy")
        embed_pending(database, support_agent.tenant_id)
        queries = [row[1] for row in learned(owner_conn, support_agent)]
        assert len(queries) == KEPT_PER_TOOL
        assert {f"{TAUGHT} number 0", f"{TAUGHT} number 1"}.isdisjoint(queries)


class TestWhatIsLearnedStaysBehindPermissions:
    def test_a_forbidden_tool_never_takes_a_slot_by_its_learned_queries(
        self, admin: Caller, support_agent: Caller, database: Database
    ) -> None:
        report(support_agent, TAUGHT, "issue_refund")  # billing may
        embed_pending(database, support_agent.tenant_id)
        assert ranks(support_agent, ASKED)[0] == "issue_refund"
        support_only = agent_key(admin, ["support"], name="support-only")
        assert "issue_refund" not in ranks(support_only, ASKED)
        assert "issue_refund" not in support_only.names(ASKED, mode="hybrid", k=50)

    def test_a_tool_made_restricted_takes_its_learned_queries_with_it(
        self,
        admin: Caller,
        catalog: dict[str, str],
        support_agent: Caller,
        database: Database,
        owner_conn: OwnerConn,
    ) -> None:
        report(support_agent, TAUGHT, "refund_policy")
        embed_pending(database, support_agent.tenant_id)
        tool = catalog["refund_policy"]
        admin.ok(admin.patch(f"/admin/v1/tools/{tool}", {"required_permission": "admin"}))
        rows = owner_conn.execute(
            "SELECT q.required_permission_id = t.required_permission_id FROM learned_queries q"
            " JOIN tools t ON t.tenant_id = q.tenant_id AND t.id = q.tool_id"
            " WHERE q.tenant_id = %s",
            (support_agent.tenant_id,),
        ).fetchall()
        assert rows == [(True,)]
        assert "refund_policy" not in ranks(support_agent, ASKED)

    def test_another_tenant_learns_nothing_from_this_one(
        self, client: Any, support_agent: Caller, database: Database
    ) -> None:
        other = new_tenant(client, database, "globex")
        support_catalog(other)
        other_agent = agent_key(other, ["support", "billing"])
        before = last_ranked(other_agent, database)
        report(support_agent, TAUGHT, before)
        embed_pending(database, support_agent.tenant_id)
        assert ranks(support_agent, ASKED)[0] == before
        assert ranks(other_agent, ASKED)[-1] == before

    def test_a_query_not_called_again_within_the_retention_is_forgotten(
        self,
        admin: Caller,
        support_agent: Caller,
        database: Database,
        owner_conn: OwnerConn,
    ) -> None:
        # issue_refund is guarded (billing): the upkeep reaches it past tool_permission.
        report(support_agent, TAUGHT, "issue_refund")
        report(support_agent, "where is my parcel", "refund_policy")
        report(support_agent, ASKED, "refund_policy")
        stale = [TAUGHT, "where is my parcel"]
        assert outlive_the_retention(admin, database, owner_conn, stale) == 2
        assert [row[:2] for row in learned(owner_conn, support_agent)] == [("refund_policy", ASKED)]

    def test_a_deleted_tool_forgets_what_it_learned(
        self,
        admin: Caller,
        catalog: dict[str, str],
        support_agent: Caller,
        database: Database,
        owner_conn: OwnerConn,
    ) -> None:
        report(support_agent, TAUGHT, "refund_policy")
        embed_pending(database, support_agent.tenant_id)
        assert admin.delete(f"/admin/v1/tools/{catalog['refund_policy']}").status_code == 204
        assert learned(owner_conn, support_agent) == []


def test_a_model_switch_embeds_the_learned_queries_again(
    support_agent: Caller, database: Database, owner_conn: OwnerConn
) -> None:
    """Learned vectors of the model that served before are recomputed in the new one."""
    report(support_agent, TAUGHT, "refund_policy")
    embed_pending(database, support_agent.tenant_id)
    (model,) = owner_conn.execute(
        "SELECT embedding_model FROM tenants WHERE id = %s", (support_agent.tenant_id,)
    ).fetchone() or (None,)
    # As if the tenant served an older model, in which the query was learned.
    owner_conn.execute(
        "UPDATE tenants SET embedding_model = 'older' WHERE id = %s", (support_agent.tenant_id,)
    )
    owner_conn.execute(
        "UPDATE learned_queries SET model = 'older' WHERE tenant_id = %s",
        (support_agent.tenant_id,),
    )
    owner_conn.execute(
        "INSERT INTO outbox (tenant_id, id, kind, tool_id, attempts)"
        " SELECT tenant_id, gen_random_uuid(), 'embed', id, 0 FROM tools"
        " WHERE tenant_id = %s AND name = 'refund_policy'",
        (support_agent.tenant_id,),
    )
    embed_pending(database, support_agent.tenant_id)  # the switch back to `model`
    embed_pending(database, support_agent.tenant_id)  # the learn jobs it enqueued
    row = owner_conn.execute(
        "SELECT model FROM learned_queries WHERE tenant_id = %s", (support_agent.tenant_id,)
    ).fetchone()
    assert row == (model,)
    assert ranks(support_agent, ASKED)[0] == "refund_policy"


def test_the_dense_list_is_each_tools_nearest_vector_past_the_pool(
    admin: Caller, database: Database, owner_conn: OwnerConn
) -> None:
    """Past the candidate pool, where each side is cut: a few tools with many learned queries
    near the query must not push out a tool whose own vector or one learned query is nearer
    than theirs. The served order equals the order computed here from every stored vector."""
    rng = random.Random(5)
    tools = [tool_body(f"tool_{i:03d}", f"Tool number {i} does task {i}") for i in range(130)]
    admin.ok(admin.put("/admin/v1/tools", {"tools": tools}))
    embed_pending(database, admin.tenant_id)
    agent = agent_key(admin, [])
    query = "does task seven"
    (model,) = owner_conn.execute(
        "SELECT embedding_model FROM tenants WHERE id = %s", (admin.tenant_id,)
    ).fetchone() or (None,)
    (dimension,) = owner_conn.execute(
        "SELECT dimension FROM tool_embeddings WHERE tenant_id = %s LIMIT 1", (admin.tenant_id,)
    ).fetchone() or (0,)
    target = get_backend(EmbeddingConfig()).embed([query])[0]

    def near(spread: float) -> str:
        moved = [x + rng.gauss(0, spread) for x in target]
        return "[" + ",".join(repr(x) for x in moved) + "]"

    # Three tools with 40 queries each, nearer than most tools' own vectors; a few with one.
    learned = [(f"tool_{i:03d}", j, near(0.02)) for i in (120, 121, 122) for j in range(40)]
    learned += [(f"tool_{i:03d}", 0, near(0.01 * (i % 7))) for i in range(0, 130, 9)]
    with owner_conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO learned_queries (tenant_id, tool_id, query_hash, query, model, embedding,"
            " required_permission_id, position)"
            " SELECT t.tenant_id, t.id, sha256(convert_to(%s, 'UTF8')), %s, %s, %s::vector,"
            " t.required_permission_id, t.position FROM tools t"
            " WHERE t.tenant_id = %s AND t.name = %s",
            [(f"q{j}", f"q{j}", model, v, admin.tenant_id, n) for n, j, v in learned],
        )
    assert dimension == len(target)
    expected = owner_conn.execute(
        "SELECT t.name FROM tools t JOIN LATERAL ("
        "  SELECT min(d) AS d FROM ("
        "    SELECT e.embedding <=> %s::vector AS d FROM tool_embeddings e"
        "     WHERE e.tenant_id = t.tenant_id AND e.tool_id = t.id"
        "    UNION ALL SELECT q.embedding <=> %s::vector FROM learned_queries q"
        "     WHERE q.tenant_id = t.tenant_id AND q.tool_id = t.id) v) best ON true"
        " WHERE t.tenant_id = %s ORDER BY best.d, t.position LIMIT 100",
        (str(target), str(target), admin.tenant_id),
    ).fetchall()
    assert ranks(agent, query) == [name for (name,) in expected]


def listed(candidates: list[dict[str, Any]], rank: str) -> list[str]:
    """The candidates a list ranked, in its order."""
    ranked = sorted((c for c in candidates if rank in c), key=lambda c: c[rank])
    return [c["name"] for c in ranked]


def served_and_fused(
    caller: Caller, query: str, fusion: Fusion
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The served hybrid candidates for `query`, and `dense.fuse`'s scores for the same lists
    (BM25's from a bm25 select, dense's and usage's from the candidates' ranks)."""
    words = caller.ok(caller.select(query, mode="bm25", k=50, debug=True))["candidates"]
    served = caller.ok(caller.select(query, k=50, debug=True))
    candidates: list[dict[str, Any]] = served["candidates"]
    fused = fuse(
        [c["name"] for c in words],
        listed(candidates, "dense_rank"),
        fusion,
        bm25_top=words[0]["score"] if words else 0.0,
        bm25_coverage=served.get("bm25_coverage", 1.0),
        usage_ids=listed(candidates, "usage_rank"),
    )
    return candidates, fused


class TestTheUsageList:
    """Hybrid adds a third list: the tools by the nearest query they were called for."""

    QUERIES = ("get the shipping status of an order", ASKED, "refund", "where is my parcel")

    @staticmethod
    def _taught(support_agent: Caller, database: Database) -> None:
        report(support_agent, TAUGHT, "refund_policy")
        report(support_agent, "where is my parcel", "order_status")
        report(support_agent, "where is my parcel please", "lookup_account")
        embed_pending(database, support_agent.tenant_id)

    @pytest.mark.parametrize("fusion", [{}, {"usage_weight": 0}, {"usage_weight": 2.0, "k": 10}])
    def test_scores_are_the_python_model_s_floats(
        self, admin: Caller, support_agent: Caller, database: Database, fusion: dict[str, float]
    ) -> None:
        self._taught(support_agent, database)
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": fusion}}))
        used = 0
        for query in self.QUERIES:
            candidates, expected = served_and_fused(support_agent, query, Fusion(**fusion))
            used += len(listed(candidates, "usage_rank"))
            # Floats compared with ==: the same operations in the same order.
            assert {c["name"]: c["score"] for c in candidates} == expected, query
        # Each query ranks the three taught tools by usage, and only those.
        assert used == 3 * len(self.QUERIES)

    def test_only_tools_called_for_like_queries_are_listed(
        self, admin: Caller, support_agent: Caller, database: Database
    ) -> None:
        cold = support_agent.ok(support_agent.select(ASKED, k=50, debug=True))["candidates"]
        assert not [c for c in cold if "usage_rank" in c]
        self._taught(support_agent, database)
        warm = support_agent.ok(support_agent.select(ASKED, k=50, debug=True))["candidates"]
        usage = sorted((c for c in warm if "usage_rank" in c), key=lambda c: c["usage_rank"])
        assert usage[0]["name"] == "refund_policy"  # taught with these very words
        assert {c["name"] for c in usage} == {"refund_policy", "order_status", "lookup_account"}
        # Dense mode is similarity alone: no usage list there.
        dense = ranks(support_agent, ASKED)
        assert dense[0] == "refund_policy"
        body = support_agent.ok(support_agent.select(ASKED, mode="dense", k=50, debug=True))
        assert not [c for c in body["candidates"] if "usage_rank" in c]

    def test_the_log_keeps_each_chosen_tool_s_usage_rank(
        self, support_agent: Caller, database: Database, owner_conn: OwnerConn
    ) -> None:
        self._taught(support_agent, database)
        body = support_agent.ok(support_agent.select(TAUGHT, k=3))
        row = owner_conn.execute(
            "SELECT details FROM selection_logs WHERE id = %s", (body["selection_id"],)
        ).fetchone()
        assert row is not None
        ranks_logged = {d["name"]: d["usage_rank"] for d in row[0]}
        assert ranks_logged["refund_policy"] == 1  # taught with these very words
        assert ranks_logged["search_help"] is None  # core, never called here

    def test_a_heavier_usage_list_lets_usage_outweigh_words(
        self, admin: Caller, support_agent: Caller, database: Database
    ) -> None:
        # Users who ask about their order's status call lookup_account, whatever the words.
        query = "get the shipping status of an order"
        report(support_agent, query, "lookup_account")
        embed_pending(database, support_agent.tenant_id)
        words = support_agent.ok(support_agent.select(query, mode="bm25", debug=True))
        assert words["candidates"][0]["name"] == "order_status"
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": {"usage_weight": 0}}}))
        without = support_agent.ok(support_agent.select(query, k=50, debug=True))["candidates"]
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": {"usage_weight": 4}}}))
        heavy = support_agent.ok(support_agent.select(query, k=50, debug=True))["candidates"]

        def rank_of(candidates: list[dict[str, Any]]) -> int:
            return next(c["rank"] for c in candidates if c["name"] == "lookup_account")

        assert rank_of(heavy) == 1
        assert rank_of(without) > 1


def scored(caller: Caller, query: str, **body: Any) -> dict[str, float]:
    """Each hybrid candidate's score, best first."""
    result = caller.ok(caller.select(query, k=50, debug=True, **body))
    return {c["name"]: c["score"] for c in result["candidates"]}


def report_together(caller: Caller, query: str, *tools: str) -> str:
    """Select for `query` (BM25) and report a call of each of `tools`; the selection id."""
    selection = caller.ok(caller.select(query, mode="bm25"))["selection_id"]
    for tool in tools:
        body = {"selection_id": selection, "tool": tool, "allowed": True}
        caller.ok(caller.post("/v1/tool-calls", body), 201)
    return str(selection)


class TestToolsCalledTogether:
    """A tool called in the same selections as a leading tool is lifted by it (hybrid)."""

    # Users asking where their order is also have their account looked up, whatever the
    # words; refund_policy was called once, below `companion_support`, so it leads nothing.
    TASKS = ("where is my order 1234", "track the parcel of order 88", "my parcel is late")
    QUERIES = ("get the shipping status of an order", "where is my parcel", "refund")

    @staticmethod
    def _taught(caller: Caller, database: Database) -> list[str]:
        selections = [
            report_together(caller, task, "order_status", "lookup_account")
            for task in TestToolsCalledTogether.TASKS
        ]
        report_together(caller, "refund my order", "refund_policy", "order_status")
        embed_pending(database, caller.tenant_id)
        return selections

    @pytest.mark.parametrize(
        "fusion",
        [
            {},
            {"companion_weight": 0},
            {"companion_weight": 2.0, "companion_leads": 1, "k": 10},
            {"companion_support": 5},
            {"companion_window": 2},
        ],
    )
    def test_scores_are_the_python_model_s_floats(
        self,
        admin: Caller,
        support_agent: Caller,
        database: Database,
        owner_conn: OwnerConn,
        fusion: dict[str, float],
    ) -> None:
        self._taught(support_agent, database)
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": fusion}}))
        position = dict(
            owner_conn.execute(
                "SELECT name, position FROM tools WHERE tenant_id = %s", (admin.tenant_id,)
            ).fetchall()
        )
        selections: dict[str, list[UUID]] = {}
        for name, selection_id in owner_conn.execute(
            "SELECT tool_name, selection_id FROM tool_calls WHERE tenant_id = %s"
            " ORDER BY selection_created_at, selection_id",
            (admin.tenant_id,),
        ):
            selections.setdefault(name, []).append(selection_id)
        moved = 0
        for query in self.QUERIES:
            candidates, fused = served_and_fused(support_agent, query, Fusion(**fusion))
            expected = lift_companions(fused, position, selections, Fusion(**fusion))
            # Floats compared with ==: the same operations in the same order.
            assert {c["name"]: c["score"] for c in candidates} == expected, query
            moved += sum(expected[name] != fused[name] for name in fused)
            # Debug output names what the lift added, where it added anything.
            lifts = {c["name"]: c["companion_lift"] for c in candidates if "companion_lift" in c}
            assert lifts == {
                name: pytest.approx(expected[name] - fused[name])
                for name in fused
                if expected[name] != fused[name]
            }
        # Every setting but these two lifts something here.
        assert (moved == 0) is (fusion in ({"companion_weight": 0}, {"companion_support": 5}))

    def test_a_heavier_lift_moves_a_companion_past_its_lead(
        self, admin: Caller, support_agent: Caller, database: Database
    ) -> None:
        # issue_refund is called with order_status for requests unlike the one asked: only
        # the lift ties it to "where is my parcel".
        for i in range(3):
            report_together(support_agent, f"{TAUGHT} {i}", "order_status", "issue_refund")
        embed_pending(database, support_agent.tenant_id)

        def first(fusion: dict[str, float]) -> str:
            admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": fusion}}))
            return next(iter(scored(support_agent, "where is my parcel")))

        assert first({"companion_weight": 0}) == "order_status"
        assert first({"companion_weight": 4.0}) == "issue_refund"
        # Called for fewer selections than the support asks, nothing leads.
        assert first({"companion_weight": 4.0, "companion_support": 4}) == "order_status"

    def test_the_log_keeps_each_chosen_tool_s_lift(
        self, support_agent: Caller, database: Database, owner_conn: OwnerConn
    ) -> None:
        for i in range(3):
            report_together(support_agent, f"{TAUGHT} {i}", "order_status", "issue_refund")
        embed_pending(database, support_agent.tenant_id)
        body = support_agent.ok(support_agent.select("where is my parcel", k=5, debug=True))
        shown = {c["name"]: c.get("companion_lift") for c in body["candidates"] if c["selected"]}
        row = owner_conn.execute(
            "SELECT details FROM selection_logs WHERE id = %s", (body["selection_id"],)
        ).fetchone()
        assert row is not None
        logged = {d["name"]: d["companion_lift"] for d in row[0]}
        assert logged == shown
        assert logged["issue_refund"] > 0
        assert logged["search_help"] is None  # core, called with nothing

    def test_calls_in_other_selections_are_not_together(
        self, admin: Caller, support_agent: Caller, database: Database
    ) -> None:
        for i in range(3):
            report_together(support_agent, f"{TAUGHT} {i}", "order_status")
            report_together(support_agent, f"{TAUGHT} {i}", "issue_refund")
        embed_pending(database, support_agent.tenant_id)
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": {"companion_weight": 4}}}))
        lifted = scored(support_agent, "where is my parcel")
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": {"companion_weight": 0}}}))
        assert scored(support_agent, "where is my parcel") == lifted

    def test_a_forbidden_companion_changes_nothing_the_caller_sees(
        self, admin: Caller, support_agent: Caller, database: Database
    ) -> None:
        support_only = agent_key(admin, ["support"], name="support-only")
        selections = self._taught(support_agent, database)
        before = {q: scored(support_only, q) for q in self.QUERIES}
        assert all("issue_refund" not in names for names in before.values())
        # issue_refund (billing) was called in the same selections as well.
        for selection in selections:
            body = {"selection_id": selection, "tool": "issue_refund", "allowed": True}
            support_agent.ok(support_agent.post("/v1/tool-calls", body), 201)
        embed_pending(database, support_agent.tenant_id)
        assert {q: scored(support_only, q) for q in self.QUERIES} == before
        # A caller that may use it sees it lifted.
        weighed = {"usage_weight": 0, "companion_weight": 4.0}
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": weighed}}))
        lifted = scored(support_agent, self.QUERIES[0])
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": {"companion_weight": 0}}}))
        assert lifted["issue_refund"] > scored(support_agent, self.QUERIES[0])["issue_refund"]

    def test_the_lift_goes_with_the_logs(
        self, admin: Caller, support_agent: Caller, database: Database, owner_conn: OwnerConn
    ) -> None:
        """The calls are the logs' (the retention deletes them together): no log, no lift."""
        self._taught(support_agent, database)
        lifted = scored(support_agent, self.QUERIES[0])
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": {"companion_weight": 0}}}))
        plain = scored(support_agent, self.QUERIES[0])
        assert lifted != plain
        owner_conn.execute("DELETE FROM selection_logs WHERE tenant_id = %s", (admin.tenant_id,))
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": None}}))
        assert scored(support_agent, self.QUERIES[0]) == plain

    def test_an_api_from_before_the_lift_is_served_without_it(
        self, support_agent: Caller, database: Database, database_url: str
    ) -> None:
        """During a rolling deploy an older API passes no `companion_weight`: no lift."""
        self._taught(support_agent, database)
        tenant_id, key_id = _parts(support_agent)
        key_hash = keys.hash_key(support_agent.key, PEPPER)
        plain = database_url.replace("postgresql+psycopg://", "postgresql://")
        older = {k: v for k, v in DEFAULTS.items() if not k.startswith("companion_")}

        def served(fusion: dict[str, Any]) -> dict[str, float]:
            with psycopg.connect(plain) as conn:
                (body,) = conn.execute(
                    "SELECT toolsift_select(%s, %s, %s, NULL, gen_random_uuid(),"
                    " 'get the shipping status of an order', 'english', 1.2, 0.75, %s, 100,"
                    " 'hybrid', NULL, NULL, '{}', 5, 4000, 'anthropic', true, 0)",
                    (tenant_id, key_id, key_hash, Jsonb(fusion)),
                ).fetchone() or (None,)
            return {c["name"]: c["score"] for c in json.loads(body)["candidates"]}

        assert served(older) == served({**DEFAULTS, "companion_weight": 0})
        assert served(older) != served(DEFAULTS)


def lexical(caller: Caller, query: str) -> list[str]:
    """The BM25 candidates the caller may see, best first."""
    result = caller.ok(caller.select(query, mode="bm25", debug=True, k=50))
    return [c["name"] for c in result["candidates"]]


class TestLearnedWords:
    """A learned query's words join its tool's BM25 document, and leave with the query."""

    def test_bm25_finds_a_tool_by_the_words_it_was_called_for(
        self,
        admin: Caller,
        support_agent: Caller,
        database: Database,
        owner_conn: OwnerConn,
    ) -> None:
        assert lexical(support_agent, ASKED) == []  # no description has these words
        report(support_agent, TAUGHT, "refund_policy")
        assert lexical(support_agent, ASKED) == []  # the worker's, like the vector
        embed_pending(database, support_agent.tenant_id)
        assert lexical(support_agent, ASKED) == ["refund_policy"]
        postings = owner_conn.execute(
            "SELECT p.term, p.tf FROM tool_terms p JOIN tools t"
            " ON t.tenant_id = p.tenant_id AND t.id = p.tool_id"
            " WHERE p.tenant_id = %s AND t.name = 'refund_policy'"
            " AND p.term IN ('zorp', 'blinket', 'gleeb')",
            (support_agent.tenant_id,),
        ).fetchall()
        assert sorted(postings) == [(term, LEARNED_WEIGHT) for term in ("blinket", "gleeb", "zorp")]
        assert_index_is_a_recount(admin.tenant_id, database, owner_conn)

    def test_only_a_tool_s_most_frequent_learned_words_count(
        self,
        admin: Caller,
        support_agent: Caller,
        database: Database,
        owner_conn: OwnerConn,
    ) -> None:
        rare = [f"qz{n}" for n in range(10, 30)]  # once each, more than the cap leaves room for
        for query in ("zorp gleeb", "zorp gleeb blinket", "zorp " + " ".join(rare)):
            report(support_agent, query, "refund_policy")
        embed_pending(database, support_agent.tenant_id)
        learned_terms = {
            term
            for (term,) in owner_conn.execute(
                "SELECT p.term FROM tool_terms p JOIN tools t"
                " ON t.tenant_id = p.tenant_id AND t.id = p.tool_id"
                " WHERE p.tenant_id = %s AND t.name = 'refund_policy'"
                " AND (p.term IN ('zorp', 'gleeb', 'blinket') OR p.term LIKE 'qz%%')",
                (support_agent.tenant_id,),
            )
        }
        # zorp (3), gleeb (2), then the words met once in code point order: blinket, qz10, ...
        assert learned_terms == {"zorp", "gleeb", "blinket", *rare[: LEARNED_TERMS - 3]}
        assert_index_is_a_recount(admin.tenant_id, database, owner_conn)

    def test_a_tool_written_again_keeps_them(
        self,
        admin: Caller,
        catalog: dict[str, str],
        support_agent: Caller,
        database: Database,
        owner_conn: OwnerConn,
    ) -> None:
        report(support_agent, TAUGHT, "refund_policy")
        embed_pending(database, support_agent.tenant_id)
        path = f"/admin/v1/tools/{catalog['refund_policy']}"
        admin.ok(admin.patch(path, {"description": "Explain when an order can be refunded."}))
        assert lexical(support_agent, ASKED) == ["refund_policy"]
        assert_index_is_a_recount(admin.tenant_id, database, owner_conn)

    def test_a_forgotten_query_takes_its_words_along(
        self,
        admin: Caller,
        support_agent: Caller,
        database: Database,
        owner_conn: OwnerConn,
    ) -> None:
        # issue_refund is guarded (billing): its words leave its bucket's statistics too.
        report(support_agent, TAUGHT, "issue_refund")
        report(support_agent, "zorp it again", "refund_policy")
        embed_pending(database, support_agent.tenant_id)
        assert lexical(support_agent, ASKED) == ["issue_refund", "refund_policy"]
        assert outlive_the_retention(admin, database, owner_conn, [TAUGHT]) == 1
        embed_pending(database, support_agent.tenant_id)  # the `learn` job the upkeep queued
        assert lexical(support_agent, ASKED) == ["refund_policy"]  # by "zorp" alone
        gone = owner_conn.execute(
            "SELECT count(*) FROM term_stats WHERE tenant_id = %s AND term IN ('blinket', 'gleeb')",
            (support_agent.tenant_id,),
        ).fetchone()
        assert gone == (0,)
        assert_index_is_a_recount(admin.tenant_id, database, owner_conn)

    def test_a_forbidden_tool_is_not_found_by_its_learned_words(
        self, admin: Caller, support_agent: Caller, database: Database
    ) -> None:
        report(support_agent, TAUGHT, "issue_refund")  # billing may
        embed_pending(database, support_agent.tenant_id)
        assert lexical(support_agent, ASKED) == ["issue_refund"]
        support_only = agent_key(admin, ["support"], name="support-only")
        assert lexical(support_only, ASKED) == []
        assert "issue_refund" not in support_only.names(ASKED, k=50)


def test_learning_beside_tool_writes_neither_deadlocks_nor_drifts(
    admin: Caller,
    catalog: dict[str, str],
    support_agent: Caller,
    database: Database,
    owner_conn: OwnerConn,
) -> None:
    """The worker indexes learned words while admins move the same tools' permissions. Both
    write learned queries and the statistics, so they must wait for each other in one order
    (a deadlock aborts one of them) and leave the index a recount."""
    tools = {"lookup_account": "crm.read", "order_status": "orders.read"}
    for round_ in range(4):
        for name in tools:
            report(support_agent, f"zorp {name} {round_}", name)
    jobs = [
        row[0]
        for row in owner_conn.execute(
            "SELECT id FROM outbox WHERE tenant_id = %s AND kind = 'learn' ORDER BY id",
            (support_agent.tenant_id,),
        )
    ]
    backend = get_backend(EmbeddingConfig())

    def learn() -> None:
        for start in range(0, len(jobs), 2):
            embed_jobs(database, backend, support_agent.tenant_id, jobs[start : start + 2])

    def move_permissions() -> None:
        for round_ in range(6):
            for name, permission in tools.items():
                change = ToolUpdate(required_permission=None if round_ % 2 == 0 else permission)
                with database.unit_of_work(admin.tenant_id, permissions=ALL_PERMISSIONS) as session:
                    tool_service.update(session, UUID(catalog[name]), change)

    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(learn), pool.submit(move_permissions)]:
            done.result()  # re-raises a deadlock
    assert_index_is_a_recount(admin.tenant_id, database, owner_conn)
    assert set(lexical(support_agent, "zorp")[:2]) == set(tools)
