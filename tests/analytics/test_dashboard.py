"""The dashboard in headless Chromium (Debian's `chromium`, driven by Playwright): it loads
with seeded data, draws every chart from the API's figures, and logs no console error."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, sync_playwright

from tests.analytics.seed import OwnerConn, Selection, seed_busy, seed_tenant, write_selections
from tests.fixtures.factories import Caller, tool_body
from tests.fixtures.served import served
from toolsift.app import create_app
from toolsift.config import Settings
from toolsift.db import Database

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
# The screenshot in docs/ is refreshed on request only, so a test run leaves the tree clean:
# TOOLSIFT_SCREENSHOT=docs/analytics-dashboard.png pytest tests/analytics/test_dashboard.py
SCREENSHOT = os.environ.get("TOOLSIFT_SCREENSHOT")


@pytest.fixture
def server(settings: Settings, database: Database) -> Iterator[str]:
    """The real app on a real port: the browser needs HTTP, not a test transport."""
    with served(create_app(settings, database)) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} not found: the dashboard test needs Debian's chromium"
            " (apt-get install -y --no-install-recommends chromium)",
            pytrace=False,
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        launched.close()


class Watched:
    """A page with its console errors, uncaught exceptions and requests recorded."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        self.requests: list[Request] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"pageerror: {error}"))
        page.on("request", lambda request: self.requests.append(request))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.errors.append(f"{message.type}: {message.text}")


@pytest.fixture
def watched(browser: Browser) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield Watched(context.new_page())
    context.close()


def open_with(watched: Watched, server: str, key: str, since: str = "2026-11-01") -> Page:
    page = watched.page
    page.goto(f"{server}/admin/v1/dashboard")
    # The page starts 30 days back; the seed's days are fixed.
    page.fill("#since", since)
    page.fill("#key", key)
    page.click("button[type=submit]")
    return page


CHART_DATA = """
(id) => {
  const chart = Chart.getChart(document.getElementById(id));
  return { labels: chart.data.labels,
           datasets: chart.data.datasets.map((d) => ({ label: d.label, data: d.data })) };
}
"""
# Pixels of the canvas that are not transparent, and how many carry the first series' blue.
INK = """
(id) => {
  const canvas = document.getElementById(id);
  const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let inked = 0, blue = 0;
  for (let i = 0; i < pixels.length; i += 4) {
    if (pixels[i + 3] > 0) inked++;
    if (Math.abs(pixels[i] - 47) < 12 && Math.abs(pixels[i + 1] - 111) < 12
        && Math.abs(pixels[i + 2] - 222) < 12 && pixels[i + 3] > 200) blue++;
  }
  return { inked, blue, width: canvas.width, height: canvas.height };
}
"""


class TestDashboard:
    def test_charts_and_tables_from_seeded_data(
        self,
        server: str,
        watched: Watched,
        admin: Caller,
        database: Database,
        owner_conn: OwnerConn,
    ) -> None:
        seed_tenant(admin, database, owner_conn)
        page = open_with(watched, server, admin.key)
        page.wait_for_function("() => window.dashboard.loaded || window.dashboard.error")
        assert page.evaluate("() => window.dashboard.error || null") is None

        def data(chart: str) -> dict[str, Any]:
            result: dict[str, Any] = page.evaluate(CHART_DATA, chart)
            return result

        days = ["2026-11-10", "2026-11-11"]
        assert data("chart-recall") == {
            "labels": days,
            "datasets": [
                {"label": "bm25", "data": [33.3, None]},
                {"label": "hybrid", "data": [None, 100]},
            ],
        }
        assert data("chart-tokens") == {
            "labels": days,
            "datasets": [
                {"label": "sent", "data": [100, 100]},
                {"label": "whole allowed catalog", "data": [1000, 500]},
            ],
        }
        latency = {d["label"]: d["data"] for d in data("chart-latency")["datasets"]}
        assert latency == {
            "bm25 p50": [15, None],
            "hybrid p50": [30, 50],
            "bm25 p95": [19.5, None],
            "hybrid p95": [30, 59],
        }
        # The period's totals from /analytics/top-tools: most offered first.
        assert data("chart-tools") == {
            "labels": [
                "search_help", "order_status", "lookup_account", "refund_policy", "issue_refund",
            ],
            "datasets": [
                {"label": "offered", "data": [6, 2, 1, 1, 0]},
                {"label": "called", "data": [0, 2, 1, 0, 1]},
            ],
        }  # fmt: skip
        for chart in ("chart-recall", "chart-tokens", "chart-latency", "chart-tools"):
            ink = page.evaluate(INK, chart)
            assert ink["width"] > 300, (chart, ink)
            assert ink["height"] > 200, (chart, ink)
            # Axes and labels alone are a few thousand pixels; a drawn series adds its colour.
            assert ink["inked"] > 3000, (chart, ink)
            assert ink["blue"] > 100, (chart, ink)

        duplicates = [
            (*sorted(cells[:2]), *cells[2:])
            for cells in (
                row.split("\t")
                for row in page.locator("#table-duplicates tbody tr").all_inner_texts()
            )
        ]
        # Closest first; which name comes first within a pair follows the tools' ids.
        assert duplicates == [
            ("lookup_account", "refund_policy", "0.960", "0.000"),
            ("get_order_status", "order_status", "-", "0.765"),
        ]
        zero = page.locator("#table-zero tbody tr").all_inner_texts()
        assert [row.split("\t")[:3] for row in zero] == [
            ["xyzzy", "zero_result", "2"],
            ["delete everything", "core_only", "1"],
        ]
        figures = page.locator("#summary .figure b").all_inner_texts()
        # 6 selects; 2 of 4 calls offered; 1 - 600/4500 of the catalog's tokens saved.
        assert figures == ["6", "50.0%", "86.7%", "59.0 ms"]

        assert watched.errors == []
        api = [r for r in watched.requests if "/admin/v1/analytics/" in r.url]
        assert len(api) == 6
        for request in watched.requests:
            assert admin.key not in request.url
        assert all(r.headers.get("authorization") == f"Bearer {admin.key}" for r in api)
        png = page.screenshot(path=SCREENSHOT, full_page=True)
        assert png.startswith(b"\x89PNG")
        assert len(png) > 50_000

    def test_top_tools_of_a_busy_tenant_count_every_day(
        self, server: str, watched: Watched, admin: Caller, database: Database
    ) -> None:
        """More (tool, day) rows than one API read serves: the chart shows the database's
        totals, not sums of the newest rows."""
        seed_busy(database, admin.tenant_id)
        page = open_with(watched, server, admin.key, since="2026-09-01")
        page.wait_for_function("() => window.dashboard.loaded || window.dashboard.error")
        assert page.evaluate("() => window.dashboard.error || null") is None
        assert page.evaluate(CHART_DATA, "chart-tools") == {
            "labels": ["old_favourite", "t000", "t001", "t002", "t003", "t004"],
            "datasets": [
                {"label": "offered", "data": [50, 30, 30, 30, 30, 30]},
                {"label": "called", "data": [50, 30, 0, 0, 0, 0]},
            ],
        }
        asked = [r.url for r in watched.requests if "/admin/v1/analytics/" in r.url]
        assert [u for u in asked if "/top-tools?" in u] == [
            f"{server}/admin/v1/analytics/top-tools?since=2026-09-01&limit=6"
        ]
        assert not [u for u in asked if "/tool-usage" in u]
        assert watched.errors == []

    def test_queries_are_shown_as_text_never_run(
        self, server: str, watched: Watched, admin: Caller, database: Database
    ) -> None:
        """Logged queries are end-user input: markup in one must not run in an admin's page."""
        attack = '<img src=x onerror="window.pwned = 1">'
        tools = {"order_status": UUID(
            admin.ok(admin.post("/admin/v1/tools", tool_body("order_status", "x")), 201)["id"]
        )}  # fmt: skip
        write_selections(
            database,
            admin.tenant_id,
            tools,
            [Selection(datetime.now(UTC), "bm25", attack, [], 0, 10, 1.0, 0)],
        )
        page = open_with(watched, server, admin.key)
        page.wait_for_function("() => window.dashboard.loaded || window.dashboard.error")
        assert page.locator("#table-zero tbody td").first.inner_text() == attack
        assert page.locator("#table-zero img").count() == 0
        assert page.evaluate("() => window.pwned === undefined")
        assert watched.errors == []

    def test_a_tenant_without_logs_gets_empty_charts_and_no_error(
        self, server: str, watched: Watched, admin: Caller
    ) -> None:
        page = open_with(watched, server, admin.key)
        page.wait_for_function("() => window.dashboard.loaded || window.dashboard.error")
        assert page.inner_text("#status") == "0 selects since 2026-11-01."
        assert page.locator("#table-zero tbody").inner_text() == "none"
        assert page.evaluate(CHART_DATA, "chart-recall") == {"labels": [], "datasets": []}
        assert watched.errors == []

    def test_a_wrong_key_says_so_and_draws_nothing(
        self, server: str, watched: Watched, admin: Caller
    ) -> None:
        page = open_with(watched, server, admin.key[:-4] + "xxxx")
        page.wait_for_function("() => window.dashboard.error")
        assert "401" in page.inner_text("#status")
        assert page.locator("#panels").is_hidden()
        assert [e for e in watched.errors if "401" not in e] == []
        # One failed authentication, not one per panel (the API limits them per address),
        # and the refused key is not kept for the next page load.
        asked = [r.url for r in watched.requests if "/admin/v1/analytics/" in r.url]
        assert len(asked) == 1
        assert page.evaluate("() => sessionStorage.getItem('toolsift.adminKey')") is None

    def test_the_page_sets_a_strict_content_security_policy(self, server: str) -> None:
        import httpx

        response = httpx.get(f"{server}/admin/v1/dashboard")
        assert response.status_code == 200
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "unsafe-inline" not in policy
        assert httpx.get(f"{server}/admin/v1/dashboard/../../v1/select").status_code == 404
        assert httpx.get(f"{server}/admin/v1/dashboard/service.py").status_code == 404
