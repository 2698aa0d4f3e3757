"""A select reads one state of the catalog, from the key check to the definitions it renders.

`toolsift_select` runs several statements; under READ COMMITTED each would see the commits
made since the one before, so a tool write landing mid-select could make the budget count
one version of a tool and the answer render another, or mark a tool selected that the
answer then leaves out. The test stops a select between its budget and its definitions (on
a lock of the log table, which it writes in between), commits a write, and lets it go on.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from tests.fixtures.db import wait_for_lock_waiters
from tests.fixtures.factories import Caller

OwnerConn = psycopg.Connection[tuple[Any, ...]]


@pytest.mark.parametrize(
    "change",
    [
        {"required_permission": "admin"},  # forbidden to the caller from now on
        {"description": "Get the shipping status of an order. " + "Detail. " * 1200},
    ],
    ids=["made-forbidden", "grown"],
)
def test_a_write_committed_mid_select_does_not_split_its_answer(
    admin: Caller,
    support_agent: Caller,
    catalog: dict[str, str],
    database_url: str,
    owner_conn: OwnerConn,
    change: dict[str, Any],
) -> None:
    query = "where is my order shipping status"
    before = support_agent.ok(support_agent.select(query, roles=["support"], debug=True))
    plain = database_url.replace("postgresql+psycopg://", "postgresql://")
    # The blocker closes first: a failure inside lets the select go before the pool waits.
    with ThreadPoolExecutor(1) as pool, psycopg.connect(plain) as blocker:
        blocker.execute("LOCK TABLE selection_logs IN EXCLUSIVE MODE")
        racing = pool.submit(support_agent.select, query, roles=["support"], debug=True)
        wait_for_lock_waiters(owner_conn, 1)  # ranked and budgeted, waiting to log
        admin.ok(admin.patch(f"/admin/v1/tools/{catalog['order_status']}", change))
        blocker.commit()
        body = support_agent.ok(racing.result())
    selected = {c["name"] for c in body["candidates"] if c["selected"]}
    assert selected <= {t["name"] for t in body["tools"]}
    # The answer is the one the catalog gave before the write, whole.
    assert (body["tools"], body["tokens"]) == (before["tools"], before["tokens"])
    after = support_agent.ok(support_agent.select(query, roles=["support"], debug=True))
    assert after["tools"] != before["tools"]
