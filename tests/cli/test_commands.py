"""The management commands, run as a user would run them, against the test database."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from typer.testing import CliRunner, Result

from toolsift.access.service import access
from toolsift.app import create_app
from toolsift.cli import app
from toolsift.config import Settings, get_settings
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.models import Tool
from toolsift.tools.schemas import ToolCreate
from toolsift.tools.service import tool as tool_service

from ..fixtures.factories import PEPPER
from ..fixtures.served import served

FIXTURES = Path(__file__).parent.parent / "data"
runner = CliRunner()
OwnerConn = psycopg.Connection[tuple[object, ...]]


@pytest.fixture
def env(database_url: str, database: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TOOLSIFT_DATABASE_URL", database_url)
    monkeypatch.setenv("TOOLSIFT_KEY_PEPPER", PEPPER)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _tenant(output: str) -> UUID:
    match = re.search(r"tenant ([0-9a-f-]{36})", output)
    assert match, output
    return UUID(match.group(1))


def _three_tools_then_one_requiring(folder: Path, permission: str) -> Path:
    """tools.jsonl of three plain tools, then `t3` on line 4, which requires `permission`."""
    catalog = folder / "tools.jsonl"
    lines = [json.dumps({"id": f"t{i}", "description": "d"}) for i in range(3)]
    lines.append(json.dumps({"id": "t3", "required_permission": permission}))
    catalog.write_text("\n".join(lines) + "\n")
    return catalog


def _count(database: Database, tenant_id: UUID) -> int:
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        return int(session.scalar(select(func.count()).select_from(Tool)) or 0)


@pytest.mark.usefixtures("env")
class TestTenantAndKeys:
    def test_tenant_create_prints_a_working_admin_key(self, client: TestClient) -> None:
        result = runner.invoke(app, ["tenant", "create", "acme"])
        assert result.exit_code == 0, result.output
        match = re.search(r"admin key \(shown once\): (tsk_\S+)", result.output)
        assert match, result.output
        response = client.get("/admin/v1/tenant", headers={"Authorization": f"Bearer {match[1]}"})
        assert response.status_code == 200
        assert response.json()["id"] == str(_tenant(result.output))

    def test_key_create_prints_a_working_agent_key(self, client: TestClient) -> None:
        tenant_id = _tenant(runner.invoke(app, ["tenant", "create", "acme"]).output)
        result = runner.invoke(app, ["key", "create", "--tenant", str(tenant_id), "--name", "bot"])
        match = re.search(r"agent key \(shown once\): (tsk_\S+)", result.output)
        assert match, result.output
        body = {"messages": [{"role": "user", "content": "hello"}]}
        response = client.post(
            "/v1/select", json=body, headers={"Authorization": f"Bearer {match[1]}"}
        )
        assert response.status_code == 200, response.text

    def test_key_list_and_revoke(self, client: TestClient) -> None:
        tenant_id = str(_tenant(runner.invoke(app, ["tenant", "create", "acme"]).output))
        made = runner.invoke(app, ["key", "create", "--tenant", tenant_id, "--name", "bot"])
        secret = re.search(r"agent key \(shown once\): (tsk_\S+)", made.output)
        assert secret, made.output
        listed = runner.invoke(app, ["key", "list", "--tenant", tenant_id])
        assert listed.exit_code == 0, listed.output
        assert secret[1] not in listed.output
        rows = [line.split() for line in listed.output.splitlines() if "'bot'" in line]
        assert len(rows) == 1
        assert rows[0][1] == "agent"
        assert rows[0][3] == "active"
        key_id = rows[0][0]
        body = {"messages": [{"role": "user", "content": "hello"}]}
        headers = {"Authorization": f"Bearer {secret[1]}"}
        assert client.post("/v1/select", json=body, headers=headers).status_code == 200
        revoked = runner.invoke(app, ["key", "revoke", key_id, "--tenant", tenant_id])
        assert revoked.exit_code == 0, revoked.output
        assert "agent key 'bot'" in revoked.output
        assert "revoked" in revoked.output
        assert client.post("/v1/select", json=body, headers=headers).status_code == 401
        again = runner.invoke(app, ["key", "revoke", key_id, "--tenant", tenant_id])
        assert "was already revoked" in again.output
        listed = runner.invoke(app, ["key", "list", "--tenant", tenant_id]).output
        assert f"{key_id}  agent" in listed
        assert "revoked 20" in listed
        missing = runner.invoke(
            app, ["key", "revoke", "00000000-0000-0000-0000-000000000000", "--tenant", tenant_id]
        )
        assert missing.exit_code == 2
        assert "key not found" in missing.output

    def test_key_create_with_unknown_role_fails_cleanly(self) -> None:
        tenant_id = _tenant(runner.invoke(app, ["tenant", "create", "acme"]).output)
        result = runner.invoke(
            app, ["key", "create", "--tenant", str(tenant_id), "--name", "bot", "--role", "ghost"]
        )
        assert result.exit_code == 2
        assert "unknown role(s): ghost" in result.output

    def test_key_create_with_a_bad_scope_names_the_field_in_one_line(self) -> None:
        tenant_id = _tenant(runner.invoke(app, ["tenant", "create", "acme"]).output)
        result = runner.invoke(
            app, ["key", "create", "--tenant", str(tenant_id), "--name", "bot", "--scope", "root"]
        )
        assert result.exit_code == 2
        assert result.output.strip() == "error: scope: Input should be 'admin' or 'agent'"

    def test_an_empty_tenant_name_is_a_clear_error(self) -> None:
        result = runner.invoke(app, ["tenant", "create", ""])
        assert result.exit_code == 2
        assert "name:" in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)

    @pytest.mark.parametrize(
        "command",
        [
            ["key", "create", "--name", "bot"],
            ["tools", "import", str(FIXTURES / "mini_catalog.jsonl")],
            ["reindex"],
            ["report"],
            ["permission", "create", "crm.read"],
            ["role", "list"],
        ],
    )
    def test_an_unknown_tenant_is_a_clear_error(self, command: list[str]) -> None:
        ghost = "00000000-0000-0000-0000-00000000abcd"
        result = runner.invoke(app, [*command, "--tenant", ghost])
        assert result.exit_code == 2, result.output
        assert f"no tenant {ghost}" in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)

    def test_tenant_delete_asks_and_removes_the_tenant(
        self, client: TestClient, database: Database
    ) -> None:
        created = runner.invoke(app, ["tenant", "create", "acme"]).output
        tenant_id = _tenant(created)
        admin_key = re.search(r"admin key \(shown once\): (tsk_\S+)", created)
        assert admin_key, created
        imported = runner.invoke(
            app,
            ["tools", "import", str(FIXTURES / "mini_catalog.jsonl"), "--tenant", str(tenant_id)],
        )
        assert imported.exit_code == 0, imported.output
        tools = _count(database, tenant_id)
        assert tools > 0
        listed = runner.invoke(app, ["tenant", "list"])
        assert listed.exit_code == 0, listed.output
        assert re.search(rf"{tenant_id}\s+acme\s+{tools}\s+\d{{4}}-", listed.output), listed.output

        declined = runner.invoke(app, ["tenant", "delete", str(tenant_id)], input="n\n")
        assert declined.exit_code == 1
        assert f"Delete tenant {tenant_id} (acme)" in declined.output
        assert _count(database, tenant_id) == tools

        result = runner.invoke(app, ["tenant", "delete", str(tenant_id)], input="y\n")
        assert result.exit_code == 0, result.output
        assert f"deleted tenant {tenant_id} (acme): {tools} tools, 1 key" in result.output
        assert _count(database, tenant_id) == 0
        response = client.get(
            "/admin/v1/tenant", headers={"Authorization": f"Bearer {admin_key[1]}"}
        )
        assert response.status_code == 401

        listed = runner.invoke(app, ["tenant", "list"])
        assert listed.exit_code == 0, listed.output
        assert str(tenant_id) not in listed.output
        again = runner.invoke(app, ["tenant", "delete", str(tenant_id), "--yes"])
        assert again.exit_code == 2
        assert f"no tenant {tenant_id}" in again.output

    def test_reindex_all_tenants_queues_every_live_tool_of_each(
        self, database: Database, owner_conn: OwnerConn
    ) -> None:
        tenants = [_tenant(runner.invoke(app, ["tenant", "create", n]).output) for n in "ab"]
        for tenant_id in tenants:
            imported = runner.invoke(
                app,
                [
                    "tools",
                    "import",
                    str(FIXTURES / "mini_catalog.jsonl"),
                    "--tenant",
                    str(tenant_id),
                ],
            )
            assert imported.exit_code == 0, imported.output
        owner_conn.execute("DELETE FROM outbox")
        result = runner.invoke(app, ["reindex", "--all-tenants", "--force"])
        assert result.exit_code == 0, result.output
        jobs = dict(
            owner_conn.execute(
                "SELECT tenant_id, count(*) FROM outbox WHERE kind = 'reembed' GROUP BY tenant_id"
            ).fetchall()
        )
        assert jobs == {t: _count(database, t) for t in tenants}
        assert f"queued {sum(jobs.values())} tools of 2 tenants" in result.output
        audited = owner_conn.execute(
            "SELECT tenant_id, actor, action, row_key FROM audit_log"
            " WHERE table_name = 'embedding_reindex'"
        ).fetchall()
        assert sorted(audited) == sorted((t, "cli", "insert", {"force": True}) for t in tenants)

    def test_tenant_settings_prints_merges_and_refuses(
        self, database: Database, owner_conn: OwnerConn
    ) -> None:
        tenant_id = _tenant(runner.invoke(app, ["tenant", "create", "acme"]).output)
        settings = ["tenant", "settings", str(tenant_id)]
        shown = runner.invoke(app, settings)
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout) == {}
        invoice = ToolCreate(name="create_invoice", description="Erstellt eine neue Rechnung")
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            tool_service.upsert(session, tenant_id, [invoice])

        german = '{"text_search": "german", "fusion": {"dense_weight": 0.5}}'
        merged = runner.invoke(app, [*settings, "--set", german])
        assert merged.exit_code == 0, merged.output
        assert json.loads(merged.stdout) == json.loads(german)
        assert "indexed again with text search 'german'" in merged.stderr
        terms = {
            term
            for (term,) in owner_conn.execute(
                "SELECT term FROM tool_terms WHERE tenant_id = %s", (tenant_id,)
            )
        }
        assert {"rechnung", "erstellt", "neu"} <= terms

        for given, said in [
            ('{"text_search": "klingon"}', "settings.text_search: 'klingon' is not one of"),
            ('{"fusion": {"k": 0}}', "settings.fusion.k:"),
            ("{", "--set: not JSON"),
            ('["german"]', "settings: Input should be a valid dictionary"),
        ]:
            refused = runner.invoke(app, [*settings, "--set", given])
            assert refused.exit_code == 2, refused.output
            assert said in refused.output
        assert json.loads(runner.invoke(app, settings).stdout) == json.loads(german)

        reset = runner.invoke(app, [*settings, "--set", '{"text_search": null}'])
        assert json.loads(reset.stdout) == {"fusion": {"dense_weight": 0.5}}
        assert "with text search 'english'" in reset.stderr

    @pytest.mark.parametrize("tenants", [[], ["--all-tenants", "--tenant", str(UUID(int=1))]])
    def test_reindex_needs_one_tenant_or_all(self, tenants: list[str]) -> None:
        result = runner.invoke(app, ["reindex", *tenants])
        assert result.exit_code == 2
        assert "either --tenant ID or --all-tenants" in result.output


@pytest.mark.usefixtures("env")
class TestPermissionsAndRoles:
    def test_a_tenant_set_up_from_the_shell_alone(self, client: TestClient) -> None:
        tenant = str(_tenant(runner.invoke(app, ["tenant", "create", "acme"]).output))

        def ok(*args: str) -> str:
            result = runner.invoke(app, [*args, "--tenant", tenant])
            assert result.exit_code == 0, result.output
            return result.output

        ok("permission", "create", "orders.read", "--description", "Read orders")
        ok("permission", "create", "billing.refund")
        assert "created role support: orders.read" in ok(
            "role", "create", "support", "--permission", "orders.read"
        )
        granted = ok("role", "grant", "support", "billing.refund")
        assert "role support: billing.refund, orders.read" in granted
        assert "already" not in granted
        again = ok("role", "grant", "support", "billing.refund")
        assert "role support: billing.refund, orders.read (it already had it)" in again
        assert re.search(r"support\s+billing.refund, orders.read", ok("role", "list"))
        assert re.search(r"orders.read\s+Read orders", ok("permission", "list"))
        created = ok("key", "create", "--name", "bot", "--role", "support")
        key = re.search(r"agent key \(shown once\): (tsk_\S+)", created)
        assert key, created
        ok("tools", "import", str(FIXTURES / "mini_catalog.jsonl"))
        body = {"messages": [{"role": "user", "content": "order"}], "roles": ["support"]}
        headers = {"Authorization": f"Bearer {key[1]}"}
        assert client.post("/v1/select", json=body, headers=headers).status_code == 200

        assert "role support: orders.read" in ok("role", "revoke", "support", "billing.refund")
        noop = ok("role", "revoke", "support", "billing.refund")
        assert "(it did not have billing.refund)" in " ".join(noop.split())
        ok("permission", "delete", "billing.refund")
        assert "billing.refund" not in ok("permission", "list")
        ok("role", "delete", "support")
        assert client.post("/v1/select", json=body, headers=headers).status_code == 403

    @pytest.mark.parametrize(
        ("command", "message"),
        [
            (["permission", "create", "Bad Name!"], "name: String should match pattern"),
            (["permission", "delete", "ghost"], "name: unknown permission(s): ghost"),
            (["role", "create", "ops", "--permission", "ghost"], "unknown permission(s): ghost"),
            (["role", "grant", "ghost", "crm.read"], "role: unknown role(s): ghost"),
            (["role", "create", "ops", "--permission", "admin.x"], "unknown permission(s)"),
        ],
    )
    def test_bad_input_is_a_clear_error_that_changes_nothing(
        self, command: list[str], message: str, owner_conn: OwnerConn
    ) -> None:
        tenant = str(_tenant(runner.invoke(app, ["tenant", "create", "acme"]).output))
        audited = owner_conn.execute("SELECT count(*) FROM audit_log").fetchone()
        result = runner.invoke(app, [*command, "--tenant", tenant])
        assert result.exit_code == 2, result.output
        assert message in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert owner_conn.execute("SELECT count(*) FROM audit_log").fetchone() == audited


@pytest.mark.usefixtures("env")
class TestToolsImport:
    def test_imports_a_benchmark_catalog_and_is_idempotent(self, database: Database) -> None:
        tenant_id = _tenant(runner.invoke(app, ["tenant", "create", "acme"]).output)
        catalog = str(FIXTURES / "mini_catalog.jsonl")
        first = runner.invoke(
            app, ["tools", "import", catalog, "--tenant", str(tenant_id), "--batch", "4"]
        )
        assert first.exit_code == 0, first.output
        assert "10 created, 0 updated, 0 unchanged" in first.output
        again = runner.invoke(app, ["tools", "import", catalog, "--tenant", str(tenant_id)])
        assert "0 created, 0 updated, 10 unchanged" in again.output
        assert _count(database, tenant_id) == 10

    def test_a_bad_line_is_named_and_nothing_is_written(
        self, database: Database, tmp_path: Path
    ) -> None:
        tenant_id = _tenant(runner.invoke(app, ["tenant", "create", "acme"]).output)
        lines = (FIXTURES / "mini_catalog.jsonl").read_text().splitlines()
        broken = tmp_path / "tools.jsonl"
        bad = json.dumps(
            {"id": "x", "description": "d", "parameters": {"type": "object", "properties": 5}}
        )
        broken.write_text("\n".join([*lines[:2], bad, "{not json", *lines[2:]]) + "\n")
        result = runner.invoke(app, ["tools", "import", str(broken), "--tenant", str(tenant_id)])
        assert result.exit_code == 2
        said = " ".join(result.output.split())
        assert f"{broken}:3: invalid tool 'x': input_schema" in result.output.replace("\n", "")
        assert said.endswith("(nothing was imported)")
        assert _count(database, tenant_id) == 0

    @pytest.mark.parametrize(
        ("line", "message"),
        [
            (b'{"id": "x", "core": "false"}', "core: must be true or false"),
            (b'{"id": "x", "examples": "find three"}', "examples"),
            (b'{"id": "x", "description": "caf\xe9"}', "not UTF-8 text"),
            (b'{"id": "x", "description": {"k": 1}}', "description: must be a string"),
            (b'{"id": "x", "description": "' + b"w" * 10_001 + b'"}', "at most 10000 characters"),
            (b'{"id": "fine"}', "duplicate tool id 'fine' (line 1)"),
        ],
    )
    def test_a_field_of_the_wrong_type_is_named_not_coerced(
        self, database: Database, tmp_path: Path, line: bytes, message: str
    ) -> None:
        tenant_id = _tenant(runner.invoke(app, ["tenant", "create", "acme"]).output)
        broken = tmp_path / "tools.jsonl"
        broken.write_bytes(b'{"id": "fine"}\n' + line + b"\n")
        result = runner.invoke(app, ["tools", "import", str(broken), "--tenant", str(tenant_id)])
        assert result.exit_code == 2, result.output
        output = "".join(result.output.split())  # rich wraps long lines, even inside a path
        assert f"{broken}:2:" in output
        assert "".join(message.split()) in output
        assert _count(database, tenant_id) == 0

    def test_existing_tools_keep_what_the_file_does_not_name(
        self, client: TestClient, database: Database, tmp_path: Path
    ) -> None:
        """Re-importing a file, or a dotted id that names an existing tool, made a restricted
        tool public (the public format has no permission field)."""
        created = runner.invoke(app, ["tenant", "create", "acme"]).output
        tenant_id = _tenant(created)
        match = re.search(r"admin key \(shown once\): (tsk_\S+)", created)
        assert match
        admin = {"Authorization": f"Bearer {match[1]}"}
        assert client.post("/admin/v1/permissions", json={"name": "orders.read"}, headers=admin)
        restricted = {
            "name": "order_status",
            "description": "Where is the order",
            "required_permission": "orders.read",
            "core": True,
            "examples": ["where is my parcel"],
        }
        assert client.post("/admin/v1/tools", json=restricted, headers=admin).status_code == 201
        catalog = tmp_path / "tools.jsonl"
        catalog.write_text(
            json.dumps({"id": "order.status", "description": "Shipping status of an order"})
            + "\n"
            + json.dumps({"id": "refund", "description": "Refund", "required_permission": None})
            + "\n"
        )
        result = runner.invoke(app, ["tools", "import", str(catalog), "--tenant", str(tenant_id)])
        assert result.exit_code == 0, result.output
        assert "1 created, 1 updated, 0 unchanged" in result.output
        assert "1 existing tool(s) kept" in result.output
        tools = {t["name"]: t for t in client.get("/admin/v1/tools", headers=admin).json()["items"]}
        status = tools["order_status"]
        assert status["description"] == "Shipping status of an order"
        assert (status["required_permission"], status["core"], status["examples"]) == (
            "orders.read",
            True,
            ["where is my parcel"],
        )
        # A field the file does name wins, an explicit null included.
        catalog.write_text(
            json.dumps(
                {
                    "id": "order.status",
                    "description": "Shipping status",
                    "required_permission": None,
                }
            )
            + "\n"
        )
        result = runner.invoke(app, ["tools", "import", str(catalog), "--tenant", str(tenant_id)])
        assert "0 created, 1 updated, 0 unchanged" in result.output
        status = client.get(f"/admin/v1/tools/{status['id']}", headers=admin).json()
        assert (status["required_permission"], status["core"]) == (None, True)

    def test_an_unknown_permission_is_named_before_anything_is_written(
        self, database: Database, tmp_path: Path
    ) -> None:
        tenant_id = _tenant(runner.invoke(app, ["tenant", "create", "acme"]).output)
        catalog = _three_tools_then_one_requiring(tmp_path, "nope.x")
        result = runner.invoke(
            app, ["tools", "import", str(catalog), "--tenant", str(tenant_id), "--batch", "1"]
        )
        assert result.exit_code == 2
        said = "".join(result.output.split())  # rich wraps long lines, even inside a path
        expected = f"{catalog}:4: tool 't3': required_permission: unknown permission 'nope.x'"
        assert "".join(expected.split()) in said
        assert "nothingwasimported" in said
        assert _count(database, tenant_id) == 0

    def test_a_refused_batch_is_named_with_what_was_imported_before_it(
        self, database: Database, tmp_path: Path
    ) -> None:
        tenant_id = _tenant(runner.invoke(app, ["tenant", "create", "acme"]).output)
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            access.reserved_permission(session, tenant_id, "mcp.review")
        catalog = _three_tools_then_one_requiring(tmp_path, "mcp.review")
        result = runner.invoke(
            app, ["tools", "import", str(catalog), "--tenant", str(tenant_id), "--batch", "2"]
        )
        assert result.exit_code == 2
        said = "".join(result.output.split())  # rich wraps long lines, even inside a path
        assert "".join(f"{catalog}:4: tool 't3': required_permission:".split()) in said
        done = "the 2 tool(s) before it were imported; this batch and the rest were not"
        assert "".join(done.split()) in said
        assert _count(database, tenant_id) == 2

    def test_a_missing_file_is_named(self) -> None:
        tenant_id = _tenant(runner.invoke(app, ["tenant", "create", "acme"]).output)
        result = runner.invoke(
            app, ["tools", "import", "/nope/tools.jsonl", "--tenant", str(tenant_id)]
        )
        assert result.exit_code == 2
        assert "/nope/tools.jsonl: cannot read" in result.output

    def test_a_line_nested_past_the_recursion_limit_is_named(self, tmp_path: Path) -> None:
        tenant_id = _tenant(runner.invoke(app, ["tenant", "create", "acme"]).output)
        deep = tmp_path / "deep.jsonl"
        deep.write_text('{"id": "a"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
        result = runner.invoke(app, ["tools", "import", str(deep), "--tenant", str(tenant_id)])
        assert result.exit_code == 2, result.output
        said = "".join(result.output.split())  # rich wraps long lines, even inside a path
        assert "".join(f"{deep}:2: not valid JSON (nested too deeply)".split()) in said


@pytest.mark.usefixtures("env")
class TestMigrate:
    def test_migrate_is_idempotent_at_head(self) -> None:
        result = runner.invoke(app, ["migrate"])
        assert result.exit_code == 0, result.output
        assert "migrated to head" in result.output


def test_up_reloads_the_demo_when_its_tenant_was_deleted(
    database: Database, tmp_path: Path
) -> None:
    from toolsift.cli.run import _demo_loaded
    from toolsift.demo.loader import load_demo
    from toolsift.tenants.service import tenant as tenant_service

    state = tmp_path / "demo.json"
    assert not _demo_loaded(database, state)
    demo = load_demo(database, pepper=PEPPER)
    state.write_text(json.dumps(demo))
    assert _demo_loaded(database, state)
    tenant_id = UUID(demo["tenant_id"])
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        tenant_service.delete(session)
    assert not _demo_loaded(database, state)


def _tenant_and_agent_key() -> tuple[UUID, str]:
    """A tenant and an agent key, made with the CLI."""
    tenant_id = _tenant(runner.invoke(app, ["tenant", "create", "acme"]).output)
    made = runner.invoke(app, ["key", "create", "--tenant", str(tenant_id), "--name", "bot"])
    key = re.search(r"agent key \(shown once\): (tsk_\S+)", made.output)
    assert key, made.output
    return tenant_id, key[1]


@pytest.mark.usefixtures("env")
class TestSelect:
    def test_selects_and_says_the_api_s_error_in_one_line(
        self, client: TestClient, settings: Settings, database: Database
    ) -> None:
        _, key = _tenant_and_agent_key()
        with served(create_app(settings, database)) as url:
            options = ["--key", key, "--url", url]
            ok = runner.invoke(app, ["select", "where is my order", *options, "--raw"])
            assert ok.exit_code == 0, ok.output
            assert json.loads(ok.output)["tools"] == []
            bad = runner.invoke(app, ["select", "where is my order", *options, "--format", "xml"])
        assert bad.exit_code == 2
        said = " ".join(bad.output.split())
        assert said.startswith("error: HTTP 422: format: Input should be"), said
        assert "{" not in said

    def test_prints_each_format_s_names_and_descriptions(
        self, client: TestClient, settings: Settings, database: Database
    ) -> None:
        tenant_id, key = _tenant_and_agent_key()
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            tool = ToolCreate(name="order_status", description="Shipping status of an order")
            tool_service.upsert(session, tenant_id, [tool])
        with served(create_app(settings, database)) as url:
            options = ["--key", key, "--url", url, "--mode", "bm25"]
            shown = {
                fmt: runner.invoke(app, ["select", "order status", *options, "--format", fmt])
                for fmt in ("anthropic", "openai", "openai_responses", "anthropic_tool_reference")
            }
        for fmt, result in shown.items():
            assert result.exit_code == 0, result.output
            assert "order_status" in result.output
            assert re.search(r"bm25, [0-9.]+ ms", " ".join(result.output.split()))
            assert re.search(r"^selection [0-9a-f-]{36}$", result.output, re.M), result.output
            described = "Shipping status of an order" in result.output
            assert described == (fmt != "anthropic_tool_reference"), (fmt, result.output)
            assert ("description" in result.output) == described


def _invoke_with(monkeypatch: pytest.MonkeyPatch, args: list[str], **env: str) -> Result:
    """Run a command under settings read from these environment variables."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    try:
        return runner.invoke(app, args)
    finally:
        get_settings.cache_clear()


class TestPrepareModel:
    def test_builds_the_default_model_into_the_configured_cache(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        env = {"TOOLSIFT_EMBEDDING_CACHE_DIR": str(tmp_path)}
        result = _invoke_with(monkeypatch, ["prepare-model"], **env)
        assert result.exit_code == 0, result.output
        (built,) = tmp_path.glob("*.onnx")
        assert built.name.startswith("all-MiniLM-L6-v2-int8-dynamic-")
        assert built.stat().st_size
        assert "all-MiniLM-L6-v2-int8-dynamic" in result.output

    def test_fails_when_the_cache_cannot_be_written(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # An image build must stop here, not carry on with a copy deleted at exit.
        (tmp_path / "file").write_text("")
        env = {"TOOLSIFT_EMBEDDING_CACHE_DIR": str(tmp_path / "file" / "cache")}
        result = _invoke_with(monkeypatch, ["prepare-model"], **env)
        assert result.exit_code == 2, result.output
        assert "TOOLSIFT_EMBEDDING_CACHE_DIR" in result.output

    def test_refuses_a_backend_without_a_local_model(self, monkeypatch: pytest.MonkeyPatch) -> None:
        env = {"TOOLSIFT_EMBEDDING_BACKEND": "http"}
        result = _invoke_with(monkeypatch, ["prepare-model"], **env)
        assert result.exit_code == 2
        assert "http embedding backend has no local model" in result.output


def test_up_queues_the_catalogs_another_model_serves(
    client: TestClient, database: Database, owner_conn: OwnerConn
) -> None:
    from toolsift.cli.run import reembed_other_models
    from toolsift.embedding.onnx import DEFAULT_MODEL

    from ..fixtures.factories import embed_pending, new_tenant, tool_body

    upgraded, current, empty = (new_tenant(client, database, n) for n in ("old", "new", "none"))
    for admin in (upgraded, current):
        tools = [tool_body(f"tool_{i}", f"does thing {i}") for i in range(3)]
        admin.ok(admin.put("/admin/v1/tools", {"tools": tools}))
        embed_pending(database, admin.tenant_id)
    owner_conn.execute("DELETE FROM outbox")
    # As a release before the current default left it: vectors and tenant on the old model.
    for table, column in (("tenants", "embedding_model"), ("tool_embeddings", "model")):
        key = "id" if table == "tenants" else "tenant_id"
        owner_conn.execute(
            f"UPDATE {table} SET {column} = 'all-MiniLM-L6-v2-int8' WHERE {key} = %s",
            (upgraded.tenant_id,),
        )
    assert reembed_other_models(database, DEFAULT_MODEL) == (3, 1)
    # `up` again before the worker got to them: nothing is queued twice.
    assert reembed_other_models(database, DEFAULT_MODEL) == (0, 0)
    # The admin sees why dense is out meanwhile: the API's query model is not the served one.
    status = upgraded.ok(upgraded.get("/admin/v1/embeddings"))
    assert (status["model"], status["query_model"]) == ("all-MiniLM-L6-v2-int8", DEFAULT_MODEL)
    assert status["other_models"] == {}
    assert status["pending_jobs"] == 3
    queued = owner_conn.execute("SELECT tenant_id, count(*) FROM outbox GROUP BY 1").fetchall()
    assert queued == [(upgraded.tenant_id, 3)]
    assert embed_pending(database, upgraded.tenant_id) == 3
    served = owner_conn.execute(
        "SELECT embedding_model FROM tenants WHERE id = %s", (upgraded.tenant_id,)
    ).fetchone()
    assert served == (DEFAULT_MODEL,)
    status = upgraded.ok(upgraded.get("/admin/v1/embeddings"))
    assert status["model"] == status["query_model"] == DEFAULT_MODEL
    assert empty.tenant_id not in {row[0] for row in queued}


def test_a_bad_setting_is_one_line_naming_the_variable() -> None:
    env = {**os.environ, "TOOLSIFT_EMBEDDING_ONNX_MODEL": "minilm"}
    run = subprocess.run(
        [sys.executable, "-m", "toolsift.cli", "prepare-model"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert "TOOLSIFT_EMBEDDING_ONNX_MODEL: Input should be" in " ".join(run.stderr.split())
    assert "Traceback" not in run.stderr


def test_eval_refuses_an_unknown_mode_before_reading_the_dataset(tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval", str(tmp_path / "absent"), "--modes", "bm25,fuzzy"])
    assert result.exit_code == 2
    assert "unknown mode 'fuzzy'" in result.output


def test_up_warns_when_the_development_stack_is_reachable_from_other_machines() -> None:
    from toolsift.cli.run import exposure
    from toolsift.config import Settings

    development = Settings(env="development")
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert exposure(host, development, demo=True) is None
    warning = exposure("0.0.0.0", development, demo=True)
    assert warning is not None
    for said in ("0.0.0.0", "demo tenant's keys", "development pepper", "/metrics"):
        assert said in warning
    hardened = Settings(env="development", key_pepper="p" * 40, metrics_token="t" * 40)
    warning = exposure("192.0.2.10", hardened, demo=False)
    assert warning is not None
    for unsaid in ("demo", "pepper", "/metrics"):
        assert unsaid not in warning
    assert exposure("toolsift.example", development, demo=False) is not None


def test_up_prints_the_servers_it_uses_without_their_passwords(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under Docker or systemd, stdout is the log: a password in DATABASE_URL or REDIS_URL
    must not be printed there, while the rest of the address still is."""
    from rich.console import Console

    from toolsift.cli import run as cli

    console = Console(record=True, width=200)
    monkeypatch.setattr(cli, "console", console)
    cli._banner(
        Settings(env="development", data_dir=tmp_path),
        "127.0.0.1",
        8000,
        "postgresql+psycopg://toolsift:pg-Secret-123@db.internal:5432/toolsift",
        "redis://:redis-Secret-456@cache.internal:6379/0",
        None,
    )
    printed = console.export_text()
    assert "pg-Secret-123" not in printed
    assert "redis-Secret-456" not in printed
    assert "postgresql://toolsift:[redacted]@db.internal:5432/toolsift" in printed
    assert "redis://:[redacted]@cache.internal:6379/0" in printed
