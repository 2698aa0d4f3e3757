"""Readiness, metrics, request ids, scrubbed logs, CORS, size limits, audit, rate limits."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
import redis
from fastapi.testclient import TestClient

from toolsift.app import create_app
from toolsift.auth import keys
from toolsift.config import Settings
from toolsift.db import HOT_POOL_NAME, Database
from toolsift.embedded import EmbeddedRedis
from toolsift.ops import logging as ops_logging
from toolsift.security.audit import row_hash

from ..fixtures.factories import Caller, agent_key, new_tenant, support_catalog


def _client(settings: Settings, database: Database, **changes: object) -> TestClient:
    return TestClient(create_app(settings.model_copy(update=changes), database))


class TestHealth:
    def test_readyz_is_ok_with_database_broker_and_head(
        self, settings: Settings, database: Database, redis_server: EmbeddedRedis
    ) -> None:
        with _client(settings, database, redis_url=redis_server.url) as client:
            response = client.get("/readyz")
        assert response.status_code == 200, response.text
        assert response.json() == {
            "status": "ok",
            "checks": {"database": "ok", "migrations": "ok", "broker": "ok"},
        }

    def test_readyz_names_the_broker_when_it_is_down_and_stays_ready(
        self, settings: Settings, database: Database
    ) -> None:
        # Selects never touch Redis and jobs wait in the outbox: traffic must keep coming.
        with _client(settings, database, redis_url="redis://127.0.0.1:1/0") as client:
            response = client.get("/readyz")
        assert response.status_code == 200
        body = response.json()
        assert body["status"] == "degraded"
        assert body["checks"]["database"] == "ok"
        assert body["checks"]["broker"].startswith("unreachable")

    def test_readyz_answers_when_the_database_never_does(self, settings: Settings) -> None:
        # A listener that accepts and never speaks: a stopped postmaster, as the client sees it.
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            port = silent.getsockname()[1]
            hung = Database(f"postgresql://toolsift@127.0.0.1:{port}/none", pool_size=1)
            started = time.monotonic()
            with _client(settings, hung) as client:
                first = client.get("/readyz")
                second = client.get("/readyz")
            elapsed = time.monotonic() - started
        assert (first.status_code, second.status_code) == (503, 503)
        assert first.json()["checks"]["database"] == "unreachable (timeout)"
        assert elapsed < 20

    def test_readyz_names_the_database_when_it_is_down(self, settings: Settings) -> None:
        dead = Database("postgresql://toolsift@127.0.0.1:1/none", pool_size=1)
        with _client(settings, dead) as client:
            response = client.get("/readyz")
        dead.dispose()
        assert response.status_code == 503
        assert response.json()["checks"]["database"].startswith("unreachable")

    def test_a_select_on_a_connection_that_died_is_a_503_and_the_next_ones_answer(
        self, support_agent: Caller, owner_conn: psycopg.Connection[tuple[object, ...]]
    ) -> None:
        assert support_agent.select("where is my order", mode="bm25").status_code == 200
        # Every connection of the select pool dies, as in a database restart.
        killed = owner_conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s AND datname = current_database()",
            (HOT_POOL_NAME,),
        ).fetchone()
        assert killed is not None
        assert killed[0] >= 1
        failed = support_agent.select("where is my order", mode="bm25")
        assert failed.status_code == 503, failed.text
        assert failed.headers["retry-after"] == "1"
        assert failed.json()["error"]["code"] == "database_unavailable"
        # The pool was drained, not just the one connection: no restart, no second failure.
        statuses = [support_agent.select("where is my order", mode="bm25").status_code]
        statuses += [support_agent.select("refund", mode="bm25").status_code for _ in range(5)]
        assert statuses == [200] * 6

    def test_metrics_expose_requests_select_latency_and_gauges(
        self, client: TestClient, support_agent: Caller
    ) -> None:
        assert support_agent.select("where is my order", mode="bm25").status_code == 200
        text = client.get("/metrics").text
        assert 'toolsift_select_duration_seconds_count{mode="bm25",status="200"}' in text
        assert 'method="POST",route="/v1/select",status="200"' in text
        assert "toolsift_database_up 1.0" in text
        assert "toolsift_tools_live 6.0" in text
        assert "toolsift_tenants 1.0" in text
        # No worker has run: a tenant that serves no model yet still counts as behind.
        assert "toolsift_embeddings_pending 6.0" in text
        lag = next(line for line in text.splitlines() if line.startswith("toolsift_embedding_lag"))
        assert float(lag.split()[-1]) > 0


class TestMetricsAccess:
    def test_a_configured_token_is_required(self, settings: Settings, database: Database) -> None:
        with _client(settings, database, metrics_token="scrape-secret") as client:
            refused = [
                client.get("/metrics"),
                client.get("/metrics", headers={"Authorization": "Bearer scrape-secreT"}),
                client.get("/metrics", headers={"Authorization": "Basic scrape-secret"}),
                client.get("/metrics", headers={"Authorization": "Bearer "}),
            ]
            allowed = client.get("/metrics", headers={"Authorization": "Bearer scrape-secret"})
        for response in refused:
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "unauthenticated"
            assert response.headers["www-authenticate"] == "Bearer"
            assert "toolsift_" not in response.text
        assert allowed.status_code == 200
        assert "toolsift_database_up" in allowed.text

    def test_without_a_token_metrics_are_open(self, client: TestClient) -> None:
        assert client.get("/metrics").status_code == 200


class TestRequests:
    def test_request_id_is_kept_or_made(self, client: TestClient) -> None:
        kept = client.get("/healthz", headers={"X-Request-ID": "abc-123"})
        assert kept.headers["x-request-id"] == "abc-123"
        made = client.get("/healthz", headers={"X-Request-ID": "bad id\n"})
        assert len(made.headers["x-request-id"]) == 32
        assert client.get("/nope").headers["x-request-id"]

    def test_secrets_never_reach_the_logs(
        self, settings: Settings, database: Database, support_agent: Caller, admin: Caller
    ) -> None:
        stream = io.StringIO()
        with _client(settings, database) as client:
            ops_logging.configure(fmt="json", secrets=[settings.key_pepper], stream=stream)
            logging.getLogger("toolsift.test").warning(
                "leak %s and Bearer %s", support_agent.key, admin.key
            )
            headers = {"Authorization": f"Bearer {admin.key}", "X-Request-ID": "rid-1"}
            client.post("/admin/v1/keys", json={"name": admin.key}, headers=headers)
            client.post("/admin/v1/permissions", content=b"{" + admin.key.encode(), headers=headers)
            client.get(f"/admin/v1/tools?after={admin.key}", headers=headers)
            client.post("/v1/select", json={"messages": [{"role": "user", "content": admin.key}]},
                        headers={"Authorization": f"Bearer {support_agent.key}"})  # fmt: skip
        logged = stream.getvalue()
        assert '"request_id": "rid-1"' in logged
        assert "[redacted]" in logged
        for secret in (admin.key, support_agent.key, settings.key_pepper):
            assert secret not in logged
            assert secret.split("_", 3)[-1] not in logged

    @pytest.mark.parametrize(
        "secret", ['pepper"with-quote', "pepper\\with-backslash", "pépper-ünïcode"]
    )
    def test_a_secret_json_escapes_is_redacted_too(self, secret: str) -> None:
        stream = io.StringIO()
        try:
            ops_logging.configure(fmt="json", secrets=[secret], stream=stream)
            logging.getLogger("toolsift.test").warning("the pepper is %s", secret,
                                                       extra={"detail": {"set": [secret]}})  # fmt: skip
        finally:
            ops_logging.configure(fmt="json")
        entry = json.loads(stream.getvalue())
        assert entry["message"] == "the pepper is [redacted]"
        assert entry["detail"] == {"set": ["[redacted]"]}

    def test_requests_are_logged_once_by_the_app_not_again_by_uvicorn(
        self, settings: Settings, database: Database
    ) -> None:
        stream = io.StringIO()
        with _client(settings, database) as client:
            ops_logging.configure(fmt="json", stream=stream)
            client.get("/admin/v1/tools?after=7")
        # uvicorn logs access whenever its logger or an ancestor has a handler.
        assert not logging.getLogger("uvicorn.access").hasHandlers()
        access = [line for line in stream.getvalue().splitlines() if '"toolsift.access"' in line]
        assert len(access) == 1
        assert "/admin/v1/tools" in access[0]

    def test_cors_is_off_by_default_and_on_when_configured(
        self, settings: Settings, database: Database
    ) -> None:
        preflight = {
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization",
        }
        with _client(settings, database) as client:
            response = client.options("/v1/select", headers=preflight)
            assert "access-control-allow-origin" not in response.headers
        with _client(settings, database, cors_origins=["https://app.example"]) as client:
            response = client.options("/v1/select", headers=preflight)
            assert response.headers["access-control-allow-origin"] == "https://app.example"

    def test_query_strings_are_bounded(self, client: TestClient, admin: Caller) -> None:
        response = admin.get("/admin/v1/tools?after=1&x=" + "a" * 9000)
        assert response.status_code == 414
        assert response.json()["error"]["field"] == "query"


class TestAudit:
    def test_every_admin_change_is_recorded_with_actor_and_hashes(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        tool_id = catalog["order_status"]
        admin.ok(admin.patch(f"/admin/v1/tools/{tool_id}", {"description": "Where is it now"}))
        admin.ok(admin.delete(f"/admin/v1/roles/{catalog['billing']}/permissions/billing.refund"))
        items = admin.ok(admin.get("/admin/v1/audit?limit=1000"))["items"]
        assert {i["actor"] for i in items} == {"key"}
        assert all(i["actor_key_id"] for i in items)
        tables = {(i["table_name"], i["action"]) for i in items}
        assert {("tools", "insert"), ("tools", "update"), ("roles", "insert")} <= tables
        assert ("role_permissions", "delete") in tables
        trail = [i for i in reversed(items) if i["row_key"].get("id") == tool_id]
        assert trail[0]["action"] == "insert"
        assert trail[0]["before_hash"] is None
        assert trail[0]["after_hash"]
        patch = next(i for i in trail[1:] if "description" in i["changed"])
        assert patch["before_hash"]
        assert patch["after_hash"] != patch["before_hash"]

    def test_one_entry_per_tool_write(self, admin: Caller) -> None:
        """The index length is computed before the row is written: no second UPDATE entry."""
        tool = {"name": "audited_once", "description": "Count the words of a page"}
        tool_id = admin.ok(admin.post("/admin/v1/tools", tool), 201)["id"]
        admin.ok(
            admin.patch(
                f"/admin/v1/tools/{tool_id}",
                {"description": "Count every word and line of a long page"},
            )
        )
        items = admin.ok(admin.get("/admin/v1/audit?limit=1000"))["items"]
        trail = [i for i in reversed(items) if i["row_key"].get("id") == tool_id]
        assert [i["action"] for i in trail] == ["insert", "update"]
        assert {"description", "doc_length", "version"} <= set(trail[1]["changed"])

    def test_deletes_record_the_grants_they_remove(
        self, admin: Caller, catalog: dict[str, str], support_agent: Caller
    ) -> None:
        """A deleted role takes its grants and the keys' right to assert it along; a deleted
        permission takes its grants: each removed row is an entry, as if deleted by hand."""
        extra = admin.ok(admin.post("/admin/v1/permissions", {"name": "crm.export"}), 201)["id"]
        admin.ok(admin.put(f"/admin/v1/roles/{catalog['support']}/permissions/crm.export"))
        admin.ok(admin.delete(f"/admin/v1/permissions/{extra}"), 204)
        admin.ok(admin.delete(f"/admin/v1/roles/{catalog['billing']}"), 204)
        items = admin.ok(admin.get("/admin/v1/audit?limit=1000"))["items"]
        deleted = {
            (
                i["table_name"],
                tuple(sorted(kv for kv in i["row_key"].items() if kv[0] != "tenant_id")),
            )
            for i in items
            if i["action"] == "delete"
        }
        key_id = support_agent.extra["key_id"]
        assert deleted >= {
            ("permissions", (("id", extra),)),
            ("role_permissions", (("permission_id", extra), ("role_id", catalog["support"]))),
            ("roles", (("id", catalog["billing"]),)),
            (
                "role_permissions",
                (("permission_id", catalog["billing.refund"]), ("role_id", catalog["billing"])),
            ),
            ("api_key_roles", (("key_id", key_id), ("role_id", catalog["billing"]))),
        }

    def test_keys_the_tenant_and_a_tool_deleted_and_revived_are_recorded(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        """Each kind of change an audit must not miss, as (table, action, changed columns)."""
        key_id = admin.ok(admin.post("/admin/v1/keys", {"name": "ops", "scope": "admin"}), 201)[
            "id"
        ]
        admin.ok(admin.delete(f"/admin/v1/keys/{key_id}"))
        admin.ok(admin.patch("/admin/v1/tenant", {"name": "acme-renamed"}))
        tool_id = catalog["refund_policy"]
        admin.ok(admin.delete(f"/admin/v1/tools/{tool_id}"), 204)
        revived = {"name": "refund_policy", "description": "Explain the refund policy again"}
        admin.ok(admin.put("/admin/v1/tools", {"tools": [revived]}))
        items = admin.ok(admin.get("/admin/v1/audit?limit=1000"))["items"]

        def trail(table: str, row_id: str) -> list[tuple[str, set[str]]]:
            return [
                (i["action"], set(i["changed"]))
                for i in reversed(items)
                if i["table_name"] == table and i["row_key"].get("id") == row_id
            ]

        keys = trail("api_keys", key_id)
        assert [action for action, _ in keys] == ["insert", "update"]
        assert "revoked_at" in keys[1][1]
        assert any(
            i["table_name"] == "tenants" and i["action"] == "update" and "name" in i["changed"]
            for i in items
        )
        tool = trail("tools", tool_id)
        assert [action for action, _ in tool] == ["insert", "update", "update"]
        assert "deleted_at" in tool[1][1]
        assert {"deleted_at", "description", "version"} <= tool[2][1]

    @pytest.mark.parametrize("force", [False, True])
    def test_a_reindex_request_is_recorded(
        self, admin: Caller, catalog: dict[str, str], force: bool
    ) -> None:
        """It writes outbox rows, which the audit hook does not see, and with `force` it has
        the workers recompute every vector: who asked is on record."""
        path = "/admin/v1/embeddings/reindex" + ("?force=true" if force else "")
        queued = admin.ok(admin.post(path), 202)["queued"]
        items = admin.ok(admin.get("/admin/v1/audit?limit=1000"))["items"]
        [entry] = [i for i in items if i["table_name"] == "embedding_reindex"]
        key_id = str(uuid.UUID(admin.key.split("_")[2]))  # tsk_<tenant>_<key id>_<secret>
        assert (entry["actor"], entry["actor_key_id"]) == ("key", key_id)
        assert (entry["action"], entry["row_key"], entry["changed"]) == (
            "insert", {"force": force}, ["queued"],
        )  # fmt: skip
        assert entry["after_hash"] == row_hash({"force": force, "queued": queued})

    def test_agent_traffic_is_not_audited(self, admin: Caller, support_agent: Caller) -> None:
        before = len(admin.ok(admin.get("/admin/v1/audit?limit=1000"))["items"])
        support_agent.select("where is my order")
        assert len(admin.ok(admin.get("/admin/v1/audit?limit=1000"))["items"]) == before

    def test_bad_cursor_names_the_field(self, admin: Caller) -> None:
        response = admin.get("/admin/v1/audit?before=nonsense")
        assert response.status_code == 422
        assert response.json()["error"]["field"] == "before"


class TestProductionSecrets:
    @pytest.mark.parametrize(
        ("changes", "named"),
        [
            ({"key_pepper": "changethis-development-pepper"}, "TOOLSIFT_KEY_PEPPER"),
            ({"operator_key": "hunter2"}, "TOOLSIFT_OPERATOR_KEY must be at least 32"),
            ({"metrics_token": "short"}, "TOOLSIFT_METRICS_TOKEN must be at least 32"),
            ({"key_pepper": "x"}, "TOOLSIFT_KEY_PEPPER must be at least 32"),
            ({"secret_key": "s3cret"}, "TOOLSIFT_SECRET_KEY must be at least 32"),
        ],
    )
    def test_guessable_secrets_stop_a_production_server(
        self, settings: Settings, database: Database, changes: dict[str, str], named: str
    ) -> None:
        production = {"env": "production", "key_pepper": "p" * 40, "operator_key": "o" * 32}
        production |= changes
        with pytest.raises(ValueError, match=named), _client(settings, database, **production):
            pass

    def test_long_secrets_serve(self, settings: Settings, database: Database) -> None:
        production = {"env": "production", "key_pepper": "p" * 40, "operator_key": "o" * 32}
        with _client(settings, database, **production) as client:
            assert client.get("/healthz").status_code == 200


class TestRateLimits:
    def test_429_with_retry_after_then_fail_open_without_redis(
        self, settings: Settings, database: Database, tmp_path: Path
    ) -> None:
        server = EmbeddedRedis(tmp_path / "redis")
        url = server.start()
        try:
            with _client(settings, database, redis_url=url, rate_limit_agent=3) as client:
                admin = new_tenant(client, database, "limited")
                support_catalog(admin)
                agent = agent_key(admin, ["support"])
                statuses = [agent.select("where is my order").status_code for _ in range(5)]
                assert statuses == [200, 200, 200, 429, 429]
                refused = agent.select("where is my order")
                assert int(refused.headers["retry-after"]) >= 1
                assert refused.json()["error"]["code"] == "rate_limited"
                # Another key has its own budget.
                other = agent_key(admin, ["support"], name="other")
                assert other.select("where is my order").status_code == 200
                server.stop()
                assert [agent.select("order").status_code for _ in range(3)] == [200] * 3
        finally:
            server.stop()

    def test_mcp_requests_share_the_key_s_budget_and_redis_never_holds_its_hash(
        self, settings: Settings, database: Database, redis_server: EmbeddedRedis
    ) -> None:
        with _client(settings, database, redis_url=redis_server.url, rate_limit_agent=3) as client:
            admin = new_tenant(client, database, "limited")
            support_catalog(admin)
            agent = agent_key(admin, ["support"])
            mcp = [client.post("/mcp", json={}, headers=agent.headers) for _ in range(2)]
            assert [r.status_code for r in mcp] != [429, 429]
            assert agent.select("where is my order").status_code == 200
            refused = client.post("/mcp", json={}, headers=agent.headers)
            assert refused.status_code == 429
            assert int(refused.headers["retry-after"]) >= 1
            assert refused.json()["error"]["code"] == "rate_limited"
        key_hash = keys.hash_key(agent.key, settings.key_pepper)
        names = [k.decode() for k in redis.Redis.from_url(redis_server.url).keys("*")]
        assert any(n.startswith("toolsift:ratelimit:") for n in names)
        assert not any(key_hash in n for n in names)


def _processes_marked(mark: str) -> list[int]:
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark.encode() in environ.read_bytes():
                found.append(int(environ.parent.name))
        except OSError:
            continue  # gone, or not ours to read
    return found


def test_the_worker_logs_as_the_api_does(tmp_path: Path) -> None:
    """JSON lines through the same scrubbing handler: Redis unreachable, its URL's password
    is logged redacted, and nothing comes out in Celery's own text format."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSIFT_")}
    env |= {
        "TOOLSIFT_LOG_FORMAT": "json",
        "TOOLSIFT_REDIS_URL": "redis://:hunter2secret@127.0.0.1:1/0",
        "TOOLSIFT_DATABASE_URL": "postgresql://x@127.0.0.1:1/x",
    }
    mark = f"toolsift-test-{uuid.uuid4().hex}"
    env["TOOLSIFT_TEST_MARK"] = mark
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "toolsift.cli", "worker"], env=env, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + 60
        while '"logger": "celery' not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        worker.terminate()  # SIGTERM, as a supervisor stops it
        worker.wait(timeout=30)
    # Nothing of it is left running: the command became Celery, so Celery got the signal.
    deadline = time.monotonic() + 15
    while (left := _processes_marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], left
    records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert any(r["logger"].startswith("celery") for r in records), log.read_text()[-2000:]
    assert "hunter2secret" not in log.read_text()
    assert not re.search(r"^\[\d{4}-\d\d-\d\d", log.read_text(), re.MULTILINE)


def test_the_worker_takes_its_concurrency_from_dotenv(tmp_path: Path) -> None:
    """Like every setting, `TOOLSIFT_WORKER_CONCURRENCY` may come from `.env`; the option
    given on the command line wins."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSIFT_")}
    env |= {
        "TOOLSIFT_REDIS_URL": "redis://127.0.0.1:1/0",
        "TOOLSIFT_DATABASE_URL": "postgresql://x@127.0.0.1:1/x",
    }
    (tmp_path / ".env").write_text("TOOLSIFT_WORKER_CONCURRENCY=3\n")
    for options, expected in (([], b"3"), (["--concurrency", "2"], b"2")):
        worker = subprocess.Popen(
            [sys.executable, "-m", "toolsift.cli", "worker", *options],
            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            # The command becomes Celery (exec): its arguments are the worker's.
            cmdline = Path(f"/proc/{worker.pid}/cmdline")
            deadline = time.monotonic() + 60
            while b"celery" not in cmdline.read_bytes() and time.monotonic() < deadline:
                time.sleep(0.1)
            arguments = cmdline.read_bytes().split(b"\0")
        finally:
            worker.terminate()
            worker.wait(timeout=30)
        assert arguments[arguments.index(b"--concurrency") + 1] == expected


@pytest.mark.parametrize("command", [["worker"], ["beat"]])
def test_the_worker_and_beat_say_what_is_not_set(command: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSIFT_")}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "toolsift.cli", *command],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "is not set" in done.stderr


@pytest.mark.parametrize("command", [["migrate"], ["tenant", "create", "acme"]])
def test_a_database_that_does_not_answer_is_one_line(command: list[str]) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSIFT_")}
    env["TOOLSIFT_DATABASE_URL"] = f"postgresql://postgres:hunter2@127.0.0.1:{port}/toolsift"
    done = subprocess.run(
        [sys.executable, "-m", "toolsift.cli", *command],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert said.startswith("error: the database did not answer: connection failed:"), said
    assert f"port {port} failed" in said
    assert "Traceback" not in said
    assert "hunter2" not in said


def test_ping_finds_the_embedded_redis_and_names_the_broker_it_cannot_reach(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSIFT_")}
    env.pop("REDIS_URL", None)
    env["TOOLSIFT_DATA_DIR"] = str(tmp_path)

    def ping(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "toolsift.cli", "ping", "--broker-only", "--timeout", "2"],
            env={**env, **extra}, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    nothing = ping()
    assert nothing.returncode == 2
    assert f"no embedded Redis runs in {tmp_path}" in " ".join(nothing.stderr.split())
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    down = ping(TOOLSIFT_REDIS_URL=f"redis://:hunter2@127.0.0.1:{port}/0")
    assert down.returncode == 2
    said = " ".join(down.stderr.split())
    assert f"broker unreachable at redis://:**@127.0.0.1:{port}/0" in said
    assert "hunter2" not in said
    server = EmbeddedRedis(tmp_path / "redis")  # where `toolsift up` keeps it
    server.start()
    try:
        up = ping()
        assert up.returncode == 0, up.stderr
        assert "broker ok" in up.stdout
    finally:
        server.stop()


def test_the_worker_takes_its_command_s_level_and_keeps_per_task_lines_for_debug() -> None:
    from workers import celery_app

    root = logging.getLogger()
    before = root.level, [logging.getLogger(n).level for n in celery_app._PER_TASK_LOGGERS]
    try:
        celery_app._logging(loglevel=logging.WARNING)  # `toolsift up` starts it so
        assert root.level == logging.WARNING
        celery_app._logging(loglevel="INFO")
        assert root.level == logging.INFO
        assert all(
            logging.getLogger(n).level == logging.WARNING for n in celery_app._PER_TASK_LOGGERS
        )
    finally:
        root.setLevel(before[0])
        for name, level in zip(celery_app._PER_TASK_LOGGERS, before[1], strict=True):
            logging.getLogger(name).setLevel(level)


def test_a_deadlock_victim_is_a_503_that_says_retry(database_url: str) -> None:
    """A real deadlock between two transactions; its loser, as the handler answers it."""
    import asyncio
    import json
    import threading

    import psycopg
    from sqlalchemy.exc import OperationalError

    from toolsift.app import _database_error

    plain = database_url.replace("postgresql+psycopg://", "postgresql://")
    errors: list[BaseException] = []
    with psycopg.connect(plain) as first, psycopg.connect(plain) as second:
        first.execute("SELECT pg_advisory_xact_lock(1)")
        second.execute("SELECT pg_advisory_xact_lock(2)")

        def cross(conn: psycopg.Connection[tuple[object, ...]], key: int) -> None:
            try:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
            except psycopg.Error as error:
                errors.append(error)
                conn.rollback()

        other = threading.Thread(target=cross, args=(first, 2))
        other.start()
        cross(second, 1)
        other.join(timeout=30)
    assert [type(e) for e in errors] == [psycopg.errors.DeadlockDetected]
    wrapped = OperationalError("SELECT pg_advisory_xact_lock", None, errors[0])
    response = asyncio.run(_database_error(None, wrapped))  # type: ignore[arg-type]
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert json.loads(bytes(response.body))["error"]["code"] == "conflict_retry"


@pytest.mark.parametrize(
    ("embedding", "said"),
    [
        ({"TOOLSIFT_EMBEDDING_BACKEND": "http"}, "needs embedding_http_url"),
        ({"TOOLSIFT_EMBEDDING_DIMENSION": "768"}, "yields 384"),
    ],
)
def test_the_worker_refuses_an_embedding_setup_that_cannot_work(
    embedding: dict[str, str], said: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSIFT_")}
    env |= {
        "TOOLSIFT_REDIS_URL": "redis://127.0.0.1:1/0",
        "TOOLSIFT_DATABASE_URL": "postgresql://x@127.0.0.1:1/x",
        **embedding,
    }
    done = subprocess.run(
        [sys.executable, "-m", "toolsift.cli", "worker"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr


@pytest.mark.parametrize(
    ("env", "setting", "allowed"),
    [
        ("development", None, True),
        ("testing", None, True),
        ("production", None, False),
        ("production", True, True),
        ("development", False, False),
    ],
)
def test_mcp_sources_reach_private_networks_except_in_production(
    env: str, setting: bool | None, allowed: bool
) -> None:
    settings = Settings(env=env, mcp_private_networks=setting)  # type: ignore[arg-type]
    assert settings.mcp_private_networks_allowed is allowed
