"""`toolsift report --tenant T [--since DATE]`: the views as tables, from the shell."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.analytics.seed import BUSY_TOP, OwnerConn, seed_busy, seed_tenant
from tests.fixtures.factories import PEPPER, Caller
from toolsift import cli
from toolsift.cli import admin as cli_admin
from toolsift.config import get_settings
from toolsift.db import Database

runner = CliRunner()


def top_tools(output: str) -> list[tuple[str, int, int]]:
    """The rows of the report's top tools table."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Top tools"))
    found = []
    for line in lines[start + 1 :]:
        if line.startswith("└"):
            break
        if line.startswith("│"):
            name, offered, called = (cell.strip() for cell in line.strip("│").split("│"))
            found.append((name, int(offered), int(called)))
    return found


@pytest.fixture
def env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TOOLSIFT_DATABASE_URL", database_url)
    monkeypatch.setenv("TOOLSIFT_KEY_PEPPER", PEPPER)
    # Wide enough that no cell is cut.
    monkeypatch.setattr(cli_admin, "console", Console(width=200))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.usefixtures("env")
class TestReport:
    def test_every_section_with_its_figures(
        self, admin: Caller, database: Database, owner_conn: OwnerConn
    ) -> None:
        seed_tenant(admin, database, owner_conn)
        result = runner.invoke(cli.app, ["report", "--tenant", str(admin.tenant_id)])
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()

        def line(*parts: str) -> str:
            found = [row for row in lines if all(p in row for p in parts)]
            assert len(found) == 1, (parts, result.output)
            return found[0]

        # Recall day 1 bm25: 1 of 3 calls offered; day 2 hybrid: 1 of 1.
        assert "33.3%" in line("2026-11-10", "bm25", " 3 ")
        assert "100.0%" in line("2026-11-11", "hybrid", " 1 ")
        assert "90.0%" in line("2026-11-10", "1000.000")
        assert "80.0%" in line("2026-11-11", "500.000")
        assert "59.000" in line("2026-11-11", "hybrid", "50.000")
        assert "zero_result" in line("xyzzy")
        assert "0.765" in line("order_status", "get_order_status", " - ")
        assert "0.960" in line("refund_policy", "lookup_account")
        assert "-80.0 pts" in line("order_status", "changed")
        assert line("search_help", " 6 ", "2026-11-11")
        assert line("delete_account", "False")
        assert top_tools(result.output) == [
            ("search_help", 6, 0),
            ("order_status", 2, 2),
            ("lookup_account", 1, 1),
            ("refund_policy", 1, 0),
            ("issue_refund", 0, 1),
        ]

    def test_since_limits_the_day_tables(
        self, admin: Caller, database: Database, owner_conn: OwnerConn
    ) -> None:
        seed_tenant(admin, database, owner_conn)
        result = runner.invoke(
            cli.app, ["report", "--tenant", str(admin.tenant_id), "--since", "2026-11-11"]
        )
        assert result.exit_code == 0, result.output
        # Day tables start on the 11th; the version change of the 10th is out of range too.
        # (Tool lists are not by day: refund_policy was last selected on the 10th.)
        dated = [row for row in result.output.splitlines() if "2026-11-10" in row]
        assert [row.split()[1] for row in dated] == ["refund_policy"]
        assert "2026-11-11" in result.output
        assert "no tool has a second version" in result.output

    def test_top_tools_count_every_day_of_a_busy_tenant(
        self, admin: Caller, database: Database
    ) -> None:
        """More (tool, day) rows than the analytics reads serve at once (MAX_ROWS): the totals
        are summed in the database, exact, with no notice of a cut."""
        seed_busy(database, admin.tenant_id)
        result = runner.invoke(cli.app, ["report", "--tenant", str(admin.tenant_id)])
        assert result.exit_code == 0, result.output
        assert "narrow --since" not in " ".join(result.output.split())
        top = top_tools(result.output)
        assert top[: len(BUSY_TOP)] == BUSY_TOP
        assert top[len(BUSY_TOP) :] == [(f"t{i:03}", 30, 0) for i in range(3, 14)]
        dates = ["--since", "2026-10-06", "--until", "2026-10-31"]
        later = runner.invoke(cli.app, ["report", "--tenant", str(admin.tenant_id), *dates])
        assert later.exit_code == 0, later.output
        assert top_tools(later.output)[:2] == [("t000", 25, 25), ("t001", 25, 0)]

    def test_a_bad_date_names_the_option(self, admin: Caller) -> None:
        result = runner.invoke(
            cli.app, ["report", "--tenant", str(admin.tenant_id), "--since", "11/11/2026"]
        )
        assert result.exit_code == 2
        assert "--since" in result.output

    def test_until_before_since_is_refused(self, admin: Caller) -> None:
        """An empty report would look like a quiet period."""
        dates = ["--since", "2027-01-01", "--until", "2026-01-01"]
        result = runner.invoke(cli.app, ["report", "--tenant", str(admin.tenant_id), *dates])
        assert result.exit_code == 2
        assert "--until (2026-01-01) must be after --since (2027-01-01)" in result.output
