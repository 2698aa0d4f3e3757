"""Failed authentications limited per client address: past the limit an address is refused,
any key, before the key is looked up; another address, the next window and a Redis outage
are not; the operator key has a rate limit of its own."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from toolsift.app import create_app
from toolsift.auth import keys
from toolsift.config import Settings
from toolsift.db import Database
from toolsift.embedded import EmbeddedRedis
from toolsift.errors import RateLimited
from toolsift.ops import metrics
from toolsift.security.ratelimit import RESERVED, RateLimiter, client_address

from ..conftest import OPERATOR_KEY
from ..fixtures.factories import Caller, agent_key, new_tenant, support_catalog
from ..fixtures.mcp import ACCEPT, INITIALIZE
from ..fixtures.served import free_port, serve_process, served

LIMIT = 5
# Long, so that no test's counts straddle two windows; the fixture starts none in its end.
WINDOW = 3600
REDIS_TIMEOUT = 5.0
HERE = "198.51.100.7"
ELSEWHERE = "203.0.113.9"
SELECT = {"messages": [{"role": "user", "content": "where is my order"}], "mode": "bm25"}


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> str:
    """The module's Redis, emptied: each test starts with no counter, and a minute or more
    before the window ends."""
    redis.Redis.from_url(redis_server.url).flushdb()
    if (left := WINDOW - time.time() % WINDOW) < 60:
        time.sleep(left)
    return redis_server.url


@contextmanager
def api(
    settings: Settings, database: Database, redis_url: str, address: str = HERE, **changes: Any
) -> Iterator[TestClient]:
    """The app, as every client at `address` reaches it; apps on one Redis are processes
    of one deployment."""
    changes = {
        "redis_url": redis_url,
        "rate_limit_failed_auth": LIMIT,
        "rate_limit_window_seconds": WINDOW,
        # Counting is what is tested: on a loaded machine the production 50 ms would let a
        # slow answer fail open and the count come out short.
        "rate_limit_redis_timeout": REDIS_TIMEOUT,
        **changes,
    }
    app = create_app(settings.model_copy(update=changes), database)
    with TestClient(app, client=(address, 50000)) as client:
        yield client


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def wrong_secret(key: str) -> str:
    prefix, tenant, key_id, secret = key.split("_", 3)
    return "_".join([prefix, tenant, key_id, secret[::-1]])


def unknown_key() -> str:
    return keys.format_key(uuid4(), uuid4(), keys.new_secret())


def revoked(admin: Caller) -> str:
    key = agent_key(admin, ["support"], name="revoked")
    admin.ok(admin.delete(f"/admin/v1/keys/{key.extra['key_id']}"))
    return key.key


def failures(agent: Caller, revoked_key: str) -> list[dict[str, str]]:
    """Failed authentications, one of each kind at least: an unknown key, a known one with a
    wrong secret, a revoked one."""
    return [
        bearer(unknown_key()),
        bearer(wrong_secret(agent.key)),
        bearer(unknown_key()),
        bearer(wrong_secret(agent.key)),
        bearer(revoked_key),
    ]


def refused_for_the_address(response: httpx.Response, window: int = WINDOW) -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert error["code"] == "rate_limited"
    assert "failed authentications" in error["message"]
    assert "this address" in error["message"]
    assert 1 <= int(response.headers["retry-after"]) <= window
    assert error["retry_after"] == int(response.headers["retry-after"])


def rate_limited(scope: str) -> float:
    return metrics.REGISTRY.get_sample_value("toolsift_rate_limited_total", {"scope": scope}) or 0


def test_select_path_past_the_limit_refuses_the_address_any_key_and_no_other_address(
    settings: Settings, database: Database, redis_url: str
) -> None:
    with (
        api(settings, database, redis_url) as here,
        api(settings, database, redis_url, ELSEWHERE) as elsewhere,
    ):
        admin = new_tenant(here, database, "guessed")
        support_catalog(admin)
        agent = agent_key(admin, ["support"])
        bad = failures(agent, revoked(admin))
        # No key, or none shaped like one: a 401 that looked nothing up, and no failure.
        for headers in [{}, bearer("not-a-key")] * LIMIT:
            assert here.post("/v1/select", json=SELECT, headers=headers).status_code == 401
        for headers in bad[:-1]:
            assert here.post("/v1/select", json=SELECT, headers=headers).status_code == 401
        # Neither successes nor a 403 (a key valid, but not for this route) are failures.
        for _ in range(LIMIT):
            assert agent.post("/v1/select", SELECT).status_code == 200
            assert agent.get("/admin/v1/tools").status_code == 403
        assert here.post("/v1/select", json=SELECT, headers=bad[-1]).status_code == 401
        before = rate_limited("failed_auth")

        refused_for_the_address(agent.post("/v1/select", SELECT))
        # A made-up key too: refused before the lookup that would have answered 401.
        made_up = here.post("/v1/select", json=SELECT, headers=bearer(unknown_key()))
        refused_for_the_address(made_up)
        assert rate_limited("failed_auth") == before + 2

        # Another address is another count: the same key selects, a bad one is a 401.
        there = Caller(elsewhere, agent.key, agent.tenant_id)
        assert there.post("/v1/select", SELECT).status_code == 200
        assert elsewhere.post("/v1/select", json=SELECT, headers=bad[2]).status_code == 401
    # Redis holds neither the address nor the keys' hashes.
    names = " ".join(k.decode() for k in redis.Redis.from_url(redis_url).keys("*"))
    assert "toolsift:authfail:" in names
    assert HERE not in names
    assert ELSEWHERE not in names
    assert keys.hash_key(agent.key, settings.key_pepper) not in names


def test_failures_on_every_route_count_and_a_blocked_address_is_refused_on_every_route(
    settings: Settings, database: Database, redis_url: str
) -> None:
    with api(settings, database, redis_url) as here:
        admin = new_tenant(here, database, "everywhere")
        support_catalog(admin)
        agent = agent_key(admin, ["support"])
        wrong_agent = bearer(wrong_secret(agent.key))
        attempts = [
            here.get("/admin/v1/tools", headers=bearer(wrong_secret(admin.key))),
            here.post("/v1/authorize", json={"tool": "order_status"}, headers=wrong_agent),
            here.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **wrong_agent}),
            here.get("/admin/v1/tenants", headers=bearer("wrong-operator-key")),
            here.post("/v1/select", json=SELECT, headers=bearer(unknown_key())),
        ]
        assert [r.status_code for r in attempts] == [401] * LIMIT
        # Valid keys, each on its own route, from the blocked address.
        refused = [
            admin.get("/admin/v1/tools"),
            agent.post("/v1/authorize", {"tool": "order_status"}),
            here.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **agent.headers}),
            here.get("/admin/v1/tenants", headers=bearer(OPERATOR_KEY)),
            agent.post("/v1/select", SELECT),
        ]
        for response in refused:
            refused_for_the_address(response)
    with api(settings, database, redis_url, ELSEWHERE) as elsewhere:
        assert Caller(elsewhere, admin.key, admin.tenant_id).get("/admin/v1/tools").is_success
        mcp = elsewhere.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **agent.headers})
        assert mcp.status_code == 200, mcp.text


def test_the_next_window_lets_the_address_through(
    settings: Settings, database: Database, redis_url: str
) -> None:
    window = 3
    with api(
        settings, database, redis_url, rate_limit_failed_auth=2, rate_limit_window_seconds=window
    ) as here:
        admin = new_tenant(here, database, "patient")
        time.sleep(window - time.time() % window + 0.05)  # the failures in one window
        for _ in range(2):
            assert here.get("/admin/v1/tools", headers=bearer(unknown_key())).status_code == 401
        refused = admin.get("/admin/v1/tools")
        refused_for_the_address(refused, window)
        time.sleep(int(refused.headers["retry-after"]))
        assert admin.get("/admin/v1/tools").status_code == 200
        assert here.get("/admin/v1/tools", headers=bearer(unknown_key())).status_code == 401


def test_without_redis_each_process_still_bounds_an_address_s_failures(
    settings: Settings, database: Database, tmp_path: Path
) -> None:
    """Redis down: the keys' own limits fail open, and an address's 401s are still limited
    by the process's own count of them (a burst can make Redis slow enough to pause the
    checks; the guesses answered meanwhile must count somewhere)."""
    server = EmbeddedRedis(tmp_path / "redis")
    url = server.start()
    try:
        with (
            api(settings, database, url, rate_limit_agent=1) as here,
            api(settings, database, url, ELSEWHERE, rate_limit_agent=1) as elsewhere,
        ):
            admin = new_tenant(here, database, "open")
            support_catalog(admin)
            agent = agent_key(admin, ["support"])
            server.stop()
            there = Caller(elsewhere, agent.key, agent.tenant_id)
            # The key's limit of 1 is not enforced: nothing counts its requests.
            assert [there.post("/v1/select", SELECT).status_code for _ in range(3)] == [200] * 3
            for _ in range(LIMIT):
                bad = here.post("/v1/select", json=SELECT, headers=bearer(unknown_key()))
                assert bad.status_code == 401
            refused_for_the_address(agent.post("/v1/select", SELECT))
            refused_for_the_address(
                here.post("/v1/select", json=SELECT, headers=bearer(unknown_key()))
            )
            assert admin.get("/admin/v1/tools").status_code == 429  # the same address
            assert there.post("/v1/select", SELECT).status_code == 200
    finally:
        server.stop()


def test_a_refused_address_spends_nothing_of_the_key_s_budget(
    settings: Settings, database: Database, redis_url: str
) -> None:
    limits = {"rate_limit_admin": 2, "rate_limit_failed_auth": 1}
    with (
        api(settings, database, redis_url, **limits) as here,
        api(settings, database, redis_url, ELSEWHERE, **limits) as elsewhere,
    ):
        admin = new_tenant(here, database, "budget")
        assert admin.get("/admin/v1/tools").status_code == 200  # 1 of 2
        assert here.get("/admin/v1/tools", headers=bearer(unknown_key())).status_code == 401
        for _ in range(3):
            refused_for_the_address(admin.get("/admin/v1/tools"))
        there = Caller(elsewhere, admin.key, admin.tenant_id)
        assert [there.get("/admin/v1/tools").status_code for _ in range(2)] == [200, 429]


def test_the_operator_key_has_a_rate_limit_of_its_own(
    settings: Settings, database: Database, redis_url: str
) -> None:
    before = rate_limited("operator")
    with api(settings, database, redis_url, rate_limit_operator=2) as here:
        operator = bearer(OPERATOR_KEY)
        statuses = [here.get("/admin/v1/tenants", headers=operator).status_code for _ in range(3)]
        assert statuses == [200, 200, 429]
        refused = here.get("/admin/v1/tenants", headers=operator)
        assert refused.status_code == 429
        assert "for this key" in refused.json()["error"]["message"]
        assert int(refused.headers["retry-after"]) >= 1
        assert rate_limited("operator") == before + 2
        # A wrong key is a bucket of its own: a 401, counted against the address.
        wrong = here.post("/admin/v1/tenants", json={"name": "x"}, headers=bearer("guess"))
        assert wrong.status_code == 401
    with api(settings, database, redis_url, ELSEWHERE, rate_limit_operator=0) as elsewhere:
        assert elsewhere.get("/admin/v1/tenants", headers=operator).status_code == 200


@pytest.mark.parametrize(
    ("host", "counted_as"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),  # the same /64: one client
        ("::ffff:192.0.2.1", "192.0.2.1"),
        (None, "unknown"),
        ("testclient", "testclient"),
    ],
)
def test_client_addresses_are_counted_by_ipv4_address_or_ipv6_64(
    host: str | None, counted_as: str
) -> None:
    assert client_address(host) == counted_as


def test_x_forwarded_for_counts_only_from_a_trusted_proxy(
    settings: Settings, database: Database, redis_url: str
) -> None:
    # uvicorn's default, and the setting's: the loopback is a trusted proxy.
    limited = settings.model_copy(
        update={
            "redis_url": redis_url,
            "rate_limit_failed_auth": 2,
            "rate_limit_window_seconds": WINDOW,
        }
    )
    with served(create_app(limited, database)) as url:
        for _ in range(2):
            forwarded = {"X-Forwarded-For": "192.0.2.10", **bearer(unknown_key())}
            assert httpx.get(f"{url}/admin/v1/tools", headers=forwarded).status_code == 401
        blocked = {"X-Forwarded-For": "192.0.2.10", **bearer(unknown_key())}
        assert httpx.get(f"{url}/admin/v1/tools", headers=blocked).status_code == 429
        other = {"X-Forwarded-For": "192.0.2.11", **bearer(unknown_key())}
        assert httpx.get(f"{url}/admin/v1/tools", headers=other).status_code == 401


@pytest.mark.timeout(120)
@contextmanager
def serving(database_url: str, redis_url: str, tmp_path: Path, **settings: str) -> Iterator[str]:
    """`toolsift serve` in a process of its own (uvicorn, its proxy headers, its event loop)."""
    port = free_port()
    env = {
        **os.environ,
        "TOOLSIFT_DATABASE_URL": database_url,
        "TOOLSIFT_REDIS_URL": redis_url,
        "TOOLSIFT_PORT": str(port),
        "TOOLSIFT_RATE_LIMIT_WINDOW_SECONDS": str(WINDOW),
        "TOOLSIFT_RATE_LIMIT_REDIS_TIMEOUT": str(REDIS_TIMEOUT),
        **settings,
    }
    for name in ("TOOLSIFT_HOST", "TOOLSIFT_API_WORKERS", "FORWARDED_ALLOW_IPS"):
        env.pop(name, None)
    with serve_process(env, tmp_path, port):
        yield f"http://127.0.0.1:{port}"


def test_serve_believes_x_forwarded_for_only_from_the_configured_proxies(
    database_url: str, redis_url: str, tmp_path: Path
) -> None:
    """A proxy elsewhere is trusted, not the loopback the test calls from: the header a
    client sends itself is ignored, and every request counts against the peer."""
    with serving(
        database_url,
        redis_url,
        tmp_path,
        TOOLSIFT_RATE_LIMIT_FAILED_AUTH="2",
        TOOLSIFT_FORWARDED_ALLOW_IPS="192.0.2.1",
    ) as url:
        statuses = []
        for forwarded_for in ("192.0.2.20", "192.0.2.21", "192.0.2.22"):
            headers = {"X-Forwarded-For": forwarded_for, **bearer(unknown_key())}
            statuses.append(httpx.get(f"{url}/admin/v1/tools", headers=headers).status_code)
        assert statuses == [401, 401, 429]


def test_guesses_sent_at_once_get_no_more_answers_than_the_limit(
    database_url: str, redis_url: str, tmp_path: Path
) -> None:
    """Concurrent selects with made-up keys, on a served API with the production Redis
    timeout: they cannot all pass the check before the first 401 is counted, and bursts
    that make Redis too slow to answer (the checks then pause) still count."""

    async def burst(url: str, count: int) -> Counter[int]:
        select = {**SELECT, "mode": "bm25"}
        limits = httpx.Limits(max_connections=count)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
            answers = await asyncio.gather(
                *[client.post("/v1/select", json=select, headers=bearer(unknown_key()))
                  for _ in range(count)]
            )  # fmt: skip
        return Counter(a.status_code for a in answers)

    with serving(
        database_url,
        redis_url,
        tmp_path,
        TOOLSIFT_RATE_LIMIT_FAILED_AUTH=str(LIMIT),
        TOOLSIFT_RATE_LIMIT_REDIS_TIMEOUT=str(Settings().rate_limit_redis_timeout),
    ) as url:
        answers = sum((asyncio.run(burst(url, 500)) for _ in range(3)), Counter())
        assert answers == {401: LIMIT, 429: 3 * 500 - LIMIT}


def test_a_key_the_database_accepts_gives_its_reservation_back_at_once(redis_url: str) -> None:
    """Not when its request ends: an MCP stream may stay open for hours."""

    async def accepted() -> None:
        async with limiter_on(redis_url) as limiter:
            subject, state = guess(), {}
            await limiter.check_async(subject, "agent", HERE, state)
            failures = state[RESERVED].failures
            assert redis.Redis.from_url(redis_url).get(failures) == b"1"
            limiter.confirm(subject, state)
            assert RESERVED not in state
            assert redis.Redis.from_url(redis_url).get(failures) == b"0"
            assert not limiter._in_flight

    asyncio.run(accepted())


@asynccontextmanager
async def limiter_on(url: str, **changes: Any) -> AsyncIterator[RateLimiter]:
    options: dict[str, Any] = {
        "limits": {"agent": 0},
        "window_seconds": WINDOW,
        "timeout": REDIS_TIMEOUT,
        "failed_auth": LIMIT,
        **changes,
    }
    limiter = RateLimiter(url, **options)
    try:
        yield limiter
    finally:
        limiter.close()
        await limiter.aclose()


def guess() -> str:
    return keys.hash_key(unknown_key(), "pepper")


def test_a_burst_of_guesses_is_refused_before_any_of_them_is_answered(redis_url: str) -> None:
    """Requests whose keys are not known good reserve a failure before the lookup, so guesses
    sent at once cannot all pass the check before the first 401 is counted."""

    async def burst() -> None:
        async with limiter_on(redis_url) as limiter:
            in_flight: list[dict[str, Any]] = [{} for _ in range(LIMIT)]
            for state in in_flight:
                await limiter.check_async(guess(), "agent", HERE, state)
            with pytest.raises(RateLimited):
                await limiter.check_async(guess(), "agent", HERE, {})
            # Good keys after all: each gives its reservation back, the address is open again.
            for state in in_flight:
                await limiter.settle(state[RESERVED], refused=False)
            await limiter.check_async(guess(), "agent", HERE, {})

    asyncio.run(burst())


def test_more_requests_of_one_key_in_flight_reserve_one_failure(redis_url: str) -> None:
    """An agent's first requests after a restart come in parallel, all with one key."""

    async def restart() -> None:
        async with limiter_on(redis_url) as limiter:
            subject = guess()
            states: list[dict[str, Any]] = [{} for _ in range(3 * LIMIT)]
            for state in states:
                await limiter.check_async(subject, "agent", HERE, state)
            assert sum(RESERVED in state for state in states) == 1
            await limiter.settle(states[0][RESERVED], refused=False)
            limiter.confirm(subject)
            await limiter.check_async(subject, "agent", HERE, later := {})
            assert RESERVED not in later

    asyncio.run(restart())


def test_new_valid_keys_give_their_reservations_back(
    settings: Settings, database: Database, redis_url: str
) -> None:
    """Keys this process has not seen accepted reserve a failure each; answered, they give it
    back, on every route: many of them in a row never block their address."""
    with api(settings, database, redis_url) as here:
        admin = new_tenant(here, database, "fresh keys")
        support_catalog(admin)
        for i in range(2 * LIMIT):
            agent = agent_key(admin, ["support"], name=f"fresh {i}")
            assert agent.post("/v1/select", SELECT).status_code == 200
        for i in range(2 * LIMIT):
            other = agent_key(admin, ["support"], name=f"other {i}")
            assert other.get("/admin/v1/tools").status_code == 403  # a valid key, wrong route
        mcp = here.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **agent.headers})
        assert mcp.status_code == 200, mcp.text
        for _ in range(LIMIT - 1):
            assert here.get("/admin/v1/tools", headers=bearer(unknown_key())).status_code == 401
        assert admin.get("/admin/v1/tools").status_code == 200  # one failure short
        assert here.get("/admin/v1/tools", headers=bearer(unknown_key())).status_code == 401
        refused_for_the_address(admin.get("/admin/v1/tools"))
        # Every request settled what it reserved: nothing is left in flight in the process.
        limiter = here.app.state.rate_limiter  # type: ignore[attr-defined]
        assert not limiter._in_flight
        assert not limiter._pending


def test_a_key_s_budget_is_counted_per_scope(
    settings: Settings, database: Database, redis_url: str
) -> None:
    """An agent key that spent more than the admin limit on selects still gets the 403 of
    the wrong route, not a 429 judged against a limit that is not its own."""
    with api(settings, database, redis_url, rate_limit_admin=3) as here:
        admin = new_tenant(here, database, "scopes")
        agent = agent_key(admin, [])
        assert [agent.post("/v1/select", SELECT).status_code for _ in range(4)] == [200] * 4
        assert agent.get("/admin/v1/tools").status_code == 403


def test_a_redis_user_limited_to_the_prefix_is_enough(redis_url: str) -> None:
    """A Redis ACL may confine the API to `toolsift:*`: a counter that is not used is named
    under the prefix too, or the script is refused and every limit fails open."""
    client = redis.Redis.from_url(redis_url)
    client.execute_command("ACL", "SETUSER", "limits", "on", ">secret", "~toolsift:*", "+@all")
    confined = redis_url.replace("redis://", "redis://limits:secret@")

    def failed_open() -> float:
        return metrics.REGISTRY.get_sample_value("toolsift_rate_limit_fail_open_total") or 0

    async def confined_limits() -> None:
        async with limiter_on(confined, failed_auth=1) as limiter:
            opened = failed_open()
            await limiter.check_async(guess(), "agent", HERE, {})
            await limiter.count_failure(HERE)
            with pytest.raises(RateLimited):
                await limiter.check_async(guess(), "agent", HERE, {})
            assert failed_open() == opened

    try:
        asyncio.run(confined_limits())
    finally:
        client.execute_command("ACL", "DELUSER", "limits")
        client.close()
