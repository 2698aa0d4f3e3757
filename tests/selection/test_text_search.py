"""A tenant chooses the text search configuration (language) its BM25 text is analysed with,
and whether accents are folded first.

Every catalog was analysed with English stemming and stop words: a German catalog's
"Rechnung" and its user's "Rechnungen" were different words. French stemming keeps accents:
"élèves" and "eleves", as users type them, were different words too.
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
from toolsift.lexical.analysis import TEXT_SEARCH_CONFIGS, UNACCENT_SCHEMA
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


def _word_dictionaries(owner_conn: OwnerConn, config: str) -> list[list[str]]:
    """The dictionaries of `config`'s `asciiword` and `word` tokens, in order."""
    rows = owner_conn.execute(
        "SELECT array_agg(m.mapdict::regdictionary::text ORDER BY m.mapseqno)"
        " FROM pg_ts_config_map m JOIN ts_token_type('default') t ON t.tokid = m.maptokentype"
        " WHERE m.mapcfg = %s::regconfig AND t.alias IN ('asciiword', 'word')"
        " GROUP BY t.tokid ORDER BY t.tokid",
        (config,),
    ).fetchall()
    return [list(dictionaries) for (dictionaries,) in rows]


def _one_text(owner_conn: OwnerConn, config: str) -> bool:
    row = owner_conn.execute(
        "SELECT to_tsvector(%s::regconfig, 'Élèves café') = to_tsvector(%s::regconfig, 'Eleves cafe')",
        (config, config),
    ).fetchone()
    assert row is not None
    return bool(row[0])


def test_each_configuration_has_a_twin_that_folds_accents(owner_conn: OwnerConn) -> None:
    """Each twin matches its language's stop words as written, then runs `unaccent` on words
    with letters outside ASCII, then its own stemmer. Where the language stems ASCII words
    as it stems the others, "Élèves café" is then one text with "Eleves cafe" (Russian and
    Hindi stem ASCII words in English: a folded word gets their own stemmer)."""
    names = owner_conn.execute(
        "SELECT array_agg(cfgname::text ORDER BY cfgname) FROM pg_ts_config"
        " WHERE cfgnamespace = %s::regnamespace",
        (UNACCENT_SCHEMA,),
    ).fetchone()
    assert names is not None
    assert tuple(names[0]) == TEXT_SEARCH_CONFIGS
    kept = 0
    for name in TEXT_SEARCH_CONFIGS:
        twin = f"{UNACCENT_SCHEMA}.{name}"
        [ascii_words], words = _word_dictionaries(owner_conn, name)
        stop = owner_conn.execute(
            "SELECT d.dictinitoption LIKE '%%stopwords%%' FROM pg_ts_dict d"
            " WHERE d.oid = %s::regdictionary",
            (words[0],),
        ).fetchone()
        first = [f"{twin}_stop"] if stop and stop[0] else []
        assert _word_dictionaries(owner_conn, twin) == [
            [ascii_words],
            [*first, "unaccent", *words],
        ], name
        assert _one_text(owner_conn, twin) == (words == [ascii_words]), name
        kept += not _one_text(owner_conn, name)
    # Not vacuous: most of PostgreSQL's own keep the accents.
    assert kept >= 20


def _found(agent: Caller, query: str = QUERY) -> list[tuple[str, list[str]]]:
    body = agent.ok(agent.select(query, mode="bm25", k=1, debug=True))
    return [(c["name"], sorted(c["matched_terms"])) for c in body["candidates"]]


FRENCH = [
    ("create_invoice", "Créer une facture pour le client"),
    ("list_receipts", "Lister les reçus des élèves qui ont été payés à la cantine"),
]


def test_a_french_catalog_finds_words_typed_without_accents_once_folded(
    admin: Caller, database: Database, owner_conn: OwnerConn
) -> None:
    admin.ok(admin.put("/admin/v1/tools", {"tools": [tool_body(*t) for t in FRENCH]}))
    agent = agent_key(admin, [])
    admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"text_search": "french"}}))
    # French stems keep accents: "eleves" and "recus", typed as in a chat, find nothing.
    assert _found(agent, "recus des eleves") == []
    assert {"reçus", "élev"} <= tool_terms(owner_conn, admin.tenant_id, "list_receipts")

    patched = admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"unaccent": True}}))
    assert patched["settings"] == {"text_search": "french", "unaccent": True}
    terms = tool_terms(owner_conn, admin.tenant_id, "list_receipts")
    assert {"recus", "elev"} <= terms
    # Folded, and French stop words are still stop words, with accents ("été", "à") or not.
    assert not {"reçus", "élev", "les", "qui", "été", "ete", "à", "a"} & terms
    assert_index_is_a_recount(admin.tenant_id, database, owner_conn)
    # Typed with or without accents, one word.
    for query in ("recus des eleves", "reçus des élèves"):
        assert _found(agent, query) == [("list_receipts", ["elev", "recus"])]
    body = agent.ok(agent.select("creer une facture", mode="bm25", debug=True, k=10))
    config = f"{UNACCENT_SCHEMA}.french"
    expected = bm25_scores(owner_conn, admin.tenant_id, body["query"], set(), config=config)
    assert {c["name"]: c["score"] for c in body["candidates"]} == pytest.approx(expected)
    assert [c["name"] for c in body["candidates"]] == ["create_invoice"]

    # False (or null) folds no more: French stems with their accents again.
    admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"unaccent": False}}))
    assert {"reçus", "élev"} <= tool_terms(owner_conn, admin.tenant_id, "list_receipts")
    assert_index_is_a_recount(admin.tenant_id, database, owner_conn)
    assert _found(agent, "recus des eleves") == []


def test_a_twin_the_server_lacks_is_refused_and_changes_nothing(
    admin: Caller, owner_conn: OwnerConn
) -> None:
    """A server whose PostgreSQL gained a configuration after 0037 made the twins."""
    admin.ok(admin.put("/admin/v1/tools", {"tools": [tool_body(*t) for t in FRENCH]}))
    before = tool_terms(owner_conn, admin.tenant_id, "list_receipts")
    twin = f"{UNACCENT_SCHEMA}.french"
    owner_conn.execute(f"ALTER TEXT SEARCH CONFIGURATION {twin} RENAME TO french_gone")
    try:
        settings = {"text_search": "french", "unaccent": True}
        response = admin.patch("/admin/v1/tenant", {"settings": settings})
    finally:
        owner_conn.execute(f"ALTER TEXT SEARCH CONFIGURATION {twin}_gone RENAME TO french")
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "settings.unaccent"
    assert f"'{twin}'" in response.json()["error"]["message"]
    assert admin.ok(admin.get("/admin/v1/tenant"))["settings"] == {}
    assert tool_terms(owner_conn, admin.tenant_id, "list_receipts") == before


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


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        *(("text_search", v) for v in ["klingon", "German", "pg_catalog.german", 5, ["german"]]),
        *(("unaccent", v) for v in ["true", 1, [True], {"on": True}]),
    ],
)
def test_a_setting_postgresql_cannot_read_is_refused_and_changes_nothing(
    admin: Caller, owner_conn: OwnerConn, setting: str, value: Any
) -> None:
    admin.ok(admin.put("/admin/v1/tools", {"tools": [tool_body(*t) for t in CATALOG]}))
    before = tool_terms(owner_conn, admin.tenant_id, "create_invoice")
    response = admin.patch("/admin/v1/tenant", {"settings": {setting: value}})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == f"settings.{setting}"
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
    admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"unaccent": False}}))
    # The settings changes alone: no tool was written.
    assert _audited(owner_conn, admin) == audited + 2


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
