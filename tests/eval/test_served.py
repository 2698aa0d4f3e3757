"""`toolsift eval --url` against a served API: rate limits waited out, its key revoked."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from rich.console import Console

from tests.conftest import OPERATOR_KEY
from tests.fixtures.embedding import RefusesPoison, republish_and_run
from tests.fixtures.factories import Caller, agent_key
from tests.fixtures.served import served
from toolsift.app import create_app
from toolsift.config import Settings
from toolsift.db import Database
from toolsift.embedded import EmbeddedRedis
from toolsift.embedding.service import MAX_EMBED_REFUSALS
from toolsift.eval import client, runner
from toolsift.eval.dataset import load

TINY = Path(__file__).parent / "data" / "tiny"
OwnerConn = psycopg.Connection[tuple[Any, ...]]


@pytest.fixture
def limited_url(
    settings: Settings, database: Database, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The API on a loopback port, 3 agent requests a second."""
    redis = EmbeddedRedis(tmp_path_factory.mktemp("redis"))
    redis.start()
    limited = settings.model_copy(
        update={"redis_url": redis.url, "rate_limit_agent": 3, "rate_limit_window_seconds": 1}
    )
    try:
        with served(create_app(limited, database)) as url:
            yield url
    finally:
        redis.stop()


def test_selects_past_the_limit_wait_and_every_query_is_answered(
    limited_url: str, admin: Caller
) -> None:
    dataset = load(TINY)
    queries = [*dataset.queries, *dataset.queries]  # 10 selects at 3 a second
    agent = agent_key(admin, [])
    answered: list[int] = []
    outcomes = runner._select_all(
        limited_url,
        agent.key,
        replace(dataset, queries=queries),
        mode="bm25",
        depth=5,
        concurrency=2,
        advance=lambda: answered.append(1),
    )
    assert len(outcomes) == len(answered) == 10


def test_a_run_against_a_server_revokes_the_agent_key_it_made(
    limited_url: str, admin: Caller
) -> None:
    options = runner.Options(
        modes=("bm25",), ks=(1, 5), baselines=(), url=limited_url, admin_key=admin.key
    )
    evaluation = runner.evaluate(load(TINY), options, Console(quiet=True))
    assert evaluation.results["bm25"]["recall@5"] == 1.0
    keys = {k["name"]: k for k in admin.ok(admin.get("/admin/v1/keys"))}
    assert keys["toolsift-eval"]["revoked_at"] is not None


def test_a_run_with_the_operator_key_deletes_the_tenant_it_made(
    limited_url: str, admin: Caller, owner_conn: OwnerConn
) -> None:
    before = set(owner_conn.execute("SELECT id FROM tenants").fetchall())
    options = runner.Options(
        modes=("bm25",), ks=(1, 5), baselines=(), url=limited_url, operator_key=OPERATOR_KEY
    )
    evaluation = runner.evaluate(load(TINY), options, Console(quiet=True))
    assert evaluation.results["bm25"]["recall@5"] == 1.0
    assert set(owner_conn.execute("SELECT id FROM tenants").fetchall()) == before
    made = owner_conn.execute(
        "SELECT count(*) FROM audit_log WHERE table_name = 'tenants' AND action = 'delete'"
    ).fetchone()
    assert made == (1,)


def test_the_wait_for_vectors_ends_when_the_only_tools_left_were_refused_for_good(
    limited_url: str, admin: Caller, database: Database
) -> None:
    admin.ok(admin.put("/admin/v1/tools", json={"tools": [
        {"name": "fine", "description": "a tool"},
        {"name": "long", "description": "poison: too long for the model"},
    ]}))  # fmt: skip
    for _ in range(MAX_EMBED_REFUSALS):
        republish_and_run(database, RefusesPoison())
    waiting = client.Admin(limited_url, admin.key)
    try:
        status = waiting.wait_for_embeddings(lambda _: None, timeout=5)
    finally:
        waiting.close()
    assert (status.embedded, status.missing, status.pending_jobs) == (1, 1, 0)
    assert status.settled
    assert not status.done
