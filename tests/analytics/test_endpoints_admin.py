"""/admin/v1/analytics/...: the views over HTTP, with the admin key of the tenant."""

from __future__ import annotations

import pytest

from tests.analytics.seed import BUSY_TOP, OwnerConn, seed_busy, seed_tenant
from tests.fixtures.factories import Caller, agent_key
from toolsift.db import Database

ENDPOINTS = {
    "recall": "called_tool_recall",
    "tokens": "tokens_per_turn",
    "latency": "latency_percentiles",
    "zero-results": "zero_result_queries",
    "tool-usage": "tool_usage_daily",
    "never-selected": "tools_never_selected",
    "never-called": "tools_selected_never_called",
    "near-duplicates": "near_duplicate_tools",
    "drift": "tool_version_drift",
}


@pytest.fixture
def seeded(admin: Caller, database: Database, owner_conn: OwnerConn) -> None:
    seed_tenant(admin, database, owner_conn)


@pytest.mark.usefixtures("seeded")
class TestAnalyticsEndpoints:
    def test_every_view_has_its_endpoint(self, admin: Caller) -> None:
        from toolsift.analytics.service import VIEWS

        assert set(ENDPOINTS.values()) == set(VIEWS)
        sizes = {
            path: len(admin.ok(admin.get(f"/admin/v1/analytics/{path}"))) for path in ENDPOINTS
        }
        # The seed's answers (tests/analytics/test_views.py works them out).
        assert sizes == {
            "recall": 2, "tokens": 2, "latency": 3, "zero-results": 2, "tool-usage": 8,
            "never-selected": 3, "never-called": 2, "near-duplicates": 2, "drift": 1,
        }  # fmt: skip

    def test_figures_come_through_as_json(self, admin: Caller) -> None:
        recall = admin.ok(admin.get("/admin/v1/analytics/recall", params={"since": "2026-11-11"}))
        assert recall == [
            {"day": "2026-11-11", "mode": "hybrid", "calls": 1, "hits": 1, "recall": 1.0}
        ]
        drift = admin.ok(admin.get("/admin/v1/analytics/drift"))
        assert (drift[0]["name"], drift[0]["rate_before"], drift[0]["rate_after"]) == (
            "order_status",
            1.0,
            0.2,
        )
        assert len(admin.ok(admin.get("/admin/v1/analytics/tool-usage", params={"limit": 3}))) == 3

    def test_top_tools_are_summed_over_the_period(self, admin: Caller) -> None:
        top = admin.ok(admin.get("/admin/v1/analytics/top-tools"))
        assert [(r["tool_name"], r["selections"], r["calls"]) for r in top] == [
            ("search_help", 6, 0),
            ("order_status", 2, 2),
            ("lookup_account", 1, 1),
            ("refund_policy", 1, 0),
            ("issue_refund", 0, 1),
        ]
        day2 = admin.ok(
            admin.get("/admin/v1/analytics/top-tools", params={"since": "2026-11-11", "limit": 2})
        )
        assert day2 == [
            {"tool_name": "search_help", "selections": 3, "calls": 0},
            {"tool_name": "order_status", "selections": 1, "calls": 1},
        ]

    @pytest.mark.parametrize(
        ("path", "params", "field"),
        [
            ("recall", {"since": "yesterday"}, "since"),
            ("tokens", {"until": "2026-13-01"}, "until"),
            ("recall", {"since": "2027-01-01", "until": "2026-01-01"}, "until"),
            ("drift", {"since": "2026-05-01", "until": "2026-05-01"}, "until"),
            ("latency", {"limit": 0}, "limit"),
            ("near-duplicates", {"limit": 10_001}, "limit"),
            ("top-tools", {"since": "2026-11"}, "since"),
            ("top-tools", {"until": "tomorrow"}, "until"),
            ("top-tools", {"since": "2026-11-11", "until": "2026-11-11"}, "until"),
            ("top-tools", {"limit": 0}, "limit"),
            ("top-tools", {"limit": 10_001}, "limit"),
        ],
    )
    def test_bad_parameters_are_named(
        self, admin: Caller, path: str, params: dict[str, object], field: str
    ) -> None:
        response = admin.get(f"/admin/v1/analytics/{path}", params=params)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == field

    def test_agent_keys_and_no_key_are_refused(self, admin: Caller) -> None:
        agent = agent_key(admin, ["support"])
        assert agent.get("/admin/v1/analytics/recall").status_code == 403
        assert admin.client.get("/admin/v1/analytics/recall").status_code == 401


def test_top_tools_of_a_busy_tenant_count_every_day(admin: Caller, database: Database) -> None:
    """More (tool, day) rows than the daily endpoint serves at once: the totals are exact."""
    seed_busy(database, admin.tenant_id)
    top = admin.ok(admin.get("/admin/v1/analytics/top-tools"))
    assert len(top) == 100
    assert [(r["tool_name"], r["selections"], r["calls"]) for r in top[:4]] == BUSY_TOP
    assert all(r["selections"] == 30 and r["calls"] == 0 for r in top[2:])
    later = admin.ok(
        admin.get(
            "/admin/v1/analytics/top-tools",
            params={"since": "2026-10-06", "until": "2026-10-31", "limit": 2},
        )
    )
    assert later == [
        {"tool_name": "t000", "selections": 25, "calls": 25},
        {"tool_name": "t001", "selections": 25, "calls": 0},
    ]
