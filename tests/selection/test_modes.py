"""Dense and hybrid selection against real vectors from the ONNX backend."""

from __future__ import annotations

import pytest

from tests.fixtures.factories import Caller, agent_key, embed_pending, tool_body
from toolsift.db import Database
from toolsift.lexical.analysis import TEXT_SEARCH_CONFIG

QUERY = "cancel my subscription"
END = ("end_membership", "Stop a recurring plan and its future charges")


def _stems(database: Database, text_: str) -> set[str]:
    from sqlalchemy import text

    with database.unit_of_work(None) as session:
        return set(
            session.scalars(
                text("SELECT lexeme FROM unnest(to_tsvector(CAST(:c AS regconfig), :q))"),
                {"c": TEXT_SEARCH_CONFIG, "q": text_},
            )
        )


@pytest.fixture
def meaning_catalog(admin: Caller, database: Database) -> Caller:
    for name, description in [
        END,
        ("order_status", "Get the shipping status of an order"),
        ("weather_today", "Tell the forecast for a city"),
    ]:
        admin.ok(admin.post("/admin/v1/tools", tool_body(name, description)), 201)
    embed_pending(database, admin.tenant_id)
    return agent_key(admin, [])


class TestModes:
    def test_hybrid_finds_a_tool_by_meaning_alone(
        self, meaning_catalog: Caller, database: Database
    ) -> None:
        assert not _stems(database, QUERY) & _stems(database, " ".join(END))
        assert "end_membership" not in meaning_catalog.names(QUERY, mode="bm25", k=1)
        body = meaning_catalog.ok(meaning_catalog.select(QUERY, k=1, debug=True))
        assert body["mode"] == "hybrid"
        assert [t["name"] for t in body["tools"]] == ["end_membership"]
        assert body["missing_embeddings"] == 0
        first = body["candidates"][0]
        assert "bm25_rank" not in first  # not ranked by BM25: no shared word
        assert first["dense_rank"] == 1
        assert meaning_catalog.names(QUERY, mode="dense", k=1) == ["end_membership"]

    def test_tool_not_yet_embedded_is_selectable_by_bm25_and_counted(
        self, meaning_catalog: Caller, admin: Caller
    ) -> None:
        admin.ok(admin.post("/admin/v1/tools", tool_body("ship_parcel", "Ship a parcel")), 201)
        body = meaning_catalog.ok(meaning_catalog.select("ship a parcel", k=3))
        assert "ship_parcel" in [t["name"] for t in body["tools"]]
        assert body["missing_embeddings"] == 1

    def test_invalid_mode_is_422_naming_mode(self, meaning_catalog: Caller) -> None:
        response = meaning_catalog.select(QUERY, mode="semantic")
        assert response.status_code == 422
        assert "mode" in response.text
