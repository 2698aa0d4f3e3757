"""Rank fusion: the lexical gate, its floor, and tenant overrides."""

from __future__ import annotations

import uuid

import pytest

from toolsift.selection.dense import Fusion, fuse, lift_companions

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


POSITION = {A: 1, B: 2, C: 3, D: 4}


class TestLiftCompanions:
    """Tools called together: the leads lift the candidates called in their selections."""

    def test_a_lead_lifts_a_companion_by_the_share_of_its_selections_times_its_score(
        self,
    ) -> None:
        fused = {A: 0.5, B: 0.1, C: 0.2}
        selections = {A: ["s1", "s2", "s3", "s4"], B: ["s1", "s2", "s3"]}
        lifted = lift_companions(fused, POSITION, selections, Fusion())
        assert lifted[B] == 0.1 + 0.5 * 3 / 4 * 0.5
        assert _order(lifted) == [A, B, C]
        # B, third, leads too: called in 3 selections, all of them A's, it lifts A.
        assert lifted[A] == 0.5 + 0.5 * 3 / 3 * 0.1
        assert lifted[C] == 0.2

    def test_lifts_add_in_the_leads_order(self) -> None:
        fused = {A: 0.4, B: 0.3, C: 0.01}
        selections = {A: ["s1", "s2"], B: ["s1", "s3"], C: ["s1", "s2", "s3"]}
        lifted = lift_companions(fused, POSITION, selections, Fusion())
        assert lifted[C] == 0.01 + (0.5 * 2 / 2 * 0.4 + 0.5 * 2 / 2 * 0.3)

    def test_only_the_first_leads_with_enough_selections_lift(self) -> None:
        fused = {A: 0.4, B: 0.3, C: 0.2, D: 0.1}
        selections = {A: ["s1", "s1"], D: ["s1", "s2"]}
        # A leads but was called in one selection (twice): below the support of 2.
        assert lift_companions(fused, POSITION, selections, Fusion()) == fused
        # D is fourth, beyond the three leads, whatever it was called with.
        selections = {D: ["s1", "s2"], A: ["s1", "s2"]}
        lifted = lift_companions(fused, POSITION, selections, Fusion())
        assert lifted[D] == 0.1 + 0.5 * 0.4
        assert lifted[A] == 0.4  # D does not lead, so A is not lifted

    def test_a_lead_counts_the_selections_of_its_latest_calls_only(self) -> None:
        fused = {A: 0.4, B: 0.1}
        # B was called with A once, before A's last two selections.
        selections = {A: ["s1", "s2", "s3", "s4"], B: ["s2"]}
        assert lift_companions(fused, POSITION, selections, Fusion(companion_window=2)) == fused
        lifted = lift_companions(fused, POSITION, selections, Fusion(companion_window=3))
        assert lifted[B] == 0.1 + 0.5 * 1 / 3 * 0.4

    def test_ties_for_the_leads_go_to_registry_position(self) -> None:
        fused = {A: 0.3, B: 0.3, C: 0.1}
        selections = {A: ["s1", "s2"], B: ["s3", "s4"], C: ["s1", "s2", "s3", "s4"]}
        lifted = lift_companions(fused, {A: 2, B: 1, C: 3}, selections, Fusion(companion_leads=1))
        assert lifted[C] == 0.1 + 0.5 * 0.3  # lifted by B, first by position
        assert lifted[A] == 0.3

    def test_no_tool_enters_by_the_lift_and_0_turns_it_off(self) -> None:
        fused = {A: 0.4, B: 0.3}
        selections = {A: ["s1", "s2"], D: ["s1", "s2"]}
        assert lift_companions(fused, POSITION, selections, Fusion()) == fused
        selections = {A: ["s1", "s2"], B: ["s1", "s2"]}
        off = Fusion(companion_weight=0.0)
        assert lift_companions(fused, POSITION, selections, off) == fused
