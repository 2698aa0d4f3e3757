"""What-if: demote the tools that selections offered and the model then passed over.

Some tools reach the top of many unrelated selections: long, instruction-heavy descriptions
("You MUST use this tool BEFORE any search ...") match the common words of most requests.
The logs know them: offered again and again, seldom called. Here the replayed tune queries'
cold selections (hybrid's top 5) count, per tool, the times it was offered to a query that
did not call it (`passes`) and the times it was called (`calls`); the warm select of
`usage.py` then multiplies a tool's final score by

    (calls + 1) / (calls + 1 + gamma * passes)

so a tool never called and offered four times keeps half its score at gamma 0.25
(`--never-called`: only tools never called are demoted, by 1 / (1 + gamma * passes)). Rows as
in `usage.py --folds 2` (`tuneQ`, `tuneQ'`), then `check`, the whole tune half learned.

    python benchmarks/quality/passed_over.py /path/to/datasets/* --gammas 0,0.1,0.25,0.5,1
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import tune
from usage import nearest_first, replay_of, warm_recall

from toolsift.lexical.analysis import LEARNED_WEIGHT
from toolsift.selection import bm25, dense

OFFERED = 5


def offers(
    prepared: tune.Prepared,
    tfs: Sequence[dict[str, float]],
    terms: Sequence[dict[str, int]],
    own: npt.NDArray[np.float64],
    replayed: Sequence[int],
) -> tuple[Counter[int], Counter[int]]:
    """Per tool: times offered (cold hybrid's top `OFFERED`) to a replayed query that did not
    call it, and times called."""
    names = {name: i for i, name in enumerate(prepared.names)}
    passes: Counter[int] = Counter()
    calls: Counter[int] = Counter()
    scored = tune.rank_bm25(tfs, [terms[q] for q in replayed], k1=bm25.K1, b=bm25.B)
    near = [nearest_first(own[q]) for q in replayed]
    for q, ranking in zip(replayed, tune.Tuner.hybrid(scored, near, dense.Fusion()), strict=True):
        called = {names[t] for t in prepared.dataset.queries[q].relevant if t in names}
        calls.update(called)
        passes.update(t for t in ranking[:OFFERED] if t not in called)
    return passes, calls


def demotion(
    passes: Counter[int], calls: Counter[int], gamma: float, *, never_called: bool = False
) -> Callable[[dict[int, float]], dict[int, float]]:
    def factor(t: int) -> float:
        if never_called:
            return 1.0 if calls[t] else 1 / (1 + gamma * passes[t])
        return (calls[t] + 1) / (calls[t] + 1 + gamma * passes[t])

    def rescore(scores: dict[int, float]) -> dict[int, float]:
        return {t: s * factor(t) for t, s in scores.items()}

    return rescore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    parser.add_argument("--gammas", default="0,0.1,0.25,0.5,1")
    parser.add_argument("--never-called", action="store_true", help="demote only those")
    args = parser.parse_args()
    gammas = [float(g) for g in args.gammas.split(",")]
    print(f"{'gamma':<25}" + " ".join(f"{g:>6}" for g in gammas) + "  never called, passed over")
    with tune.session(args.cache) as tuner:
        for directory, prepared in tune.each_dataset(tuner, args.datasets):
            data = replay_of(tuner, prepared)
            for label, replayed, measured in data.rows():
                passes, calls = offers(prepared, data.tfs, data.terms, data.own, replayed)
                cells = [
                    warm_recall(
                        prepared,
                        data.tfs,
                        data.terms,
                        data.own,
                        data.queries,
                        replayed,
                        measured,
                        [dense.Fusion()],
                        LEARNED_WEIGHT,
                        rescore=demotion(passes, calls, gamma, never_called=args.never_called),
                    ).hybrid[0]
                    for gamma in gammas
                ]
                hubs = sum(1 for t in passes if not calls[t])
                print(
                    f"{directory.name:<17} {label:<7}"
                    + " ".join(f"{c:6.3f}" for c in cells)
                    + f"  {hubs}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
