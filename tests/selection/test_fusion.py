"""Rank fusion: the lexical gate, its floor, and tenant overrides."""

from __future__ import annotations

import uuid

import pytest

from toolsift.selection.dense import Fusion, fuse

A, B, C, D = (uuid.UUID(int=i) for i in range(1, 5))


def _order(scores: dict[uuid.UUID, float]) -> list[uuid.UUID]:
    return sorted(scores, key=lambda i: -scores[i])


class TestFuse:
    def test_strong_lexical_match_puts_bm25_first(self) -> None:
        # A query sharing many rare words with a tool: BM25's first beats dense's first.
        scores = fuse([A, B], [C, D], Fusion(), bm25_top=40.0)
        assert _order(scores) == [A, B, C, D]
        assert scores[A] == pytest.approx((40 / 53) / (3 + 1))
        assert scores[C] == pytest.approx((13 / 53) / (3 + 1))

    def test_weak_lexical_match_lets_dense_lead(self) -> None:
        scores = fuse([A, B], [C, D], Fusion(), bm25_top=2.0)
        assert _order(scores)[0] == C
        # The floor: BM25 keeps 0.45 of the weight, not 2 / 15.
        assert scores[A] == pytest.approx(0.45 / 4)
        assert scores[C] == pytest.approx(0.55 / 4)

    def test_floor_keeps_a_lexical_only_tool_ahead_of_dense_third(self) -> None:
        # A tool without a vector yet, found by its words alone, still makes a top 3.
        scores = fuse([A], [B, C, D], Fusion(), bm25_top=0.5)
        assert A in _order(scores)[:3]

    def test_the_floor_is_scaled_by_the_query_s_coverage(self) -> None:
        # BM25's first tool matched a quarter of the query (by idf): a quarter of the floor.
        scores = fuse([A], [B, C, D], Fusion(), bm25_top=0.5, bm25_coverage=0.25)
        assert scores[A] == pytest.approx(0.45 * 0.25 / 4)
        assert _order(scores)[:3] == [B, C, D]
        # A score above the scaled floor keeps its own share.
        scores = fuse([A], [B], Fusion(), bm25_top=13.0, bm25_coverage=0.1)
        assert scores[A] == pytest.approx(0.5 / 4)

    def test_no_lexical_match_is_dense_alone(self) -> None:
        scores = fuse([], [C, D], Fusion(), bm25_top=0.0)
        assert scores == {C: pytest.approx(1 / 4), D: pytest.approx(1 / 5)}

    def test_no_vectors_keeps_the_bm25_order(self) -> None:
        assert _order(fuse([B, A, C], [], Fusion(), bm25_top=7.0)) == [B, A, C]

    def test_a_tool_in_both_lists_sums_both(self) -> None:
        fusion = Fusion(k=60.0, bm25_scale=10.0, bm25_floor=0.0)
        scores = fuse([A, B], [B, A], fusion, bm25_top=10.0)
        assert scores[A] == pytest.approx(0.5 / 61 + 0.5 / 62)
        assert scores[A] == pytest.approx(scores[B])

    def test_usage_takes_its_weight_times_dense_s_share(self) -> None:
        # A strong lexical match (40 / 53 to BM25): usage gets 0.25 of dense's 13 / 53.
        scores = fuse([A], [B], Fusion(), bm25_top=40.0, usage_ids=[C, B])
        assert scores[C] == pytest.approx(0.25 * (13 / 53) / (3 + 1))
        assert scores[B] == pytest.approx((13 / 53) / (3 + 1) + 0.25 * (13 / 53) / (3 + 2))

    def test_no_usage_and_a_zero_weight_change_nothing(self) -> None:
        plain = fuse([A, B], [C, D], Fusion(), bm25_top=5.0)
        assert fuse([A, B], [C, D], Fusion(), bm25_top=5.0, usage_ids=[]) == plain
        off = Fusion(usage_weight=0.0)
        assert fuse([A, B], [C, D], off, bm25_top=5.0, usage_ids=[D, C]) == plain
