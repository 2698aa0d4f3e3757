"""Metrics against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from toolsift_tooling.eval.metrics import Outcome, ndcg_at, recall_at, reciprocal_rank, summarise


class TestRecall:
    def test_fraction_of_relevant_found_in_the_first_k(self) -> None:
        ranking = ["a", "x", "b", "y"]
        assert recall_at(ranking, {"a", "b"}, 1) == 0.5
        assert recall_at(ranking, {"a", "b"}, 3) == 1.0
        assert recall_at(ranking, {"a", "b", "c"}, 10) == pytest.approx(2 / 3)

    def test_a_short_ranking_counts_what_it_has(self) -> None:
        assert recall_at([], {"a"}, 5) == 0.0

    def test_no_relevant_tools_is_an_error(self) -> None:
        with pytest.raises(ValueError, match="relevant"):
            recall_at(["a"], set(), 1)


class TestNdcg:
    def test_relevant_at_ranks_two_and_three(self) -> None:
        # DCG = 1/log2(3) + 1/log2(4) = 0.63093 + 0.5; IDCG = 1 + 1/log2(3) = 1.63093
        expected = (1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3))
        assert ndcg_at(["x", "a", "b"], {"a", "b"}, 10) == pytest.approx(expected)
        assert expected == pytest.approx(0.69342, abs=1e-5)

    def test_perfect_and_empty(self) -> None:
        assert ndcg_at(["a", "b", "x"], {"a", "b"}, 10) == 1.0
        assert ndcg_at(["x", "y"], {"a"}, 10) == 0.0

    def test_ideal_is_capped_at_k(self) -> None:
        # Three relevant, k = 2, both slots relevant: as good as it gets.
        assert ndcg_at(["a", "b", "c"], {"a", "b", "c"}, 2) == 1.0

    def test_a_repeated_name_gains_once(self) -> None:
        assert ndcg_at(["a", "a"], {"a", "b"}, 10) == pytest.approx(1 / (1 + 1 / math.log2(3)))


class TestReciprocalRank:
    def test_first_relevant_rank(self) -> None:
        assert reciprocal_rank(["x", "y", "a", "b"], {"a", "b"}, 10) == pytest.approx(1 / 3)

    def test_beyond_depth_scores_zero(self) -> None:
        assert reciprocal_rank(["x", "y", "a"], {"a"}, 2) == 0.0


class TestSummarise:
    def test_means_tokens_and_latency(self) -> None:
        outcomes = [
            Outcome(["a", "x"], frozenset({"a"}), tokens=100, latency_ms=10.0),
            Outcome(["x", "b"], frozenset({"b", "c"}), tokens=300, latency_ms=30.0),
        ]
        result = summarise(outcomes, ks=[1, 2], catalog_tokens=1000)
        assert result["recall@1"] == 0.5  # (1 + 0) / 2
        assert result["recall@2"] == 0.75  # (1 + 1/2) / 2
        assert result["mrr"] == 0.75  # (1 + 1/2) / 2
        # ndcg: 1 and (1/log2(3)) / (1 + 1/log2(3))
        second = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
        assert result["ndcg@10"] == pytest.approx((1 + second) / 2)
        assert result["tokens_mean"] == 200
        assert result["tokens_fraction"] == 0.2
        assert result["latency_p50_ms"] == 20.0
        assert result["latency_p95_ms"] == pytest.approx(29.0)
        assert result["queries"] == 2

    def test_mrr_is_at_10_whatever_the_k(self) -> None:
        outcomes = [Outcome(["x", "y", "a"], frozenset({"a"}), tokens=1, latency_ms=1.0)]
        for ks in ([1], [1, 3], [1, 3, 5, 10]):
            assert summarise(outcomes, ks=ks, catalog_tokens=10)["mrr"] == pytest.approx(1 / 3)
