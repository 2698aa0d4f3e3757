"""Would a fusion learned from the tune halves rank better than the hand-made one?

The served fusion (`toolsift.selection.dense.fuse`) is reciprocal-rank fusion with a gate and
a floor, their constants chosen by hand on the tune halves. This asks whether a linear
scorer over the evidence `toolsift_select` already has for each candidate (ranks, BM25 score
against the best, cosine against the best and against the catalog's spread, the share of
the query's words the tool has) does better, fitted with a listwise softmax loss. Without
`--check`, it chooses: each variant (features / L2 / weighting of the datasets) is fitted on
one fold of the tune halves and scored on the other, both ways. With `--check VARIANT`, that
variant is fitted on the whole tune halves and scored on the check halves, and, to ask what
a new tenant would get, with each dataset left out of the fit in turn (docs/quality.md,
"A fusion learned from the tune halves").

    python benchmarks/quality/learned_fusion.py /path/to/datasets/*
    python benchmarks/quality/learned_fusion.py /path/to/datasets/* --depth 100 --check gaps/0.01/sqrt"""

from __future__ import annotations

import argparse
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tune import CACHE, Config, Prepared, Tuner, each_dataset, halves, recall5, session

from toolsift.selection import dense

Array = npt.NDArray[np.float64]
FEATURES = (
    "fused",
    "bm25_rrf",
    "dense_rrf",
    "bm25_rel",
    "coverage",
    "cosine_gap",
    "cosine_z",
    "share*bm25_rel",
    "share*coverage",
    "(1-share)*cosine_gap",
    "(1-share)*cosine_z",
    "bm25_and_dense_top10",
)


@dataclass
class Query:
    """One query's candidates, their features and whether each is relevant."""

    candidates: list[int]  # tool indices
    x: Array  # candidates x features
    relevant: Array  # 0/1 per candidate
    rest: list[int]  # the served ranking after the candidates, for depth


def featurise(tuner: Tuner, prepared: Prepared, config: Config, depth: int) -> list[Query]:
    """Each query's candidates: the served fusion's first `depth` and BM25's first `depth`."""
    fusion = config.fusion
    tfs = tuner.term_frequencies(prepared, config)
    terms = tuner.query_terms(prepared, config)
    lexical = tuner.bm25_scored(prepared, config)
    distances = tuner.distances(prepared, config)
    n = len(tfs)
    df: dict[str, int] = {}
    for tf in tfs:
        for term in tf:
            df[term] = df.get(term, 0) + 1
    names = prepared.names
    queries: list[Query] = []
    for q, (lex, words, distance) in enumerate(zip(lexical, terms, distances, strict=True)):
        idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in set(words) if t in df}
        known = sum(idf.values()) or 1.0
        top = lex.scores[0] if lex.scores else 0.0
        share = dense.lexical_share(fusion, top, lex.coverage) if lex.ids else 0.0
        dense_order = np.lexsort((np.arange(n), distance))
        dense_rank = {int(t): r for r, t in enumerate(dense_order[:100], start=1)}
        bm25_rank = {t: r for r, t in enumerate(lex.ids, start=1)}
        bm25_score = dict(zip(lex.ids, lex.scores, strict=True))
        fused = dense.fuse(
            lex.ids,
            [int(t) for t in dense_order[:100]],
            fusion,
            bm25_top=top,
            bm25_coverage=lex.coverage,
        )
        served = sorted(fused, key=lambda i: (-fused[i], i))
        candidates = list(dict.fromkeys(served[:depth] + lex.ids[:depth]))
        cosine = 1.0 - distance
        best, mean, spread = cosine.max(), cosine.mean(), cosine.std() or 1.0
        rows = []
        for t in candidates:
            rb = share / (fusion.k + bm25_rank[t]) if t in bm25_rank else 0.0
            rd = (1 - share) / (fusion.k + dense_rank[t]) if t in dense_rank else 0.0
            rel = bm25_score.get(t, 0.0) / top if top > 0 else 0.0
            cov = sum(v for w, v in idf.items() if w in tfs[t]) / known
            gap = cosine[t] - best
            z = (cosine[t] - mean) / spread
            rows.append(
                [
                    fused.get(t, 0.0),
                    rb,
                    rd,
                    rel,
                    cov,
                    gap,
                    z,
                    share * rel,
                    share * cov,
                    (1 - share) * gap,
                    (1 - share) * z,
                    float(t in bm25_rank and dense_rank.get(t, 999) <= 10),
                ]
            )
        relevant = set(prepared.dataset.queries[q].relevant)
        chosen = set(candidates)
        queries.append(
            Query(
                candidates,
                np.array(rows, dtype=np.float64),
                np.array([float(names[t] in relevant) for t in candidates]),
                [t for t in served if t not in chosen],
            )
        )
    return queries


def train(
    groups: Sequence[tuple[Sequence[Query], float]], *, l2: float, steps: int = 400
) -> tuple[Array, Array, Array]:
    """Listwise softmax over each query's candidates, the relevant ones the targets; each
    group (dataset) weighted as given. Returns weights and the features' mean and scale."""
    stacked = np.vstack([q.x for qs, _ in groups for q in qs])
    mu, sd = stacked.mean(0), stacked.std(0)
    sd[sd == 0] = 1.0
    xs, targets, weights, starts = [], [], [], []
    offset = 0
    for qs, weight in groups:
        useful = [q for q in qs if q.relevant.any()]
        for q in useful:
            xs.append((q.x - mu) / sd)
            targets.append(q.relevant / q.relevant.sum())
            weights.append(np.full(len(q.x), weight / len(useful)))
            starts.append(offset)
            offset += len(q.x)
    x, target, row_weight = np.vstack(xs), np.concatenate(targets), np.concatenate(weights)
    start = np.array(starts)
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(start, offset)))
    w = np.zeros(stacked.shape[1])
    w[0] = 1.0  # start at the served fusion
    m, v = np.zeros_like(w), np.zeros_like(w)
    for step in range(1, steps + 1):
        s = x @ w
        e = np.exp(s - np.maximum.reduceat(s, start)[group])
        p = e / np.add.reduceat(e, start)[group]
        grad = 2 * l2 * w + x.T @ (row_weight * (p - target))
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        w -= 0.05 * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
    return w, mu, sd


def rank(q: Query, model: tuple[Array, Array, Array] | None) -> list[int]:
    """The candidates by the model's score (by the served fusion's without one), ties by
    registry position, then the rest in the served order."""
    if model is None:
        scores = q.x[:, 0]
    else:
        w, mu, sd = model
        scores = ((q.x - mu) / sd) @ w
    order = sorted(range(len(q.candidates)), key=lambda i: (-scores[i], q.candidates[i]))
    return [q.candidates[i] for i in order] + q.rest


FEATURE_SETS = {
    "all": FEATURES,
    "no z": tuple(f for f in FEATURES if "cosine_z" not in f),
    "gaps": (
        "fused",
        "bm25_rel",
        "coverage",
        "cosine_gap",
        "share*bm25_rel",
        "(1-share)*cosine_gap",
    ),
}


def columns(queries: Sequence[Query], names: Sequence[str]) -> list[Query]:
    """The queries with only the named features."""
    keep = [FEATURES.index(n) for n in names]
    return [Query(q.candidates, q.x[:, keep], q.relevant, q.rest) for q in queries]


def fold_of(query_id: str) -> int:
    """A second split, of the tune half only, independent of `half_of`'s."""
    return hashlib.sha1(f"fold:{query_id}".encode()).digest()[0] % 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--depth", type=int, default=30, help="candidates from each list")
    parser.add_argument("--check", default="", help="features/l2/weighting to measure on check")
    args = parser.parse_args()
    config = Config()
    data: dict[str, tuple[Prepared, list[Query], list[int], list[int]]] = {}
    with session(args.cache) as tuner:
        for directory, prepared in each_dataset(tuner, args.datasets):
            tune, check = halves(prepared.dataset)
            data[directory.name] = (
                prepared,
                featurise(tuner, prepared, config, args.depth),
                tune,
                check,
            )

    def weight(name: str, how: str) -> float:
        n = len(data[name][2])
        return {"equal": 1.0, "sqrt": math.sqrt(n)}[how]

    def fit(
        features: str,
        l2: float,
        how: str,
        pick: Callable[[str], list[int]],
        leave: str | None = None,
    ) -> tuple[Array, Array, Array]:
        return train(
            [
                ([columns(data[n][1], FEATURE_SETS[features])[i] for i in pick(n)], weight(n, how))
                for n in data
                if n != leave
            ],
            l2=l2,
        )

    def score(
        name: str, model: tuple[Array, Array, Array] | None, features: str, subset: list[int]
    ) -> float:
        prepared, queries = data[name][:2]
        ranked = [rank(q, model) for q in columns(queries, FEATURE_SETS[features])]
        return recall5(prepared, ranked, subset)

    folds = {
        n: [[i for i in tune if fold_of(p.dataset.queries[i].id) == f] for f in (0, 1)]
        for n, (p, _, tune, _) in data.items()
    }

    def fold(f: int) -> Callable[[str], list[int]]:
        return lambda name: folds[name][f]

    if not args.check:
        print(
            "two-fold cross-validation inside the tune halves, recall@5 of the held fold, "
            "mean of the two folds (served in the first row)"
        )
        print(f"{'variant':<22}" + "".join(f"{n[:10]:>11}" for n in data) + f"{'sum gain':>10}")
        served = {n: sum(score(n, None, "all", folds[n][f]) for f in (0, 1)) / 2 for n in data}
        print(f"{'served':<22}" + "".join(f"{served[n]:>11.3f}" for n in data))
        for features in FEATURE_SETS:
            for l2 in (0.001, 0.01, 0.1):
                for how in ("equal", "sqrt"):
                    models = [fit(features, l2, how, fold(f)) for f in (0, 1)]
                    got = {
                        n: sum(score(n, models[f], features, folds[n][1 - f]) for f in (0, 1)) / 2
                        for n in data
                    }
                    gain = sum(got[n] - served[n] for n in data)
                    worst = min(got[n] - served[n] for n in data)
                    print(
                        f"{features + '/' + str(l2) + '/' + how:<22}"
                        + "".join(f"{got[n]:>11.3f}" for n in data)
                        + f"{gain:>+10.3f}  worst {worst:+.3f}",
                        flush=True,
                    )
        return
    features, l2_text, how = args.check.split("/")
    l2 = float(l2_text)
    model = fit(features, l2, how, lambda m: data[m][2])
    print(
        "weights:",
        ", ".join(f"{f} {w:+.3f}" for f, w in zip(FEATURE_SETS[features], model[0], strict=True)),
    )
    print(
        f"{'dataset':<18} {'served tune/check':>18} {'learned tune/check':>19} "
        f"{'left out check':>15}"
    )
    for name, (_, _, tune, check) in data.items():
        left_out = fit(features, l2, how, lambda m: data[m][2], leave=name)
        cells = [
            f"{score(name, m, features, tune):.3f}/{score(name, m, features, check):.3f}"
            for m in (None, model)
        ]
        print(
            f"{name:<18} {cells[0]:>18} {cells[1]:>19} "
            f"{score(name, left_out, features, check):>15.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
