"""`toolsift mcp ...` run as an operator would, against the test database and a real server."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from toolsift.cli import app
from toolsift.config import get_settings
from toolsift.db import Database

from ..fixtures.factories import PEPPER
from .servers.live import LiveServer, tool
from .test_review import POISONED

runner = CliRunner()


@pytest.fixture
def env(database_url: str, database: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TOOLSIFT_DATABASE_URL", database_url)
    monkeypatch.setenv("TOOLSIFT_KEY_PEPPER", PEPPER)
    monkeypatch.setenv("TOOLSIFT_SECRET_KEY", "cli-test-secret")
    monkeypatch.setenv("SRV_TOKEN", "tok-cli-secret-123456")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def run(*args: str, code: int = 0) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output
    return " ".join(result.output.split())  # rich wraps long lines


@pytest.mark.usefixtures("env")
def test_add_list_sync_review_approve(server: LiveServer, owner_conn: Any) -> None:
    server.tools = [tool("add", POISONED), tool("subtract", "Subtracts two numbers.")]
    tenant = re.search(r"tenant ([0-9a-f-]{36})", run("tenant", "create", "acme"))
    assert tenant
    t = ["--tenant", tenant[1]]
    added = run("mcp", "add", "srv", *t, "--url", server.url, "--bearer-token-env", "SRV_TOKEN")
    counts = "2 created, 0 updated, 0 unchanged, 0 removed, 1 held"
    assert f"synced: 2 tools in 1 pages ({counts})" in added
    assert server.headers[-1]["authorization"] == "Bearer tok-cli-secret-123456"
    # The first sync's tools are in the audit log as the CLI's, like the source itself.
    audited = owner_conn.execute(
        "SELECT DISTINCT actor, table_name FROM audit_log WHERE tenant_id = %s",
        (tenant[1],),
    ).fetchall()
    assert {("cli", "mcp_sources"), ("cli", "tools"), ("cli", "mcp_tools")} <= set(audited)
    listed = run("mcp", "list", *t)
    assert "healthy" in listed
    # The id `sync` and the API take, whole, even at 80 columns.
    assert re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", listed), (
        listed
    )
    assert "tok-cli-secret" not in listed + added
    review = run("mcp", "review", *t)
    digest = re.search(r"hash ([0-9a-f]{64})", review)
    assert digest, review
    assert "secrets in description" in review
    stale = run("mcp", "approve", "srv_add", *t, "--hash", "0" * 64, code=2)
    assert "not the hash of the current definition" in stale
    assert "mistyped" in stale
    malformed = run("mcp", "approve", "srv_add", *t, "--hash", "abc", code=2)
    assert "64 lowercase hex digits" in malformed
    assert "approved" in run("mcp", "approve", "srv_add", *t, "--hash", digest[1])
    assert "nothing to review" in run("mcp", "review", *t)
    assert "2 unchanged" in run("mcp", "sync", "srv", *t)
    server.stop()
    assert "sync failed" in run("mcp", "sync", "srv", *t, code=1)
    # Added all the same, but a first sync that fails is not a success.
    added = run("mcp", "add", "down", *t, "--url", server.url, code=1)
    assert "sync failed" in added
    assert "down" in run("mcp", "list", *t)


@pytest.mark.usefixtures("env")
def test_a_token_is_never_an_argument() -> None:
    tenant = re.search(r"tenant ([0-9a-f-]{36})", run("tenant", "create", "acme"))
    assert tenant
    missing = run(
        "mcp",
        "add",
        "srv",
        "--tenant",
        tenant[1],
        "--url",
        "https://e.com/mcp",
        "--bearer-token-env",
        "NOT_SET_ANYWHERE",
        code=2,
    )
    assert "NOT_SET_ANYWHERE is not set" in missing


@pytest.mark.usefixtures("env")
def test_bad_input_names_the_field_in_one_line() -> None:
    tenant = re.search(r"tenant ([0-9a-f-]{36})", run("tenant", "create", "acme"))
    assert tenant
    bad_prefix = ("--url", "https://e.com/mcp", "--prefix", "a b")
    said = run("mcp", "add", "srv", "--tenant", tenant[1], *bad_prefix, "--no-sync", code=2)
    assert said.startswith("error: prefix: String should match pattern")
    assert "validation error" not in said
    assert "srv" not in run("mcp", "list", "--tenant", tenant[1])


@pytest.mark.usefixtures("env")
def test_syncing_a_disabled_source_says_so(server: LiveServer, owner_conn: Any) -> None:
    server.tools = [tool("subtract", "Subtracts two numbers.")]
    tenant = re.search(r"tenant ([0-9a-f-]{36})", run("tenant", "create", "acme"))
    assert tenant
    t = ["--tenant", tenant[1]]
    run("mcp", "add", "srv", *t, "--url", server.url)
    owner_conn.execute("UPDATE mcp_sources SET enabled = false WHERE name = 'srv'")
    assert "source srv is disabled; enable it first" in run("mcp", "sync", "srv", *t, code=2)


@pytest.mark.usefixtures("env")
def test_an_unknown_tenant_is_named_not_an_empty_answer() -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    for command in (["list"], ["review"], ["sync", "srv"]):
        said = run("mcp", *command, "--tenant", unknown, code=2)
        assert f"no tenant {unknown}" in said, command


@pytest.mark.usefixtures("env")
def test_every_command_takes_the_data_dir_like_the_others(tmp_path: Any) -> None:
    tenant = re.search(r"tenant ([0-9a-f-]{36})", run("tenant", "create", "acme"))
    assert tenant
    # With DATABASE_URL set the data dir is not used, but the option must parse everywhere.
    t = ["--tenant", tenant[1], "--data-dir", str(tmp_path)]
    assert "nothing to review" in run("mcp", "review", *t)
    run("mcp", "list", *t)
    for command in ("add", "sync", "approve", "reject", "listen"):
        assert "--data-dir" in run("mcp", command, "--help"), command
