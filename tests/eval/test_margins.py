"""Margins over the better baseline and the target, and their bootstrap intervals."""

from __future__ import annotations

import numpy as np
import pytest

from toolsift_tooling.eval.margins import margins, paired_difference, target
from toolsift_tooling.eval.metrics import Outcome


def _outcomes(found: list[float]) -> list[Outcome]:
    """One query per value, with two relevant tools: 1.0 finds both, 0.5 one, 0.0 none."""
    names = {1.0: ["a", "b"], 0.5: ["a", "x"], 0.0: ["x", "y"]}
    return [Outcome(names[f], frozenset({"a", "b"}), 0, 0.0) for f in found]


class TestTarget:
    def test_five_points_over_the_baseline_or_half_its_misses_above_090(self) -> None:
        assert float(target(0.343, warm=False)) == pytest.approx(0.393)
        assert float(target(0.937, warm=False)) == pytest.approx(0.9685)
        assert float(target(0.90, warm=False)) == pytest.approx(0.95)

    def test_warm_halves_the_misses(self) -> None:
        assert float(target(0.222, warm=True)) == pytest.approx(0.611)
        assert float(target(0.343, warm=True)) == pytest.approx(0.6715)

    def test_a_resampled_array_is_judged_value_by_value(self) -> None:
        assert target(np.array([0.5, 0.95]), warm=False) == pytest.approx([0.55, 0.975])


class TestMargins:
    def test_the_same_answers_as_the_baseline_give_an_interval_of_zero_width(self) -> None:
        # Paired: an unpaired bootstrap would spread the difference of two noisy means.
        found = [1.0, 0.0, 0.5, 1.0, 0.0, 0.5, 1.0, 0.0]
        (margin,) = margins(
            {"hybrid": _outcomes(found), "baseline_dense": _outcomes(found)}, warm=False
        )
        assert margin.over_baseline == 0
        assert margin.over_baseline_interval == (0.0, 0.0)
        assert margin.over_target == pytest.approx(-0.05)

    def test_one_query_better_of_eight_is_not_a_sure_gain(self) -> None:
        base = [1.0, 0.0, 0.5, 1.0, 0.0, 0.5, 1.0, 0.0]
        better = [1.0, 1.0, 0.5, 1.0, 0.0, 0.5, 1.0, 0.0]
        (margin,) = margins(
            {"hybrid": _outcomes(better), "baseline_bm25s": _outcomes(base)}, warm=False
        )
        assert margin.recall == pytest.approx(5 / 8)
        assert margin.over_baseline == pytest.approx(1 / 8)
        low, high = margin.over_baseline_interval
        assert low == 0.0  # resamples without that query
        assert high == pytest.approx(3 / 8)  # resamples with it three times
        assert low < margin.over_baseline < high

    def test_better_on_every_query_is_a_sure_gain(self) -> None:
        (margin,) = margins(
            {"dense": _outcomes([1.0] * 20), "baseline_dense": _outcomes([0.0] * 20)},
            warm=False,
        )
        assert margin.over_baseline_interval == (1.0, 1.0)
        assert margin.over_target_interval == (pytest.approx(0.95), pytest.approx(0.95))

    def test_against_the_better_baseline_the_first_named_on_a_tie(self) -> None:
        modes = {
            "bm25": _outcomes([1.0, 0.5]),
            "hybrid": _outcomes([1.0, 1.0]),
            "baseline_bm25s": _outcomes([0.5, 0.0]),
            "baseline_dense": _outcomes([0.0, 1.0]),
        }
        found = margins(modes, warm=True)
        assert [m.mode for m in found] == ["bm25", "hybrid"]
        assert {m.baseline for m in found} == {"baseline_dense"}
        assert found[1].target == pytest.approx(0.75)
        tie = {"bm25": modes["bm25"], "baseline_dense": modes["baseline_dense"]}
        tie["baseline_bm25s"] = _outcomes([0.5, 0.5])
        assert margins(tie, warm=False)[0].baseline == "baseline_dense"

    def test_the_same_seed_gives_the_same_intervals(self) -> None:
        rng = np.random.default_rng(3)
        a = _outcomes(list(rng.choice([0.0, 0.5, 1.0], 50)))
        b = _outcomes(list(rng.choice([0.0, 0.5, 1.0], 50)))
        first = margins({"hybrid": a, "baseline_dense": b}, warm=False)
        assert margins({"hybrid": a, "baseline_dense": b}, warm=False) == first
        other = margins({"hybrid": a, "baseline_dense": b}, warm=False, seed=1)
        assert other[0].over_baseline_interval != first[0].over_baseline_interval

    def test_no_baseline_no_margins(self) -> None:
        assert margins({"hybrid": _outcomes([1.0])}, warm=False) == []

    def test_modes_that_answered_other_queries_are_refused(self) -> None:
        with pytest.raises(ValueError, match="answered 1 queries"):
            margins(
                {"hybrid": _outcomes([1.0]), "baseline_dense": _outcomes([1.0, 0.0])},
                warm=False,
            )

    def test_no_query_no_margins(self) -> None:
        assert margins({"hybrid": [], "baseline_dense": []}, warm=False) == []


class TestPairedDifference:
    def test_two_runs_that_differ_on_one_query_of_eight(self) -> None:
        base = [1.0, 0.0, 0.5, 1.0, 0.0, 0.5, 1.0, 0.0]
        better = [1.0, 1.0, 0.5, 1.0, 0.0, 0.5, 1.0, 0.0]
        gap, (low, high) = paired_difference(_outcomes(better), _outcomes(base))
        assert gap == pytest.approx(1 / 8)
        assert (low, high) == (0.0, pytest.approx(3 / 8))
        assert paired_difference(_outcomes(base), _outcomes(base)) == (0.0, (0.0, 0.0))

    def test_answers_to_other_queries_are_refused(self) -> None:
        with pytest.raises(ValueError, match="same queries"):
            paired_difference(_outcomes([1.0]), _outcomes([1.0, 0.0]))
        with pytest.raises(ValueError, match="same queries"):
            paired_difference([], [])
