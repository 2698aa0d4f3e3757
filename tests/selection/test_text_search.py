"""A tenant chooses the text search configuration (language) its BM25 text is analysed with.

Every catalog was analysed with English stemming and stop words: a German catalog's
"Rechnung" and its user's "Rechnungen" were different words.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import UUID

import psycopg
import pytest
from sqlalchemy.orm import Session

from tests.fixtures.db import wait_for_lock_waiters
from tests.fixtures.factories import Caller, agent_key, tool_body
from tests.selection.bm25_formula import bm25_scores, tool_terms
from tests.tools.test_index_consistency import assert_index_is_a_recount
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.lexical import analysis
from toolsift.lexical.analysis import TEXT_SEARCH_CONFIGS
from toolsift.tenants import schemas
from toolsift.tenants.schemas import TenantSettings, TenantUpdate
from toolsift.tenants.service import tenant as tenant_service
from toolsift.tools.schemas import ToolCreate
from toolsift.tools.service import tool as tool_service

OwnerConn = psycopg.Connection[tuple[Any, ...]]

CATALOG = [
    ("create_invoice", "Erstellt eine neue Rechnung für den Kunden"),
    ("list_customers", "Listet alle Kunden mit ihren Adressen auf"),
]
QUERY = "Rechnungen erstellen"


def test_the_server_has_each_configuration_a_tenant_may_choose(owner_conn: OwnerConn) -> None:
    names = owner_conn.execute(
        "SELECT array_agg(cfgname::text ORDER BY cfgname) FROM pg_ts_config"
        " WHERE cfgnamespace = 'pg_catalog'::regnamespace"
    ).fetchone()
    assert names is not None
    assert tuple(names[0]) == TEXT_SEARCH_CONFIGS


def _found(agent: Caller) -> list[tuple[str, list[str]]]:
    body = agent.ok(agent.select(QUERY, mode="bm25", k=1, debug=True))
    return [(c["name"], sorted(c["matched_terms"])) for c in body["candidates"]]


def test_a_german_catalog_is_read_in_german_once_the_tenant_chooses_it(
    admin: Caller, database: Database, owner_conn: OwnerConn
) -> None:
    admin.ok(admin.put("/admin/v1/tools", {"tools": [tool_body(*t) for t in CATALOG]}))
    agent = agent_key(admin, [])
    # English: neither word of the request is a word of the catalog.
    assert _found(agent) == []
    assert "rechnung" in tool_terms(owner_conn, admin.tenant_id, "create_invoice")
    # A query users called the tool for: its words join the tool's BM25 document (as the
    # worker records it; no worker runs here), analysed with the tenant's configuration too.
    owner_conn.execute(
        "INSERT INTO learned_queries (tenant_id, tool_id, query_hash, query, position)"
        " SELECT t.tenant_id, t.id, sha256(convert_to(q, 'UTF8')), q, t.position"
        " FROM tools t, (VALUES ('Rechnungen schreiben')) v(q)"
        " WHERE t.tenant_id = %s AND t.name = 'create_invoice'",
        (admin.tenant_id,),
    )

    patched = admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"text_search": "german"}}))
    assert patched["settings"] == {"text_search": "german"}
    # Indexed again in the request: German stems, and German stop words ("den") gone; the
    # learned query's words too ("schreiben" is "schreib").
    terms = tool_terms(owner_conn, admin.tenant_id, "create_invoice")
    assert {"rechnung", "kund", "neu", "schreib"} <= terms
    assert not {"kunden", "neue", "den", "für", "schreiben"} & terms
    assert_index_is_a_recount(admin.tenant_id, database, owner_conn)
    assert _found(agent) == [("create_invoice", ["rechnung"])]
    body = agent.ok(agent.select(QUERY, mode="bm25", debug=True, k=10))
    expected = bm25_scores(owner_conn, admin.tenant_id, body["query"], set(), config="german")
    assert {c["name"]: c["score"] for c in body["candidates"]} == pytest.approx(expected)

    # A tool written now is analysed in German too.
    reminder = tool_body("send_reminder", "Sendet Erinnerungen für offene Rechnungen")
    admin.ok(admin.post("/admin/v1/tools", reminder), 201)
    assert {"erinner", "rechnung"} <= tool_terms(owner_conn, admin.tenant_id, "send_reminder")
    assert_index_is_a_recount(admin.tenant_id, database, owner_conn)

    # Null resets it: English again, for every tool.
    admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"text_search": None}}))
    assert {"erinnerungen", "rechnungen"} <= tool_terms(
        owner_conn, admin.tenant_id, "send_reminder"
    )
    assert_index_is_a_recount(admin.tenant_id, database, owner_conn)
    # English words again: "Rechnungen" of the reminder and of the learned query.
    assert sorted(_found(agent)) == [
        ("create_invoice", ["rechnungen"]),
        ("send_reminder", ["rechnungen"]),
    ]


@pytest.mark.parametrize("value", ["klingon", "German", "pg_catalog.german", 5, ["german"]])
def test_a_configuration_postgresql_lacks_is_refused_and_changes_nothing(
    admin: Caller, owner_conn: OwnerConn, value: Any
) -> None:
    admin.ok(admin.put("/admin/v1/tools", {"tools": [tool_body(*t) for t in CATALOG]}))
    before = tool_terms(owner_conn, admin.tenant_id, "create_invoice")
    response = admin.patch("/admin/v1/tenant", {"settings": {"text_search": value}})
    assert response.status_code == 422, response.text
    assert "text_search" in response.text
    assert admin.ok(admin.get("/admin/v1/tenant"))["settings"] == {}
    assert tool_terms(owner_conn, admin.tenant_id, "create_invoice") == before


def test_a_configuration_the_server_lacks_is_refused_and_changes_nothing(
    admin: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server of another PostgreSQL version than the one the list was read from."""
    known = (*TEXT_SEARCH_CONFIGS, "klingon")
    monkeypatch.setattr(schemas, "TEXT_SEARCH_CONFIGS", known)
    monkeypatch.setattr(analysis, "TEXT_SEARCH_CONFIGS", known)
    response = admin.patch("/admin/v1/tenant", {"settings": {"text_search": "klingon"}})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "settings.text_search"
    assert "no such text search configuration" in response.text
    assert admin.ok(admin.get("/admin/v1/tenant"))["settings"] == {}


def _audited(owner_conn: OwnerConn, caller: Caller) -> int:
    row = owner_conn.execute(
        "SELECT count(*) FROM audit_log WHERE tenant_id = %s", (caller.tenant_id,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_an_unchanged_configuration_indexes_nothing_again(
    admin: Caller, owner_conn: OwnerConn
) -> None:
    admin.ok(admin.put("/admin/v1/tools", {"tools": [tool_body(*t) for t in CATALOG]}))
    admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"text_search": "english"}}))
    audited = _audited(owner_conn, admin)
    admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"text_search": None}}))
    # The settings change alone: no tool was written.
    assert _audited(owner_conn, admin) == audited + 1


@pytest.mark.parametrize("first", ["setting", "tool write"])
def test_a_tool_written_during_a_change_is_analysed_as_the_change_commits(
    admin: Caller, database: Database, owner_conn: OwnerConn, first: str
) -> None:
    """The change and a tool write of the tenant run one after the other (the tenant's writer
    lock): whichever waits reads what the other committed, so no tool keeps postings of the
    configuration it was not served with."""
    admin.ok(admin.put("/admin/v1/tools", {"tools": [tool_body(*t) for t in CATALOG]}))
    german = TenantUpdate(settings=TenantSettings(text_search="german"))
    reminder = ToolCreate(name="send_reminder", description="Sendet Erinnerungen für Rechnungen")

    def change(session: Session) -> object:
        return tenant_service.update(session, german)

    def write(session: Session) -> object:
        return tool_service.upsert(session, admin.tenant_id, [reminder])

    steps = [change, write] if first == "setting" else [write, change]
    with ThreadPoolExecutor(1) as pool:
        with database.unit_of_work(admin.tenant_id, permissions=ALL_PERMISSIONS) as session:
            steps[0](session)
            racing = pool.submit(_in_unit, database, admin.tenant_id, steps[1])
            wait_for_lock_waiters(owner_conn, 1)
        racing.result(timeout=60)

    assert {"erinner", "rechnung"} <= tool_terms(owner_conn, admin.tenant_id, "send_reminder")
    assert_index_is_a_recount(admin.tenant_id, database, owner_conn)


def _in_unit(database: Database, tenant_id: UUID, step: Callable[[Session], object]) -> None:
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        step(session)
