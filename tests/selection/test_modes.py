"""Dense and hybrid selection against real vectors from the ONNX backend."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from tests.fixtures.factories import Caller, agent_key, embed_pending, tool_body
from toolsift.db import Database
from toolsift.lexical.analysis import TEXT_SEARCH_CONFIG

QUERY = "cancel my subscription"
END = ("end_membership", "Stop a recurring plan and its future charges")
OwnerConn = psycopg.Connection[tuple[Any, ...]]


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


class TestFusionSettings:
    @pytest.mark.parametrize(
        ("fusion", "field"),
        [
            ({"k": 0}, "settings.fusion.k"),
            ({"k": -5}, "settings.fusion.k"),
            ({"k": "60"}, "settings.fusion.k"),
            ({"k": True}, "settings.fusion.k"),
            ({"bm25_weight": -1}, "settings.fusion.bm25_weight"),
            ({"dense_weight": "heavy"}, "settings.fusion.dense_weight"),
            ({"dense_wieght": 2}, "settings.fusion.dense_wieght"),
            ({"bm25_scale": 0}, "settings.fusion.bm25_scale"),
            ({"bm25_floor": 1.5}, "settings.fusion.bm25_floor"),
            ({"usage_weight": -0.5}, "settings.fusion.usage_weight"),
            ({"usage_weight": "on"}, "settings.fusion.usage_weight"),
            ({"companion_weight": -1}, "settings.fusion.companion_weight"),
            ({"companion_leads": 0}, "settings.fusion.companion_leads"),
            ({"companion_leads": 2.5}, "settings.fusion.companion_leads"),
            ({"companion_support": "2"}, "settings.fusion.companion_support"),
            ({"companion_window": 1001}, "settings.fusion.companion_window"),
            ({"k": 1e300}, "settings.fusion.k"),
            ({"bm25_weight": 1e7}, "settings.fusion.bm25_weight"),
            ({"bm25_weight": 0, "dense_weight": 0}, "settings.fusion"),
            ("fast", "settings.fusion"),
        ],
    )
    def test_a_bad_value_is_422_naming_it_and_changes_nothing(
        self, admin: Caller, fusion: Any, field: str
    ) -> None:
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": {"k": 30}}}))
        response = admin.patch("/admin/v1/tenant", {"settings": {"fusion": fusion, "x": 1}})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == field
        assert admin.ok(admin.get("/admin/v1/tenant"))["settings"] == {"fusion": {"k": 30}}

    def test_weights_that_become_both_0_by_the_merge_are_422(self, admin: Caller) -> None:
        """Hybrid would score every tool 0 and answer in registry order."""
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": {"bm25_weight": 0}}}))
        response = admin.patch("/admin/v1/tenant", {"settings": {"fusion": {"dense_weight": 0}}})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "settings.fusion"
        stored = admin.ok(admin.get("/admin/v1/tenant"))["settings"]
        assert stored == {"fusion": {"bm25_weight": 0}}

    def test_settings_merge_key_by_key_at_every_depth(self, admin: Caller) -> None:
        admin.ok(
            admin.patch("/admin/v1/tenant", {"settings": {"fusion": {"k": 30}, "a": {"b": 1}}})
        )
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": {"bm25_weight": 2.0}}}))
        stored = admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"a": {"c": 2}}}))
        assert stored["settings"] == {
            "fusion": {"k": 30, "bm25_weight": 2.0},
            "a": {"b": 1, "c": 2},
        }
        reset = admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": {"k": None}}}))
        assert reset["settings"]["fusion"] == {"bm25_weight": 2.0}

    def test_weights_steer_hybrid_and_other_settings_are_kept(
        self, meaning_catalog: Caller, admin: Caller
    ) -> None:
        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"note": "kept"}}))
        settings = {"fusion": {"bm25_weight": 0, "dense_weight": 1.0, "bm25_floor": 0.2}}
        stored = admin.ok(admin.patch("/admin/v1/tenant", {"settings": settings}))["settings"]
        assert stored == {"note": "kept", **settings}
        # Without BM25's weight the fused order is the dense order, whatever the words say.
        query = "shipping status of an order"
        dense = meaning_catalog.ok(meaning_catalog.select(query, mode="dense", k=3, debug=True))
        hybrid = meaning_catalog.ok(meaning_catalog.select(query, k=3, debug=True))
        assert [c["name"] for c in hybrid["candidates"]] == [c["name"] for c in dense["candidates"]]


class TestComponentRanks:
    def test_in_debug_output_and_in_the_log(
        self, meaning_catalog: Caller, owner_conn: OwnerConn
    ) -> None:
        body = meaning_catalog.ok(
            meaning_catalog.select("get the shipping status of an order", k=1, debug=True)
        )
        top = body["candidates"][0]
        assert (top["name"], top["bm25_rank"], top["dense_rank"]) == ("order_status", 1, 1)
        row = owner_conn.execute(
            "SELECT mode, details, candidate_count FROM selection_logs WHERE id = %s",
            (body["selection_id"],),
        ).fetchone()
        assert row is not None
        mode, details, candidate_count = row
        assert mode == "hybrid"
        assert details == [
            {
                "name": "order_status",
                "reason": "ranked",
                "bm25_rank": 1,
                "dense_rank": 1,
                "usage_rank": None,
                "companion_lift": None,
            }
        ]
        assert candidate_count == len(body["candidates"])


class TestQueryEmbeddingCache:
    def test_the_api_process_embeds_a_text_once(
        self, meaning_catalog: Caller, client: TestClient
    ) -> None:
        first = meaning_catalog.ok(meaning_catalog.select(QUERY, k=1, debug=True))
        embedder = client.app.state.query_embedder  # type: ignore[attr-defined]
        before = embedder.stats()
        again = meaning_catalog.ok(meaning_catalog.select(QUERY, k=1, debug=True))
        after = embedder.stats()
        assert (after.hits, after.misses) == (before.hits + 1, before.misses)
        assert again["candidates"] == first["candidates"]
        meaning_catalog.ok(meaning_catalog.select(QUERY + " now", k=1))
        assert embedder.stats().misses == before.misses + 1


class TestServedFusion:
    """The fusion runs in SQL (`toolsift_select`); `dense.fuse` is its model for tuning."""

    @pytest.mark.parametrize(
        "fusion",
        [
            {},
            {"k": 30, "bm25_weight": 2.0, "dense_weight": 0.5},
            {"bm25_scale": 0.5, "bm25_floor": 0.9},
        ],
    )
    def test_scores_are_the_python_model_s_floats(
        self, meaning_catalog: Caller, admin: Caller, fusion: dict[str, float]
    ) -> None:
        from toolsift.selection.dense import Fusion, fuse

        admin.ok(admin.patch("/admin/v1/tenant", {"settings": {"fusion": fusion}}))
        for query in ("get the shipping status of an order", "cancel my subscription", "order"):
            lexical = meaning_catalog.ok(
                meaning_catalog.select(query, mode="bm25", k=50, debug=True)
            )["candidates"]
            served = meaning_catalog.ok(meaning_catalog.select(query, k=50, debug=True))
            by_rank = sorted(served["candidates"], key=lambda c: c.get("dense_rank") or 99)
            dense_ids = [c["name"] for c in by_rank if "dense_rank" in c]
            expected = fuse(
                [c["name"] for c in lexical],
                dense_ids,
                Fusion(**fusion),
                bm25_top=lexical[0]["score"] if lexical else 0.0,
                bm25_coverage=served.get("bm25_coverage", 1.0),
            )
            # Floats compared with ==: the same operations in the same order.
            assert {c["name"]: c["score"] for c in served["candidates"]} == expected

    def test_settings_stored_out_of_bounds_fall_back_per_field(
        self, meaning_catalog: Caller, admin: Caller, owner_conn: OwnerConn
    ) -> None:
        from psycopg.types.json import Jsonb

        query = "get the shipping status of an order"
        default = meaning_catalog.ok(meaning_catalog.select(query, k=50, debug=True))
        # As written before settings were validated: bad values, not refused by the API.
        stored: list[object] = [
            "fast",
            {"k": 0},
            {"k": -1},
            {"bm25_scale": 0},
            {"bm25_floor": 1.5},
            {"bm25_floor": -0.1},
            {"usage_weight": -1},
            {"companion_weight": -1},
            {"companion_leads": 0},
            {"companion_leads": 1000},
            {"companion_support": 0},
            {"companion_window": 0},
            {"bm25_weight": -1},
            {"k": True},
            {"bm25_scale": "10"},
            {"dense_weight": None},
        ]
        for fusion in stored:
            owner_conn.execute(
                "UPDATE tenants SET settings = %s WHERE id = %s",
                (Jsonb({"fusion": fusion}), admin.tenant_id),
            )
            fallen = meaning_catalog.ok(meaning_catalog.select(query, k=50, debug=True))
            assert fallen["candidates"] == default["candidates"], fusion
        # Several at once, and a number beyond a double (Python reads it as infinity).
        owner_conn.execute(
            """UPDATE tenants SET settings = '{"fusion": {"k": -1, "bm25_weight": "x",
               "dense_weight": true, "bm25_scale": 1e400, "bm25_floor": 2}}' WHERE id = %s""",
            (admin.tenant_id,),
        )
        fallen = meaning_catalog.ok(meaning_catalog.select(query, k=50, debug=True))
        assert fallen["candidates"] == default["candidates"]


class TestWordsMatched:
    """The log says whether the query's words matched a tool: in hybrid mode dense ranks every
    embedded tool, so that count is what shows a question the catalog has no words for."""

    def _logged(self, owner_conn: OwnerConn, body: dict[str, Any]) -> tuple[int, int | None]:
        row = owner_conn.execute(
            "SELECT candidate_count, lexical_count FROM selection_logs WHERE id = %s",
            (body["selection_id"],),
        ).fetchone()
        assert row is not None
        return row[0], row[1]

    def test_counted_per_mode(self, meaning_catalog: Caller, owner_conn: OwnerConn) -> None:
        def logged(query: str, mode: str) -> tuple[int, int | None]:
            return self._logged(
                owner_conn, meaning_catalog.ok(meaning_catalog.select(query, mode=mode))
            )

        assert logged(QUERY, "hybrid") == (3, 0)  # dense ranked all three, no word matched
        assert logged("shipping status of an order", "hybrid") == (3, 1)
        assert logged("shipping status of an order", "bm25") == (1, 1)
        assert logged(QUERY, "bm25") == (0, 0)
        assert logged(QUERY, "dense") == (3, None)  # words are not scored

    def test_a_hybrid_select_no_word_matched_is_a_gap_in_the_catalog(
        self, meaning_catalog: Caller, admin: Caller
    ) -> None:
        meaning_catalog.ok(meaning_catalog.select(QUERY))
        meaning_catalog.ok(meaning_catalog.select("shipping status of an order"))
        meaning_catalog.ok(meaning_catalog.select(QUERY, mode="dense"))
        found = admin.ok(admin.get("/admin/v1/analytics/zero-results"))
        assert [(r["kind"], r["query"], r["selections"]) for r in found] == [
            ("no_word_match", QUERY, 1)
        ]


class TestCoverage:
    """BM25's floor in the fusion is scaled by the query's coverage in BM25's first tool."""

    def test_a_first_tool_matching_every_word_keeps_the_whole_floor(
        self, meaning_catalog: Caller
    ) -> None:
        query = "get the shipping status of an order"
        body = meaning_catalog.ok(meaning_catalog.select(query, k=1, debug=True))
        assert body["candidates"][0]["name"] == "order_status"
        assert body["bm25_coverage"] == 1.0

    def test_it_is_the_idf_share_of_the_words_the_catalog_has(
        self, meaning_catalog: Caller
    ) -> None:
        # "order" and "forecast" are each in one tool of three: the same idf.
        half = meaning_catalog.ok(meaning_catalog.select("order forecast", k=1, debug=True))
        assert half["bm25_coverage"] == 0.5
        # Words no tool has (an id, a name) say nothing of which tool the words point to.
        body = meaning_catalog.ok(meaning_catalog.select("order forecast zx-88123", debug=True))
        assert body["bm25_coverage"] == 0.5

    def test_a_tool_not_embedded_yet_keeps_its_floor_beside_an_id_and_a_city(
        self, meaning_catalog: Caller, admin: Caller
    ) -> None:
        admin.ok(admin.post("/admin/v1/tools", tool_body("ship_parcel", "Ship a parcel")), 201)
        body = meaning_catalog.ok(
            meaning_catalog.select("please ship parcel 88123 to Lyon, thanks", k=3, debug=True)
        )
        assert body["missing_embeddings"] == 1
        assert body["bm25_coverage"] == 1.0
        assert "ship_parcel" in [t["name"] for t in body["tools"]]

    @pytest.mark.parametrize("mode", ["bm25", "dense"])
    def test_only_a_hybrid_select_reports_it(self, meaning_catalog: Caller, mode: str) -> None:
        body = meaning_catalog.ok(meaning_catalog.select("order", mode=mode, debug=True))
        assert "bm25_coverage" not in body
        assert "bm25_coverage" not in meaning_catalog.ok(meaning_catalog.select("order"))
