"""`toolsift eval --url` against a served API: rate limits waited out, its key revoked."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from rich.console import Console

from tests.conftest import OPERATOR_KEY
from tests.fixtures.embedding import RefusesPoison, republish_and_run
from tests.fixtures.factories import Caller, agent_key, embed_pending
from tests.fixtures.served import served
from toolsift.app import create_app
from toolsift.config import Settings
from toolsift.db import Database
from toolsift.embedded import EmbeddedRedis
from toolsift.embedding.service import MAX_EMBED_REFUSALS
from toolsift_tooling.eval import client, runner
from toolsift_tooling.eval.dataset import load

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


def _many(times: int) -> Any:
    dataset = load(TINY)
    return replace(dataset, queries=list(dataset.queries) * times)


def _selects(owner_conn: OwnerConn, tenant_id: object) -> int:
    row = owner_conn.execute(
        "SELECT count(*) FROM selection_logs WHERE tenant_id = %s", (tenant_id,)
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.usefixtures("interruptible")
def test_ctrl_c_sends_no_more_selects(
    limited_url: str, admin: Caller, owner_conn: OwnerConn
) -> None:
    # 60 queries at 3 a second: 20 s of selects, interrupted after half a second.
    agent = agent_key(admin, [])
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        runner._select_all(
            limited_url, agent.key, _many(12), mode="bm25", depth=5, concurrency=2,
            advance=lambda: None,
        )  # fmt: skip
    assert time.monotonic() - started < 5
    sent = _selects(owner_conn, admin.tenant_id)
    time.sleep(1.5)
    assert _selects(owner_conn, admin.tenant_id) == sent < 10


def test_sigterm_deletes_the_tenant_the_run_made(limited_url: str, owner_conn: OwnerConn) -> None:
    before = set(owner_conn.execute("SELECT id FROM tenants").fetchall())
    options = runner.Options(
        modes=("bm25",), ks=(1, 5), baselines=(), url=limited_url, operator_key=OPERATOR_KEY
    )
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
    with pytest.raises(KeyboardInterrupt):
        runner.evaluate(_many(12), options, Console(quiet=True))
    assert set(owner_conn.execute("SELECT id FROM tenants").fetchall()) == before


def test_an_admin_key_given_wins_over_the_operator_key(
    limited_url: str, admin: Caller, owner_conn: OwnerConn
) -> None:
    before = set(owner_conn.execute("SELECT id FROM tenants").fetchall())
    options = runner.Options(
        modes=("bm25",), ks=(1, 5), baselines=(), url=limited_url, admin_key=admin.key,
        operator_key=OPERATOR_KEY,
    )  # fmt: skip
    runner.evaluate(load(TINY), options, Console(quiet=True))
    assert set(owner_conn.execute("SELECT id FROM tenants").fetchall()) == before
    assert _selects(owner_conn, admin.tenant_id) == len(load(TINY).queries)


def test_selects_served_without_the_dense_side_fail_the_run(
    settings: Settings, database: Database, admin: Caller
) -> None:
    dataset = load(TINY)
    agent = agent_key(admin, [])
    with served(create_app(settings, database)) as url:
        uploading = client.Admin(url, admin.key)
        try:
            uploading.upload(dataset.tools, lambda _: None)
        finally:
            uploading.close()
        embed_pending(database, admin.tenant_id)
        outcomes = runner._select_all(
            url, agent.key, dataset, mode="hybrid", depth=5, concurrency=2, advance=lambda: None
        )
    assert len(outcomes) == len(dataset.queries)
    # Every tool has its vector, but this API cannot embed a query in time.
    hurried = settings.model_copy(update={"embedding_query_timeout": 1e-6})
    with (
        served(create_app(hurried, database)) as url,
        pytest.raises(client.ApiError, match="without the dense side"),
    ):
        runner._select_all(
            url, agent.key, dataset, mode="hybrid", depth=5, concurrency=2, advance=lambda: None
        )
