"""Two admin writes of one tenant at once: the second sees the first's result and answers
with a clear 4xx, never a constraint error (a 500).

Each test holds the first write's transaction open, starts the second in a thread, and
commits the first while the second waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from uuid import UUID

import psycopg
import pytest
from sqlalchemy.orm import Session

from tests.fixtures.db import wait_for_lock_waiters
from tests.fixtures.factories import PEPPER, Caller
from toolsift.access.schemas import KeyCreate, PermissionCreate, RoleCreate
from toolsift.access.service import access
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.errors import AppError, Conflict, Unprocessable
from toolsift.security import audit
from toolsift.tenants.schemas import TenantUpdate
from toolsift.tenants.service import tenant as tenant_service
from toolsift.tools.schemas import ToolCreate
from toolsift.tools.service import tool as tool_service

OwnerConn = psycopg.Connection[tuple[object, ...]]


def _race(
    database: Database,
    tenant: UUID,
    first: Callable[[Session], object],
    second: Callable[[Session], object],
    expected: type[AppError],
) -> None:
    def run_second() -> None:
        with _unit(database, tenant) as session:
            second(session)

    with ThreadPoolExecutor(1) as pool:
        with _unit(database, tenant) as session:
            first(session)
            racing = pool.submit(run_second)
            time.sleep(0.5)  # the second write is now waiting for the first
        with pytest.raises(expected):
            racing.result()


def _unit(database: Database, tenant: UUID) -> AbstractContextManager[Session]:
    return database.unit_of_work(tenant, permissions=ALL_PERMISSIONS)


@pytest.mark.parametrize(
    "create",
    [
        lambda s, tenant: access.create_role(s, tenant, RoleCreate(name="ops")),
        lambda s, tenant: access.create_permission(s, tenant, PermissionCreate(name="crm.read")),
        lambda s, tenant: tool_service.create(s, tenant, ToolCreate(name="ops")),
    ],
    ids=["role", "permission", "tool"],
)
def test_two_creates_of_one_name(
    admin: Caller, database: Database, create: Callable[[Session, UUID], object]
) -> None:
    tenant = admin.tenant_id
    _race(database, tenant, lambda s: create(s, tenant), lambda s: create(s, tenant), Conflict)


def test_a_key_given_a_role_being_deleted(admin: Caller, database: Database) -> None:
    tenant = admin.tenant_id
    role = admin.ok(admin.post("/admin/v1/roles", {"name": "ops"}), 201)
    key = KeyCreate(name="bot", scope="agent", roles=["ops"])
    _race(
        database,
        tenant,
        lambda s: access.delete_role(s, UUID(role["id"])),
        lambda s: access.create_key(s, tenant, key, pepper=PEPPER),
        Unprocessable,
    )


def test_a_grant_of_a_permission_being_deleted(admin: Caller, database: Database) -> None:
    tenant = admin.tenant_id
    permission = admin.ok(admin.post("/admin/v1/permissions", {"name": "crm.read"}), 201)
    role = admin.ok(admin.post("/admin/v1/roles", {"name": "ops"}), 201)
    _race(
        database,
        tenant,
        lambda s: access.delete_permission(s, UUID(permission["id"])),
        lambda s: access.grant(s, UUID(role["id"]), "crm.read"),
        Unprocessable,
    )


def test_a_permission_a_tool_write_is_giving_a_tool(admin: Caller, database: Database) -> None:
    """The delete counts the tools requiring the permission after the tenant's tool writes."""
    tenant = admin.tenant_id
    permission = admin.ok(admin.post("/admin/v1/permissions", {"name": "crm.read"}), 201)
    tool = ToolCreate(name="lookup", description="Look up", required_permission="crm.read")
    _race(
        database,
        tenant,
        lambda s: tool_service.upsert(s, tenant, [tool]),
        lambda s: access.delete_permission(s, UUID(permission["id"])),
        Conflict,
    )


def test_two_settings_changes_at_once_keep_both(admin: Caller, database: Database) -> None:
    """Each merges into what the other committed: neither overwrites the other's key."""
    tenant = admin.tenant_id

    def change(fusion: dict[str, float]) -> Callable[[Session], object]:
        update = TenantUpdate.model_validate({"settings": {"fusion": fusion}})
        return lambda s: tenant_service.update(s, update)

    with ThreadPoolExecutor(1) as pool:
        with _unit(database, tenant) as session:
            change({"k": 30.0})(session)
            racing = pool.submit(lambda: _run(database, tenant, change({"bm25_weight": 2.0})))
            time.sleep(0.5)  # the second change is now waiting for the first
        racing.result()
    fusion = admin.ok(admin.get("/admin/v1/tenant"))["settings"]["fusion"]
    assert (fusion["k"], fusion["bm25_weight"]) == (30.0, 2.0)


def test_a_write_of_a_key_revoked_while_it_waited_is_refused(
    admin: Caller, database: Database, owner_conn: OwnerConn
) -> None:
    """The key was valid when its request began; the revoke committed first, so its write
    ends as a 401 and changes nothing."""
    other = admin.ok(admin.post("/admin/v1/keys", {"name": "ci", "scope": "admin"}), 201)
    ci = Caller(admin.client, other["secret"], admin.tenant_id)
    with ThreadPoolExecutor(1) as pool:
        with _unit(database, admin.tenant_id) as session:
            audit.track(session, audit.Actor("key", UUID(other["id"])))
            access.revoke_key(session, UUID(other["id"]))
            racing = pool.submit(ci.put, "/admin/v1/tools", {"tools": [{"name": "late"}]})
            wait_for_lock_waiters(owner_conn, 1)
        response = racing.result()
    assert response.status_code == 401, response.text
    assert response.json()["error"]["message"] == "invalid or revoked API key"
    assert admin.ok(admin.get("/admin/v1/tools"))["items"] == []


def _run(database: Database, tenant: UUID, write: Callable[[Session], object]) -> None:
    with _unit(database, tenant) as session:
        write(session)
