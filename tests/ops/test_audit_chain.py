"""The audit log's hash chain: each entry's hash covers the entry and the previous entry's
hash, per tenant; `GET /admin/v1/audit/verify` finds any change, removal or out-of-turn entry.

Tampering is done as the owner login, which row-level security does not stop: exactly the
attacker (or accident) the chain is for.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import psycopg

from tests.fixtures.factories import Caller, new_tenant
from toolsift.access.schemas import PermissionCreate
from toolsift.access.service import access
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.security import audit

OwnerConn = psycopg.Connection[tuple[object, ...]]
VERIFY = "/admin/v1/audit/verify"


def _chain(admin: Caller) -> list[dict[str, Any]]:
    items = admin.ok(admin.get("/admin/v1/audit?limit=1000"))["items"]
    return sorted((i for i in items if i["seq"] is not None), key=lambda i: i["seq"])


def _seq_row(owner: OwnerConn, admin: Caller, seq: int) -> str:
    row = owner.execute(
        "SELECT id::text FROM audit_log WHERE tenant_id = %s AND seq = %s", (admin.tenant_id, seq)
    ).fetchone()
    assert row is not None
    return str(row[0])


class TestChain:
    def test_entries_link_from_the_first_and_verify(
        self, admin: Caller, catalog: dict[str, str]
    ) -> None:
        chain = _chain(admin)
        assert len(chain) > 10
        assert [e["seq"] for e in chain] == list(range(1, len(chain) + 1))
        assert chain[0]["prev_hash"] == audit.GENESIS
        for previous, entry in itertools.pairwise(chain):
            assert entry["prev_hash"] == previous["entry_hash"]
        report = admin.ok(admin.get(VERIFY))
        assert report == {
            "ok": True,
            "entries": len(chain),
            "head": chain[-1]["entry_hash"],
            "broken_at": None,
        }

    def test_each_tenant_has_its_own_chain(
        self, admin: Caller, catalog: dict[str, str], client: Any, database: Database
    ) -> None:
        other = new_tenant(client, database, "globex")
        other.ok(other.post("/admin/v1/permissions", {"name": "x.read"}), 201)
        theirs = _chain(other)
        assert theirs[0]["seq"] == 1
        assert theirs[0]["prev_hash"] == audit.GENESIS
        assert other.ok(other.get(VERIFY))["ok"]
        assert admin.ok(admin.get(VERIFY))["ok"]

    def test_concurrent_admin_transactions_append_in_turn(
        self, admin: Caller, database: Database
    ) -> None:
        errors: list[BaseException] = []

        def write(i: int) -> None:
            try:
                with database.unit_of_work(admin.tenant_id, permissions=ALL_PERMISSIONS) as s:
                    audit.track(s, audit.Actor("cli"))
                    access.create_permission(s, admin.tenant_id, PermissionCreate(name=f"p{i}"))
            except BaseException as error:  # reported below, in the test's thread
                errors.append(error)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        report = admin.ok(admin.get(VERIFY))
        assert report["ok"], report
        assert report["entries"] == len(_chain(admin))


class TestTampering:
    def test_a_changed_entry_is_found(
        self, admin: Caller, catalog: dict[str, str], owner_conn: OwnerConn
    ) -> None:
        victim = _seq_row(owner_conn, admin, 3)
        owner_conn.execute("UPDATE audit_log SET actor = 'cli' WHERE id = %s", (victim,))
        report = admin.ok(admin.get(VERIFY))
        assert report["ok"] is False
        assert report["entries"] == 2
        assert report["broken_at"]["seq"] == 3
        assert report["broken_at"]["id"] == victim
        assert "changed" in report["broken_at"]["reason"]

    def test_a_changed_entry_with_a_fresh_hash_breaks_the_next_link(
        self, admin: Caller, catalog: dict[str, str], owner_conn: OwnerConn, database: Database
    ) -> None:
        victim = _seq_row(owner_conn, admin, 3)
        owner_conn.execute("UPDATE audit_log SET after_hash = 'forged' WHERE id = %s", (victim,))
        with database.unit_of_work(admin.tenant_id, permissions=ALL_PERMISSIONS) as session:
            from toolsift.models import AuditEntry

            entry = session.get(AuditEntry, (admin.tenant_id, victim))
            assert entry is not None
            forged = audit.entry_hash(entry)
        owner_conn.execute("UPDATE audit_log SET entry_hash = %s WHERE id = %s", (forged, victim))
        report = admin.ok(admin.get(VERIFY))
        assert report["ok"] is False
        assert report["broken_at"]["seq"] == 4
        assert "previous" in report["broken_at"]["reason"]

    def test_a_removed_entry_is_found(
        self, admin: Caller, catalog: dict[str, str], owner_conn: OwnerConn
    ) -> None:
        owner_conn.execute("DELETE FROM audit_log WHERE id = %s", (_seq_row(owner_conn, admin, 5),))
        report = admin.ok(admin.get(VERIFY))
        assert report["ok"] is False
        assert report["broken_at"]["seq"] == 6
        assert "missing" in report["broken_at"]["reason"]

    def test_an_entry_moved_to_another_tenant_is_found(
        self, admin: Caller, catalog: dict[str, str], owner_conn: OwnerConn, client: Any,
        database: Database,
    ) -> None:  # fmt: skip
        other = new_tenant(client, database, "globex")
        victim = _seq_row(owner_conn, admin, 2)
        owner_conn.execute(
            "UPDATE audit_log SET tenant_id = %s, seq = 1000 WHERE id = %s",
            (other.tenant_id, victim),
        )
        assert admin.ok(admin.get(VERIFY))["broken_at"]["seq"] == 3
        assert other.ok(other.get(VERIFY))["broken_at"]["seq"] == 1000
