"""Every analytics view against seeded logs with answers worked out by hand (tests/analytics/seed.py)."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from datetime import date, timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from tests.analytics.seed import (
    BUSY_FIRST_DAY,
    BUSY_TOP,
    D1,
    D2,
    VECTORS,
    VERSION_2_AT,
    OwnerConn,
    Seeded,
    Selection,
    at,
    seed_busy,
    seed_tenant,
    write_selections,
)
from tests.fixtures.factories import Caller, new_tenant, tool_body
from toolsift.analytics.service import MAX_ROWS, VIEWS
from toolsift.analytics.service import analytics as analytics_service
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.errors import Unprocessable

DAY1, DAY2 = D1.date(), D2.date()


@pytest.fixture
def seeded(admin: Caller, database: Database, owner_conn: OwnerConn) -> Seeded:
    return seed_tenant(admin, database, owner_conn)


@pytest.fixture
def other(client: TestClient, database: Database) -> Seeded:
    """A second tenant with logs of its own, on the same days, with other figures."""
    admin = new_tenant(client, database, "globex")
    tool = admin.ok(admin.post("/admin/v1/tools", tool_body("order_status", "Order status")), 201)
    tools = {"order_status": tool["id"]}
    rows = [
        Selection(at(D1, 9), "bm25", "globex order", ["order_status"], 7, 9, 999.0, 1,
                  calls=["order_status", "order_status"]),
        Selection(at(D2, 9), "bm25", "nothing here", [], 0, 9, 1.0, 0),
    ]  # fmt: skip
    return Seeded(admin.tenant_id, tools, write_selections(database, admin.tenant_id, tools, rows))


def rows(
    database: Database, seeded: Seeded | None, view: str, **kwargs: Any
) -> list[dict[str, Any]]:
    tenant = seeded.tenant_id if seeded else None
    with database.unit_of_work(tenant, permissions=ALL_PERMISSIONS) as session:
        return [r.model_dump() for r in analytics_service.rows(session, view, **kwargs)]


def pick(found: list[dict[str, Any]], *keys: str) -> list[tuple[Any, ...]]:
    return [tuple(r[k] for k in keys) for r in found]


class TestCalledToolRecall:
    def test_by_day_and_mode(self, database: Database, seeded: Seeded) -> None:
        # Day 1, bm25: three calls (order_status hit, lookup_account and issue_refund missed).
        # Day 1, hybrid: no call at all, so no row. Day 2, hybrid: one call, a hit.
        assert pick(rows(database, seeded, "called_tool_recall"), "day", "mode", "calls", "hits",
                    "recall") == [(DAY1, "bm25", 3, 1, 1 / 3), (DAY2, "hybrid", 1, 1, 1.0)]  # fmt: skip

    def test_since_and_until(self, database: Database, seeded: Seeded) -> None:
        assert pick(rows(database, seeded, "called_tool_recall", since=DAY2), "day") == [(DAY2,)]
        assert pick(rows(database, seeded, "called_tool_recall", until=DAY2), "day") == [(DAY1,)]


class TestTokensPerTurn:
    def test_sent_against_the_allowed_catalog(self, database: Database, seeded: Seeded) -> None:
        found = rows(database, seeded, "tokens_per_turn")
        assert found == [
            {"day": DAY1, "selections": 3, "tokens_sent": 300, "catalog_tokens": 3000,
             "tokens_saved": 2700, "saved_share": 0.9, "avg_tokens": 100.0,
             "avg_catalog_tokens": 1000.0},
            {"day": DAY2, "selections": 3, "tokens_sent": 300, "catalog_tokens": 1500,
             "tokens_saved": 1200, "saved_share": 0.8, "avg_tokens": 100.0,
             "avg_catalog_tokens": 500.0},
        ]  # fmt: skip


class TestLatencyPercentiles:
    def test_linear_interpolation_by_day_and_mode(self, database: Database, seeded: Seeded) -> None:
        # percentile_cont: day 2 has 40, 50, 60; p95 = 50 + 0.9 * 10, p99 = 50 + 0.98 * 10.
        found = pick(rows(database, seeded, "latency_percentiles"), "day", "mode", "selections",
                     "p50_ms", "p95_ms", "p99_ms", "max_ms")  # fmt: skip
        assert found == [
            (DAY1, "bm25", 2, 15.0, pytest.approx(19.5), pytest.approx(19.9), 20.0),
            (DAY1, "hybrid", 1, 30.0, 30.0, 30.0, 30.0),
            (DAY2, "hybrid", 3, 50.0, pytest.approx(59.0), pytest.approx(59.8), 60.0),
        ]


class TestZeroResultQueries:
    def test_zero_result_and_core_only(self, database: Database, seeded: Seeded) -> None:
        found = pick(rows(database, seeded, "zero_result_queries"), "kind", "query",
                     "selections", "first_seen", "last_seen")  # fmt: skip
        assert found == [
            ("zero_result", "xyzzy", 2, at(D1, 12), at(D2, 12)),
            ("core_only", "delete everything", 1, at(D2, 10), at(D2, 10)),
        ]

    def test_since_filters_on_last_seen(self, database: Database, seeded: Seeded) -> None:
        found = rows(database, seeded, "zero_result_queries", since=date(2026, 11, 12))
        assert found == []


class TestToolsNeverSelected:
    def test_live_tools_no_select_offered(self, database: Database, seeded: Seeded) -> None:
        found = pick(rows(database, seeded, "tools_never_selected"), "name")
        # issue_refund was called once, but never offered.
        assert found == [("delete_account",), ("get_order_status",), ("issue_refund",)]

    def test_a_deleted_tool_is_not_listed(
        self, database: Database, seeded: Seeded, admin: Caller
    ) -> None:
        admin.ok(admin.delete(f"/admin/v1/tools/{seeded.tools['delete_account']}"), 204)
        found = pick(rows(database, seeded, "tools_never_selected"), "name")
        assert found == [("get_order_status",), ("issue_refund",)]


class TestToolsSelectedNeverCalled:
    def test_offered_but_never_called(self, database: Database, seeded: Seeded) -> None:
        found = pick(rows(database, seeded, "tools_selected_never_called"), "name", "core",
                     "selections", "last_selected")  # fmt: skip
        assert found == [
            ("search_help", True, 6, at(D2, 12)),
            ("refund_policy", False, 1, at(D1, 11)),
        ]


class TestToolUsageDaily:
    def test_offered_and_called_per_day(self, database: Database, seeded: Seeded) -> None:
        found = pick(
            rows(database, seeded, "tool_usage_daily"), "day", "tool_name", "selections", "calls"
        )
        # Newest day first.
        assert found == [
            (DAY2, "search_help", 3, 0),
            (DAY2, "lookup_account", 1, 0),
            (DAY2, "order_status", 1, 1),
            (DAY1, "search_help", 3, 0),
            (DAY1, "order_status", 1, 1),
            (DAY1, "refund_policy", 1, 0),
            (DAY1, "issue_refund", 0, 1),
            (DAY1, "lookup_account", 0, 1),
        ]


def top(database: Database, tenant_id: UUID | None, **kwargs: Any) -> list[tuple[str, int, int]]:
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        found = analytics_service.top_tools(session, **kwargs)
    return [(r.tool_name, r.selections, r.calls) for r in found]


class TestTopTools:
    def test_offered_and_called_over_the_period(self, database: Database, seeded: Seeded) -> None:
        # Most offered first, then most called, then by name.
        assert top(database, seeded.tenant_id) == [
            ("search_help", 6, 0),
            ("order_status", 2, 2),
            ("lookup_account", 1, 1),
            ("refund_policy", 1, 0),
            ("issue_refund", 0, 1),
        ]
        assert top(database, seeded.tenant_id, limit=2) == [
            ("search_help", 6, 0),
            ("order_status", 2, 2),
        ]

    def test_the_sums_of_the_daily_view(self, database: Database, seeded: Seeded) -> None:
        """Read from the base tables, the totals must stay those of `tool_usage_daily`."""
        for period in ({}, {"since": DAY2}, {"until": DAY2}):
            offered: Counter[str] = Counter()
            called: Counter[str] = Counter()
            for r in rows(database, seeded, "tool_usage_daily", **period):
                offered[r["tool_name"]] += r["selections"]
                called[r["tool_name"]] += r["calls"]
            expected = {(name, offered[name], called[name]) for name in offered | called}
            assert set(top(database, seeded.tenant_id, **period)) == expected, period

    def test_since_and_until(self, database: Database, seeded: Seeded) -> None:
        assert top(database, seeded.tenant_id, since=DAY2) == [
            ("search_help", 3, 0),
            ("order_status", 1, 1),
            ("lookup_account", 1, 0),
        ]
        assert top(database, seeded.tenant_id, until=DAY2) == [
            ("search_help", 3, 0),
            ("order_status", 1, 1),
            ("refund_policy", 1, 0),
            ("issue_refund", 0, 1),
            ("lookup_account", 0, 1),
        ]
        assert top(database, seeded.tenant_id, since=DAY2, until=DAY2 + timedelta(days=1)) == (
            top(database, seeded.tenant_id, since=DAY2)
        )

    def test_days_are_utc_whatever_the_sessions_time_zone(
        self, database: Database, admin: Caller
    ) -> None:
        made = admin.ok(admin.post("/admin/v1/tools", tool_body("order_status", "x")), 201)
        tools = {"order_status": UUID(made["id"])}
        late = Selection(D2 - timedelta(microseconds=1), "bm25", "q", ["order_status"], 1, 1, 1.0,
                         1, calls=["order_status"])  # fmt: skip
        midnight = Selection(D2, "bm25", "q", ["order_status"], 1, 1, 1.0, 1)
        write_selections(database, admin.tenant_id, tools, [late, midnight])
        with database.unit_of_work(admin.tenant_id, permissions=ALL_PERMISSIONS) as session:
            session.execute(text("SET LOCAL TimeZone = 'Pacific/Auckland'"))
            since = analytics_service.top_tools(session, since=DAY2)
            until = analytics_service.top_tools(session, until=DAY2)
        assert [(r.tool_name, r.selections, r.calls) for r in since] == [("order_status", 1, 0)]
        assert [(r.tool_name, r.selections, r.calls) for r in until] == [("order_status", 1, 1)]

    def test_until_must_be_after_since(self, database: Database, seeded: Seeded) -> None:
        with pytest.raises(Unprocessable, match="must be after") as raised:
            top(database, seeded.tenant_id, since=DAY2, until=DAY2)
        assert raised.value.field == "until"

    def test_a_busy_tenant_counts_every_day(self, database: Database, admin: Caller) -> None:
        """More (tool, day) rows than MAX_ROWS: summed in the database, nothing is cut."""
        seed_busy(database, admin.tenant_id)
        with database.unit_of_work(admin.tenant_id, permissions=ALL_PERMISSIONS) as session:
            daily = session.scalar(text("SELECT count(*) FROM analytics.tool_usage_daily"))
        assert daily is not None
        assert daily > MAX_ROWS
        assert top(database, admin.tenant_id, limit=len(BUSY_TOP)) == BUSY_TOP
        every = top(database, admin.tenant_id, limit=MAX_ROWS)
        assert len(every) == 401
        assert every[-1] == ("t399", 30, 0)
        # From the sixth day on: old_favourite's five days are out of range.
        later = top(database, admin.tenant_id, since=(BUSY_FIRST_DAY + timedelta(days=5)).date())
        assert later[:2] == [("t000", 25, 25), ("t001", 25, 0)]
        assert "old_favourite" not in {name for name, _, _ in later}

    def test_only_the_callers_tenant(
        self, database: Database, seeded: Seeded, other: Seeded
    ) -> None:
        assert top(database, other.tenant_id) == [("order_status", 1, 2)]
        assert top(database, seeded.tenant_id)[1] == ("order_status", 2, 2)
        assert top(database, None) == []


def trigram_similarity(a: str, b: str) -> float:
    """pg_trgm's similarity(): trigrams of each word padded '  word ', shared over union."""

    def trigrams(s: str) -> set[str]:
        grams: set[str] = set()
        for word in re.findall(r"[a-z0-9]+", s.lower()):
            padded = f"  {word} "
            grams |= {padded[i : i + 3] for i in range(len(padded) - 2)}
        return grams

    ta, tb = trigrams(a), trigrams(b)
    return len(ta & tb) / len(ta | tb)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5)


class TestNearDuplicateTools:
    def test_pairs_close_by_name_or_vector(self, database: Database, seeded: Seeded) -> None:
        expected: dict[frozenset[str], tuple[float | None, float]] = {}
        for a, b in itertools.combinations(sorted(seeded.tools), 2):
            by_name = trigram_similarity(a, b)
            by_vector = cosine(VECTORS[a], VECTORS[b]) if a in VECTORS and b in VECTORS else None
            if by_name >= 0.6 or (by_vector is not None and by_vector >= 0.9):
                expected[frozenset((a, b))] = (by_vector, by_name)
        # The two the seed plants: a name pair and a vector pair.
        assert set(expected) == {
            frozenset(("order_status", "get_order_status")),
            frozenset(("refund_policy", "lookup_account")),
        }
        found = {
            frozenset((r["name_a"], r["name_b"])): (r["cosine_similarity"], r["name_similarity"])
            for r in rows(database, seeded, "near_duplicate_tools")
        }
        assert found.keys() == expected.keys()
        for pair, (by_vector, by_name) in expected.items():
            assert found[pair][1] == pytest.approx(by_name, abs=1e-6), pair
            assert found[pair][0] == (None if by_vector is None else pytest.approx(by_vector)), pair
        # order_status has 13 trigrams ("  o", " or", ..., "us "); "get" adds 4 more.
        assert expected[frozenset(("order_status", "get_order_status"))][1] == 13 / 17

    def test_camel_case_names_are_split_into_words(
        self, database: Database, seeded: Seeded, admin: Caller
    ) -> None:
        admin.ok(admin.post("/admin/v1/tools", tool_body("getOrderStatus", "Status")), 201)
        pairs = {
            frozenset((r["name_a"], r["name_b"])): r["name_similarity"]
            for r in rows(database, seeded, "near_duplicate_tools")
        }
        # 'get_order_status' and 'getOrderStatus' read as the same three words.
        assert pairs[frozenset(("get_order_status", "getOrderStatus"))] == 1.0


class TestToolVersionDrift:
    def test_selection_rate_before_and_after_a_new_description(
        self, database: Database, seeded: Seeded
    ) -> None:
        found = rows(database, seeded, "tool_version_drift")
        # Version 2 of order_status from 10:30 on day 1: before it, one select (offering it);
        # since, five selects, one of which offers it.
        assert found == [
            {"tool_id": seeded.tools["order_status"], "name": "order_status", "version": 2,
             "changed_at": VERSION_2_AT, "description_changed": True,
             "selections_before": 1, "selected_before": 1, "rate_before": 1.0,
             "selections_after": 5, "selected_after": 1, "rate_after": 0.2,
             "rate_change": pytest.approx(-0.8)},
        ]  # fmt: skip


class TestTenantIsolation:
    def test_every_view_shows_only_the_callers_tenant(
        self, database: Database, seeded: Seeded, other: Seeded
    ) -> None:
        alone: dict[str, Any] = {}
        for view in VIEWS:
            mine = rows(database, seeded, view)
            theirs = rows(database, other, view)
            alone[view] = (mine, theirs)
            assert mine, f"{view}: the seed gives tenant A rows"
        # Tenant B's own figures, never mixed with A's.
        recall_b = pick(alone["called_tool_recall"][1], "day", "mode", "calls", "hits")
        assert recall_b == [(DAY1, "bm25", 2, 2)]
        tokens_b = pick(alone["tokens_per_turn"][1], "day", "selections", "tokens_sent")
        assert tokens_b == [(DAY1, 1, 7), (DAY2, 1, 0)]
        latency_b = pick(alone["latency_percentiles"][1], "day", "max_ms")
        assert latency_b == [(DAY1, 999.0), (DAY2, 1.0)]
        assert pick(alone["zero_result_queries"][1], "query") == [("nothing here",)]
        assert alone["tools_never_selected"][1] == []
        assert pick(alone["tool_usage_daily"][1], "tool_name", "calls") == [("order_status", 2)]
        assert alone["near_duplicate_tools"][1] == []
        assert alone["tool_version_drift"][1] == []
        names_a = {r.get("name") for v in alone.values() for r in v[0]}
        ids_b = {str(i) for i in other.tools.values()}
        assert not ids_b & {str(r.get("tool_id")) for v in alone.values() for r in v[0]}
        assert "order_status" in names_a

    def test_no_tenant_sees_nothing(self, database: Database, seeded: Seeded) -> None:
        for view in VIEWS:
            assert rows(database, None, view) == [], view
