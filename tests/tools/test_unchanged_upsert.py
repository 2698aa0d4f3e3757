"""Re-importing an unchanged catalog answers without the tenant's writer lock."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import psycopg

from tests.fixtures.db import wait_for_lock_waiters
from tests.fixtures.factories import Caller, tool_body
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.security.audit import lock_chain

OwnerConn = psycopg.Connection[tuple[object, ...]]


def test_an_unchanged_catalog_is_answered_while_another_writer_holds_the_lock(
    admin: Caller, database: Database, owner_conn: OwnerConn
) -> None:
    catalog = {"tools": [tool_body(f"t{i}", f"Tool number {i}") for i in range(50)]}
    first = admin.ok(admin.put("/admin/v1/tools", catalog))
    with ThreadPoolExecutor(1) as pool:
        with database.unit_of_work(admin.tenant_id, permissions=ALL_PERMISSIONS) as writer:
            lock_chain(writer)  # another tool write in progress
            again = pool.submit(admin.put, "/admin/v1/tools", catalog).result(timeout=20)
            changed = {"tools": [*catalog["tools"][:-1], tool_body("t49", "Changed")]}
            waiting = pool.submit(admin.put, "/admin/v1/tools", changed)
            wait_for_lock_waiters(owner_conn, 1)  # a change still waits its turn
        updated = admin.ok(waiting.result(timeout=20))
    answer = admin.ok(again)
    assert (answer["unchanged"], answer["created"], answer["updated"]) == (50, 0, 0)
    assert [(t["id"], t["position"], t["version"]) for t in answer["tools"]] == [
        (t["id"], t["position"], t["version"]) for t in first["tools"]
    ]
    assert (updated["unchanged"], updated["updated"]) == (49, 1)
