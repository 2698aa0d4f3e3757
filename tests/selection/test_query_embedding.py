"""A select's query embedding against an embedding server that hangs: BM25 serves on time,
and nothing else in the API waits for it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.fixtures.factories import PEPPER, agent_key, embed_pending, new_tenant, tool_body
from toolsift.app import create_app
from toolsift.config import Settings
from toolsift.db import Database

HANG_SECONDS = 30.0
DEADLINE = 0.5


class HangingEmbeddings(ThreadingHTTPServer):
    """`POST /v1/embeddings` that answers nothing for HANG_SECONDS; counts its requests."""

    daemon_threads = True

    def __init__(self) -> None:
        self.requests = 0
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                server.requests += 1
                server.release.wait(HANG_SECONDS)
                self.send_response(503)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


@pytest.fixture
def hanging() -> Iterator[HangingEmbeddings]:
    server = HangingEmbeddings()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def slow_client(
    database_url: str, database: Database, hanging: HangingEmbeddings
) -> Iterator[TestClient]:
    settings = Settings(
        env="testing",
        database_url=database_url,
        key_pepper=PEPPER,
        embedding_backend="http",
        embedding_http_url=hanging.url,
        embedding_query_timeout=DEADLINE,
    )
    with TestClient(create_app(settings, database)) as test_client:
        yield test_client


def test_a_hanging_embedding_server_costs_a_select_its_deadline_not_its_retries(
    slow_client: TestClient, database: Database, hanging: HangingEmbeddings
) -> None:
    admin = new_tenant(slow_client, database, "acme")
    admin.ok(admin.post("/admin/v1/tools", tool_body("order_status", "Where an order is")), 201)
    agent_key = admin.ok(
        admin.post("/admin/v1/keys", {"name": "a", "scope": "agent", "roles": []}), 201
    )["secret"]
    headers = {"Authorization": f"Bearer {agent_key}"}
    body = {"messages": [{"role": "user", "content": "where is my order"}], "mode": "hybrid"}

    answers: list[Any] = []

    def select(content: str) -> None:
        request = {**body, "messages": [{"role": "user", "content": content}]}
        answers.append(slow_client.post("/v1/select", json=request, headers=headers))

    started = time.monotonic()
    selects = [threading.Thread(target=select, args=(f"where is my order {i}",)) for i in range(8)]
    for thread in selects:
        thread.start()
    health = slow_client.get("/healthz")
    tenant = slow_client.get("/admin/v1/tenant", headers=admin.headers)
    for thread in selects:
        thread.join(timeout=HANG_SECONDS)
    elapsed = time.monotonic() - started

    # Far below the server's 30 s hang (and the worker's retries): each select gave up at its
    # deadline, or did not ask while the embedder rested after the first failure.
    assert elapsed < HANG_SECONDS / 3, elapsed
    assert (health.status_code, tenant.status_code) == (200, 200)
    assert len(answers) == 8
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert [t["name"] for t in answer.json()["tools"]] == ["order_status"]
    # One try per select at most, never a retry.
    assert hanging.requests <= 8


def test_a_select_whose_query_was_not_embedded_counts_every_tool_missing(
    slow_client: TestClient, database: Database
) -> None:
    """BM25 served alone although every tool has a vector: the answer says dense scored none."""
    admin = new_tenant(slow_client, database, "acme")
    for name in ("order_status", "refund_policy"):
        admin.ok(admin.post("/admin/v1/tools", tool_body(name, "About an order")), 201)
    embed_pending(database, admin.tenant_id)
    agent = agent_key(admin, [])
    for mode in ("hybrid", "dense"):
        answer = agent.ok(agent.select("where is my order", mode=mode))
        assert answer["missing_embeddings"] == 2, mode
    assert "missing_embeddings" not in agent.ok(agent.select("where is my order", mode="bm25"))


def test_stored_vectors_of_another_dimension_turn_dense_off_not_the_select(
    client: TestClient, database: Database, owner_conn: Any
) -> None:
    """A model's dimension changed under the same name: pgvector cannot compare the two, and
    the select answers from BM25 instead of failing with a 500."""
    from tests.fixtures.factories import agent_key, embed_pending

    admin = new_tenant(client, database, "acme")
    for name in ("order_status", "refund_policy"):
        admin.ok(admin.post("/admin/v1/tools", tool_body(name, f"The {name} tool")), 201)
    embed_pending(database, admin.tenant_id)
    owner_conn.execute(
        "UPDATE tool_embeddings SET embedding = '[1,2,3]', dimension = 3 WHERE tool_id ="
        " (SELECT id FROM tools WHERE name = 'refund_policy' AND tenant_id = %s)",
        (admin.tenant_id,),
    )
    agent = agent_key(admin, [])
    for mode in ("dense", "hybrid"):
        response = agent.select("order status", mode=mode)
        assert response.status_code == 200, response.text
    assert agent.names("order status", mode="hybrid") == ["order_status"]


class FixedEmbeddings(ThreadingHTTPServer):
    """An OpenAI-compatible `/v1/embeddings` answering one fixed 384-d vector per input."""

    daemon_threads = True

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                import json

                length = int(self.headers["Content-Length"])
                inputs = json.loads(self.rfile.read(length))["input"]
                data = [{"index": i, "embedding": [1.0] * 384} for i in range(len(inputs))]
                body = json.dumps({"data": data, "model": "another-model"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_a_query_of_another_model_than_the_tenant_serves_counts_every_tool_missing(
    database_url: str, database: Database, client: TestClient
) -> None:
    """The API embeds with a new model while the tenant still serves the old one: dense can
    score nothing, and the answer says so instead of `missing_embeddings: 0`."""
    from tests.fixtures.factories import agent_key, embed_pending

    admin = new_tenant(client, database, "acme")
    for name in ("order_status", "refund_policy"):
        admin.ok(admin.post("/admin/v1/tools", tool_body(name, f"The {name} tool")), 201)
    embed_pending(database, admin.tenant_id)  # every tool has a vector of the served model
    agent = agent_key(admin, [])
    served = agent.ok(agent.select("order status", mode="hybrid"))
    assert served["missing_embeddings"] == 0

    embeddings = FixedEmbeddings()
    threading.Thread(target=embeddings.serve_forever, daemon=True).start()
    settings = Settings(
        env="testing",
        database_url=database_url,
        key_pepper=PEPPER,
        embedding_backend="http",
        embedding_http_url=f"http://127.0.0.1:{embeddings.server_address[1]}/v1",
        embedding_http_model="another-model",
    )
    try:
        with TestClient(create_app(settings, database)) as other_model:
            headers = {"Authorization": f"Bearer {agent.key}"}
            body = {"messages": [{"role": "user", "content": "order status"}], "mode": "hybrid"}
            answer = other_model.post("/v1/select", json=body, headers=headers).json()
    finally:
        embeddings.shutdown()
        embeddings.server_close()
    assert answer["missing_embeddings"] == 2
    assert [t["name"] for t in answer["tools"]] == ["order_status"]  # BM25 still serves


def test_a_key_the_database_refuses_never_gets_its_query_embedded(
    slow_client: TestClient, database: Database, hanging: HangingEmbeddings
) -> None:
    """The embedding is a dense select's costly part: a made-up key (each one a rate-limit
    bucket of its own) or an admin key is refused before any, and a real key gets one."""
    admin = new_tenant(slow_client, database, "acme")
    admin.ok(admin.post("/admin/v1/tools", tool_body("order_status", "Where an order is")), 201)
    made_up = f"tsk_{admin.tenant_id.hex}_{'0' * 32}_{'x' * 43}"
    body = {"messages": [{"role": "user", "content": "where is my order"}], "mode": "hybrid"}
    for key, status in ((made_up, 401), (admin.key, 403)):
        refused = slow_client.post(
            "/v1/select", json=body, headers={"Authorization": f"Bearer {key}"}
        )
        assert refused.status_code == status, refused.text
    assert hanging.requests == 0
    agent = agent_key(admin, [])
    assert agent.ok(agent.select("where is my order", mode="hybrid"))["tools"]
    assert hanging.requests == 1
