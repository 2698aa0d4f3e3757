"""How far each served mode is above the better baseline and above its target, and how sure.

A check half of 25 queries (LiveMCPBench) moves by 0.04 of recall@5 when one query finds one
more of its three tools, so a margin of a few points can be the luck of which queries fell
in the half. Each margin comes with a 95 % interval from a paired bootstrap over queries:
the same resampled queries for the mode and the baseline, so what they share (a query
no one can answer) does not widen it.

The target is the one of docs/quality.md ("Targets"): the better baseline's recall@5 plus 5
points, or, where that baseline is already above 0.90, plus half of its misses; after
usage was learned (`--warm`), half of its misses. The baselines never learn, so in a warm
run they are the cold ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .metrics import Outcome, recall_at

#: The cut-off the targets are stated at.
TARGET_K = 5
#: Where a baseline is this good already, five more points may not exist: half its misses.
HIGH = 0.90
POINTS = 0.05
SAMPLES = 10_000
CONFIDENCE = 0.95

Array = npt.NDArray[np.float64]


def target(baseline: Array | float, *, warm: bool) -> Array:
    """The recall@5 a served mode must reach against `baseline` (the better one's)."""
    b = np.asarray(baseline, dtype=np.float64)
    halved = b + (1 - b) / 2
    return halved if warm else np.where(b > HIGH, halved, b + POINTS)


@dataclass(frozen=True)
class Margin:
    """One served mode against the better baseline and its target, at recall@5."""

    mode: str
    recall: float
    baseline: str
    baseline_recall: float
    over_baseline: float
    over_baseline_interval: tuple[float, float]
    target: float
    over_target: float
    over_target_interval: tuple[float, float]

    def as_json(self) -> dict[str, Any]:
        return {
            "recall@5": self.recall,
            "baseline": self.baseline,
            "baseline_recall@5": self.baseline_recall,
            "over_baseline": self.over_baseline,
            "over_baseline_ci95": list(self.over_baseline_interval),
            "target": self.target,
            "over_target": self.over_target,
            "over_target_ci95": list(self.over_target_interval),
        }


def per_query(outcomes: Sequence[Outcome]) -> Array:
    return np.array([recall_at(o.ranking, o.relevant, TARGET_K) for o in outcomes])


def margins(
    outcomes: Mapping[str, Sequence[Outcome]],
    *,
    warm: bool,
    samples: int = SAMPLES,
    seed: int = 0,
) -> list[Margin]:
    """A margin per served mode (every name not `baseline_...`), against the baseline with
    the better recall@5 on these queries; none without a baseline or a query."""
    recalls = {name: per_query(o) for name, o in outcomes.items()}
    baselines = {n: r for n, r in recalls.items() if n.startswith("baseline_") and len(r)}
    if not baselines:
        return []
    # The first named wins a tie, so a run's choice does not depend on a set's order.
    better = max(baselines, key=lambda n: (baselines[n].mean(), -list(baselines).index(n)))
    base = baselines[better]
    modes = [n for n in recalls if n not in baselines]
    for mode in modes:
        if len(recalls[mode]) != len(base):
            raise ValueError(f"{mode} answered {len(recalls[mode])} queries, {better} {len(base)}")
    means = _resampled_means(np.stack([base, *(recalls[m] for m in modes)]), samples, seed)
    base_means = means[:, 0]
    goal = float(target(base.mean(), warm=warm))
    tail = (1 - CONFIDENCE) / 2 * 100
    found = []
    for column, mode in enumerate(modes, start=1):
        served = recalls[mode]
        found.append(
            Margin(
                mode=mode,
                recall=float(served.mean()),
                baseline=better,
                baseline_recall=float(base.mean()),
                over_baseline=float(served.mean() - base.mean()),
                over_baseline_interval=_interval(means[:, column] - base_means, tail),
                target=goal,
                over_target=float(served.mean() - goal),
                over_target_interval=_interval(
                    means[:, column] - target(base_means, warm=warm), tail
                ),
            )
        )
    return found


def paired_difference(
    first: Sequence[Outcome], second: Sequence[Outcome], *, samples: int = SAMPLES, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """Recall@5 of `first` less that of `second`, two answers to the same queries in the
    same order (two runs, two modes), with its 95 % interval over the queries."""
    a, b = per_query(first), per_query(second)
    if len(a) != len(b) or not len(a):
        raise ValueError(f"two answers to the same queries are needed, not {len(a)} and {len(b)}")
    means = _resampled_means(np.stack([a, b]), samples, seed)
    tail = (1 - CONFIDENCE) / 2 * 100
    return float(a.mean() - b.mean()), _interval(means[:, 0] - means[:, 1], tail)


def _resampled_means(values: Array, samples: int, seed: int) -> Array:
    """One row per draw of the queries (the columns of `values`) with replacement, holding
    each row of `values` averaged over that draw. A draw is held as counts per query, in
    chunks, so 10,000 draws of 1,500 queries never sit in memory at once."""
    n = values.shape[1]
    rng = np.random.default_rng(seed)
    chunks = []
    for start in range(0, samples, 1000):
        counts = rng.multinomial(n, np.full(n, 1 / n), size=min(1000, samples - start))
        chunks.append(counts @ values.T / n)
    return np.vstack(chunks)


def _interval(values: Array, tail: float) -> tuple[float, float]:
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)
