"""What-if for learned usage in the fusion, in tune.py's loop: no API, no worker.

`toolsift eval --warm` replays one half of a dataset as usage (a select, then a call of each
relevant tool) and measures the other. This script models the same thing in seconds: a
learned query is the query text's vector under the tool called (at most 32 per tool, the
last ones), dense ranks a tool by the nearest of its own vector (to the query or one of its
steps, `tune.Tuner.distances`) and its learned ones (to the query), the usage list ranks
the tools by their nearest learned query (`dense.fuse`'s `usage_ids`), BM25 counts each
tool's learned queries' most frequent words in its document at a word weight
(`lexical.analysis.LEARNED_WEIGHT`, `LEARNED_TERMS`), and the fused leads lift the tools
called in the same selections, one per replayed query (`dense.lift_companions`).

Weights are chosen on the tune half alone: its queries are split again by a second hash
byte, one quarter learned and the other measured (`tuneQ`); with `--folds 2` also the other
way round (`tuneQ'`), and both pooled (`tune2`), twice the queries to choose on. Each row
ends with warm BM25 and warm dense, which hybrid should not fall below. `check` then learns
the whole tune half and measures the check half, as `toolsift eval --warm` does.

    python benchmarks/quality/usage.py /path/to/datasets/* --weights 0,0.25,0.5,0.75 \
        --word-weights 0.0625 --companions 0,0.25/3/2,0.5/3/2,0.5/3/1
"""

from __future__ import annotations

import argparse
import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from itertools import product
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import tune

from toolsift.embedding.learning import KEPT_PER_TOOL
from toolsift.lexical.analysis import LEARNED_TERMS, LEARNED_WEIGHT
from toolsift.selection import bm25, dense
from toolsift.selection.service import CANDIDATE_POOL


class Warm(NamedTuple):
    """recall@5 of one replay: hybrid under each fusion, then warm BM25 and warm dense."""

    hybrid: list[float]
    bm25: float
    dense: float


def pooled(a: Warm, a_queries: int, b: Warm, b_queries: int) -> Warm:
    """Two replays' recall@5 over the union of their measured queries (a mean of means,
    weighted by how many queries each measured)."""

    def mean(x: float, y: float) -> float:
        return (x * a_queries + y * b_queries) / (a_queries + b_queries)

    return Warm(
        [mean(x, y) for x, y in zip(a.hybrid, b.hybrid, strict=True)],
        mean(a.bm25, b.bm25),
        mean(a.dense, b.dense),
    )


def learns(query_id: str) -> bool:
    """Within the tune half: the quarter replayed as usage (the other is measured)."""
    return hashlib.sha1(query_id.encode()).digest()[1] % 2 == 0


class Replay(NamedTuple):
    """One dataset as the warm what-ifs replay it: what `warm_recall` reads, and the splits."""

    own: npt.NDArray[np.float64]  # queries by tools, `tune.Tuner.distances`
    queries: npt.NDArray[np.float32]  # the queries' vectors, what learned queries store
    tfs: list[dict[str, float]]
    terms: list[Counter[str]]
    tune_half: list[int]
    check_half: list[int]
    quarter: list[int]  # of the tune half, replayed (`learns`)
    rest: list[int]  # of the tune half, measured

    def rows(self) -> tuple[tuple[str, list[int], list[int]], ...]:
        """(label, learned from, measured): both ways round the tune half, then the check."""
        return (
            ("tuneQ", self.quarter, self.rest),
            ("tuneQ'", self.rest, self.quarter),
            ("check", self.tune_half, self.check_half),
        )


def replay_of(tuner: tune.Tuner, prepared: tune.Prepared) -> Replay:
    config = tune.Config()
    assert tuner.vectors is not None
    tune_half, check_half = tune.halves(prepared.dataset)
    ids = [q.id for q in prepared.dataset.queries]
    return Replay(
        own=tuner.distances(prepared, config),
        queries=tuner.vectors.embed(tuner._queries(prepared, config)),
        tfs=tuner.term_frequencies(prepared, config),
        terms=tuner.query_terms(prepared, config),
        tune_half=tune_half,
        check_half=check_half,
        quarter=[q for q in tune_half if learns(ids[q])],
        rest=[q for q in tune_half if not learns(ids[q])],
    )


def called_for(prepared: tune.Prepared, learned_from: Sequence[int]) -> dict[int, list[int]]:
    """Per tool: the replayed queries that called it (each once), in replay order: what a
    replay learns, as a tool's learned queries and the selections of its calls."""
    names = {name: i for i, name in enumerate(prepared.names)}
    per_tool: dict[int, list[int]] = defaultdict(list)
    for q in learned_from:
        for tool in prepared.dataset.queries[q].relevant:
            if tool in names and q not in per_tool[names[tool]]:
                per_tool[names[tool]].append(q)
    return per_tool


def nearest_first(distance: npt.NDArray[np.float64]) -> list[int]:
    """Indices of the finite distances, nearest first, ties by registry position."""
    order = np.lexsort((np.arange(len(distance)), distance))
    return [int(i) for i in order[np.isfinite(distance[order])][:CANDIDATE_POOL]]


def with_learned_words(
    tfs: Sequence[dict[str, float]],
    terms: Sequence[dict[str, int]],
    kept: Mapping[int, Sequence[int]],
    weight: float,
    cap: int = LEARNED_TERMS,
) -> list[dict[str, float]]:
    """Each tool's term frequencies plus its learned queries' `cap` most frequent words at
    `weight` (ties by lexeme), as `lexical.index.analyse` indexes them."""
    if weight <= 0:
        return list(tfs)
    learned = [dict(tf) for tf in tfs]
    for tool, queries in kept.items():
        counts: Counter[str] = Counter()
        for q in queries:
            counts.update(terms[q])
        for lexeme, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:cap]:
            learned[tool][lexeme] = learned[tool].get(lexeme, 0.0) + weight * count
    return learned


def warm_recall(
    prepared: tune.Prepared,
    tfs: Sequence[dict[str, float]],
    terms: Sequence[dict[str, int]],
    own_distances: npt.NDArray[np.float64],
    queries: npt.NDArray[np.float32],
    learned_from: Sequence[int],
    measured: Sequence[int],
    fusions: Sequence[dense.Fusion],
    word_weight: float,
    rescore: Callable[[dict[int, float]], dict[int, float]] | None = None,
) -> Warm:
    """recall@5 on `measured` after `learned_from` was replayed: hybrid per fusion, and its
    two components, which the issue's rule holds hybrid to. `rescore`, for a what-if, maps
    hybrid's final scores of a query before they are ranked."""
    per_tool = called_for(prepared, learned_from)
    kept = {t: qs[-KEPT_PER_TOOL:] for t, qs in per_tool.items()}
    tools = own_distances.shape[1]
    position = {t: t for t in range(tools)}
    documents = with_learned_words(tfs, terms, kept, word_weight)
    scored = tune.rank_bm25(documents, [terms[q] for q in measured], k1=bm25.K1, b=bm25.B)
    lexical = dict(zip(measured, scored, strict=True))
    rankings: list[list[list[int]]] = [[[] for _ in prepared.dataset.queries] for _ in fusions]
    bm25_runs: list[list[int]] = [[] for _ in prepared.dataset.queries]
    dense_runs: list[list[int]] = [[] for _ in prepared.dataset.queries]
    for q in measured:
        own = own_distances[q]
        learned = np.full(tools, np.inf)
        for t, qs in kept.items():
            learned[t] = float(np.min(1.0 - queries[np.array(qs)] @ queries[q]))
        dense_ids = nearest_first(np.minimum(own, learned))
        usage_ids = nearest_first(learned)
        r = lexical[q]
        bm25_runs[q], dense_runs[q] = r.ids, dense_ids
        for f, fusion in enumerate(fusions):
            fused = dense.fuse(
                r.ids,
                dense_ids,
                fusion,
                bm25_top=r.scores[0] if r.scores else 0.0,
                bm25_coverage=r.coverage,
                usage_ids=usage_ids,
            )
            # Each replayed query is one selection that called its relevant tools, in order.
            lifted = dense.lift_companions(fused, position, per_tool, fusion)
            if rescore is not None:
                lifted = rescore(lifted)
            rankings[f][q] = sorted(lifted, key=lambda i: (-lifted[i], i))
    return Warm(
        [tune.recall5(prepared, runs, measured) for runs in rankings],
        tune.recall5(prepared, bm25_runs, measured),
        tune.recall5(prepared, dense_runs, measured),
    )


def companion(spec: str) -> dense.Fusion:
    """The fusion's defaults with `weight[/leads[/support[/window]]]` of the tools called
    together."""
    weight, *rest = spec.split("/")
    fusion = replace(dense.Fusion(), companion_weight=float(weight))
    for name, value in zip(
        ("companion_leads", "companion_support", "companion_window"), rest, strict=False
    ):
        fusion = replace(fusion, **{name: int(value)})
    return fusion


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    parser.add_argument("--weights", default="0,0.25,0.5,0.75", help="usage_weight values")
    parser.add_argument(
        "--word-weights", default=f"0,{LEARNED_WEIGHT}", help="learned words' weights, one row each"
    )
    default = dense.Fusion()
    parser.add_argument(
        "--companions",
        default=f"0,{default.companion_weight}",
        help="tools called together, one row each: weight[/leads[/support[/window]]] (the"
        f" defaults {default.companion_weight}/{default.companion_leads}"
        f"/{default.companion_support}/{default.companion_window})",
    )
    parser.add_argument(
        "--folds",
        type=int,
        choices=(1, 2),
        default=1,
        help="2: also learn the other quarter and measure the first (tuneQ'), and pool both",
    )
    args = parser.parse_args()
    weights = [float(w) for w in args.weights.split(",")]
    word_weights = [float(w) for w in args.word_weights.split(",")]
    companions = [companion(spec) for spec in args.companions.split(",")]
    print(f"{'usage_weight':<46}" + " ".join(f"{w:>6}" for w in weights))
    with tune.session(args.cache) as tuner:
        for directory, prepared in tune.each_dataset(tuner, args.datasets):
            data = replay_of(tuner, prepared)
            for word_weight, lift in product(word_weights, companions):
                fusions = [replace(lift, usage_weight=w) for w in weights]

                replay = partial(
                    warm_recall,
                    prepared,
                    data.tfs,
                    data.terms,
                    data.own,
                    data.queries,
                    fusions=fusions,
                    word_weight=word_weight,
                )
                quarter, rest = data.quarter, data.rest
                rows = [("tuneQ", replay(quarter, rest))]
                if args.folds == 2:
                    rows.append(("tuneQ'", replay(rest, quarter)))
                    rows.append(("tune2", pooled(rows[0][1], len(rest), rows[1][1], len(quarter))))
                rows.append(("check", replay(data.tune_half, data.check_half)))
                spec = (
                    f"{lift.companion_weight}/{lift.companion_leads}"
                    f"/{lift.companion_support}/{lift.companion_window}"
                )
                for label, warm in rows:
                    cells = " ".join(f"{x:6.3f}" for x in warm.hybrid)
                    row = f"{directory.name:<17} {label:<6} w{word_weight:<7} c{spec:<12}"
                    print(f"{row} {cells}  bm25 {warm.bm25:.3f} dense {warm.dense:.3f}", flush=True)


if __name__ == "__main__":
    main()
