"""A PUT that leaves a tool's permission out keeps the one committed before its write, not
the one it read before waiting for the tenant's writer lock."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from tests.fixtures.db import wait_for_lock_waiters
from tests.fixtures.factories import PARAMETERS, Caller

OwnerConn = psycopg.Connection[tuple[Any, ...]]


def test_a_permission_set_while_a_put_waits_is_kept(admin: Caller, owner_conn: OwnerConn) -> None:
    admin.ok(admin.post("/admin/v1/permissions", {"name": "admin"}), 201)
    tool = {"name": "wipe", "description": "Wipe everything.", "input_schema": PARAMETERS}
    admin.ok(admin.put("/admin/v1/tools", {"tools": [tool]}))
    answers: list[Any] = []
    with psycopg.connect(owner_conn.info.dsn) as writer:
        # Another admin write of the tenant holds its writer lock (`security.audit.lock_chain`)
        writer.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"audit:{admin.tenant_id}",)
        )
        changed = {**tool, "description": "Wipe everything now."}
        put = threading.Thread(
            target=lambda: answers.append(admin.put("/admin/v1/tools", {"tools": [changed]}))
        )
        put.start()
        wait_for_lock_waiters(owner_conn, 1)
        # ... and restricts the tool, as PATCH {"required_permission": "admin"} does.
        writer.execute("SET row_security = off")
        writer.execute(
            "UPDATE tools SET required_permission_id ="
            " (SELECT id FROM permissions WHERE name = 'admin') WHERE name = 'wipe'"
        )
        writer.commit()
        put.join(30)
    assert answers[0].status_code == 200, answers[0].text
    (listed,) = admin.ok(admin.get("/admin/v1/tools"))["items"]
    assert (listed["description"], listed["required_permission"]) == (
        changed["description"],
        "admin",
    )
