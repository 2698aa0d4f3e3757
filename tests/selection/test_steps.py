"""A request of several steps is also matched step by step on the dense side (migration 0033)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg.types.json import Jsonb

from tests.fixtures.factories import PEPPER, Caller, agent_key, embed_pending, tool_body
from toolsift.auth import keys
from toolsift.db import Database
from toolsift.embedding.base import EmbeddingConfig, get_backend, vector_literal
from toolsift.selection.dense import DEFAULTS
from toolsift.selection.query import build_query, steps
from toolsift.selection.schemas import SelectRequest
from toolsift.selection.service import CANDIDATE_POOL

OwnerConn = psycopg.Connection[tuple[Any, ...]]

# Four steps, each for another tool: as one vector, the request is an average of them.
PLAN = (
    "Look up tomorrow's weather forecast for Paris. Then book a table for two at an Italian"
    " restaurant. Translate the menu into German for my guest. Finally, email the details"
    " to my team."
)
TOOLS = [
    ("weather_today", "Tell the forecast for a city"),
    ("book_restaurant", "Reserve a table at a restaurant"),
    ("translate_text", "Translate a text into another language"),
    ("send_email", "Send an email message to its recipients"),
    ("order_status", "Get the shipping status of an order"),
    ("end_membership", "Stop a recurring plan and its future charges"),
    ("currency_rates", "Convert an amount between currencies"),
]


@pytest.fixture
def planner(admin: Caller, database: Database) -> Caller:
    admin.ok(admin.post("/admin/v1/permissions", {"name": "mail"}), 201)
    bodies = [tool_body(*t, permission="mail" if t[0] == "send_email" else None) for t in TOOLS]
    admin.ok(admin.put("/admin/v1/tools", {"tools": bodies}))
    embed_pending(database, admin.tenant_id)
    admin.ok(admin.post("/admin/v1/roles", {"name": "assistant", "permissions": ["mail"]}), 201)
    return agent_key(admin, ["assistant"])


def _query(content: str) -> str:
    return build_query(
        SelectRequest.model_validate({"messages": [{"role": "user", "content": content}]})
    )


def _stored(owner_conn: OwnerConn, tenant_id: object) -> dict[str, np.ndarray]:
    rows = owner_conn.execute(
        "SELECT t.name, e.embedding::text FROM tool_embeddings e JOIN tools t ON t.id = e.tool_id"
        " WHERE e.tenant_id = %s",
        (tenant_id,),
    ).fetchall()
    return {name: np.array(json.loads(vector)) for name, vector in rows}


def _similarities(texts: list[str], tools: dict[str, np.ndarray]) -> dict[str, float]:
    """Each tool's cosine similarity to the nearest of `texts`' vectors."""
    vectors = [np.array(v) for v in get_backend(EmbeddingConfig()).embed(texts)]
    return {
        name: max(
            float(np.dot(tool, v) / (np.linalg.norm(tool) * np.linalg.norm(v))) for v in vectors
        )
        for name, tool in tools.items()
    }


def _dense_scores(caller: Caller, content: str) -> dict[str, float]:
    body = caller.ok(caller.select(content, mode="dense", k=50, debug=True))
    assert body.get("steps") == (len(steps(_query(content))) or None)
    return {c["name"]: c["score"] for c in body["candidates"]}


class TestSteps:
    def test_a_tool_is_as_near_as_the_nearest_of_the_request_and_its_steps(
        self, planner: Caller, owner_conn: OwnerConn
    ) -> None:
        query = _query(PLAN)
        assert len(steps(query)) == 4
        tools = _stored(owner_conn, planner.tenant_id)
        served = _dense_scores(planner, PLAN)
        expected = _similarities([query, *steps(query)], tools)
        assert served == pytest.approx(expected, abs=1e-5)
        # Some tool is nearer to one step than to the whole request: the steps were used.
        whole = _similarities([query], tools)
        assert max(served[t] - whole[t] for t in tools) > 0.05

    def test_three_sentences_are_one_request(self, planner: Caller, owner_conn: OwnerConn) -> None:
        three = PLAN.rsplit(" Finally", 1)[0]
        query = _query(three)
        assert steps(query) == []
        tools = _stored(owner_conn, planner.tenant_id)
        assert _dense_scores(planner, three) == pytest.approx(
            _similarities([query], tools), abs=1e-5
        )

    def test_each_step_s_tool_is_served(self, planner: Caller, owner_conn: OwnerConn) -> None:
        four = {"weather_today", "book_restaurant", "translate_text", "send_email"}
        whole = _similarities([_query(PLAN)], _stored(owner_conn, planner.tenant_id))
        # The request as one vector misses one of them: the steps are what finds it.
        assert set(sorted(whole, key=lambda t: -whole[t])[:4]) != four
        for mode in ("dense", "hybrid"):
            assert set(planner.names(PLAN, mode=mode, k=4)) == four, mode

    def test_debug_output_says_how_many_steps_dense_measured(self, planner: Caller) -> None:
        def debug(content: str, mode: str) -> dict[str, Any]:
            body: dict[str, Any] = planner.ok(planner.select(content, mode=mode, debug=True))
            return body

        assert debug(PLAN, "hybrid")["steps"] == 4
        assert "steps" not in debug(PLAN, "bm25")
        assert "steps" not in planner.ok(planner.select(PLAN, mode="dense"))
        eight = " ".join(f"Then do task number {i} now." for i in range(12))
        assert debug(eight, "dense")["steps"] == 8

    def test_a_step_never_reaches_a_tool_the_caller_may_not_use(
        self, planner: Caller, admin: Caller
    ) -> None:
        unmailed = agent_key(admin, [], name="no-mail")
        for mode in ("dense", "hybrid"):
            body = unmailed.ok(unmailed.select(PLAN, mode=mode, k=50, debug=True))
            names = {c["name"] for c in body["candidates"]} | {t["name"] for t in body["tools"]}
            assert "send_email" not in names
            assert body["missing_embeddings"] == 0

    def test_the_api_embeds_the_request_and_its_steps_in_one_batch_once(
        self, planner: Caller, client: TestClient
    ) -> None:
        embedder = client.app.state.query_embedder  # type: ignore[attr-defined]
        before = embedder.stats()
        planner.ok(planner.select(PLAN, mode="dense"))
        middle = embedder.stats()
        assert middle.misses == before.misses + 5
        planner.ok(planner.select(PLAN, mode="dense"))
        assert embedder.stats().hits == middle.hits + 5
        planner.ok(planner.select(PLAN, mode="bm25"))
        assert embedder.stats().hits == middle.hits + 5

    def test_an_api_from_before_passes_no_steps_and_gets_the_request_alone(
        self, planner: Caller, owner_conn: OwnerConn, database_url: str
    ) -> None:
        """During a rolling deploy an older API calls the function with 20 arguments."""
        query = _query(PLAN)
        backend = get_backend(EmbeddingConfig())
        (vector,) = backend.embed([query])
        arguments = (
            planner.tenant_id,
            planner.extra["key_id"],
            keys.hash_key(planner.key, PEPPER),
            query,
            Jsonb(DEFAULTS),
            CANDIDATE_POOL,
            vector_literal(vector),
            backend.model,
        )
        call = (
            "SELECT toolsift_select(%s, %s, %s, NULL, gen_random_uuid(), %s, 'english', 1.2,"
            " 0.75, %s, %s, 'dense', %s::vector, %s, '{}', 50, 100000, 'anthropic',"
            " true, 0"
        )
        plain = database_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(plain) as conn:
            (older,) = conn.execute(call + ")", arguments).fetchone() or (None,)
        scores = {c["name"]: c["score"] for c in json.loads(older)["candidates"]}
        tools = _stored(owner_conn, planner.tenant_id)
        assert scores == pytest.approx(_similarities([query], tools), abs=1e-5)
        assert scores != pytest.approx(_dense_scores(planner, PLAN), abs=1e-5)
