"""What-if: a linear query adapter learned from usage, in usage.py's loop (not adopted).

Learned queries (migration 0027) help a tool only once it has been called. An adapter could
carry what usage teaches to the tools never called: a matrix W fitted on the replayed
(query vector, called tool's own vector) pairs by ridge regression toward the identity,

    W = (XᵀX + λI)⁻¹ (XᵀY + λI),

with the query and each of its steps mapped through W (and normalised) before dense measures
the tools' own vectors; learned queries are still compared with the query itself. Each row
prints warm hybrid recall@5 (and warm dense) on tuneQ, tuneQ' and check, as `usage.py
--folds 2` splits them, for λ = 0 (no adapter, what is served) and each `--lambdas`. With
`--uncalled`, only the tools no replayed query called are measured through the adapter.

    python benchmarks/quality/adapter.py /path/to/datasets/* --lambdas 1,3,10,30
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import tune
import usage

from toolsift.lexical.analysis import LEARNED_WEIGHT
from toolsift.selection import dense
from toolsift.selection.query import steps

Matrix = npt.NDArray[np.float64]


def fit(queries: Matrix, targets: Matrix, ridge: float) -> Matrix:
    """Ridge regression of the called tools' vectors on the queries', shrunk toward the
    identity so that few pairs leave the query nearly as it was."""
    eye = np.eye(queries.shape[1])
    solved = np.linalg.solve(queries.T @ queries + ridge * eye, queries.T @ targets + ridge * eye)
    return solved.astype(np.float64)


@dataclass
class Data:
    """One dataset's vectors, as the loop measures them."""

    prepared: tune.Prepared
    tools: Matrix
    queries: Matrix
    steps: list[Matrix]
    own: Matrix

    def adapted(self, learned: list[int], ridge: float, *, uncalled: bool) -> Matrix:
        """Queries by tools: each tool's distance to the nearest of the query and its steps,
        all mapped through the adapter fitted on `learned`."""
        position = {name: i for i, name in enumerate(self.prepared.names)}
        pairs = [
            (q, position[name])
            for q in learned
            for name in self.prepared.dataset.queries[q].relevant
            if name in position
        ]
        w = fit(self.queries[[q for q, _ in pairs]], self.tools[[t for _, t in pairs]], ridge)
        distances = self._distances(self.queries, w)
        for row, step_vectors in enumerate(self.steps):
            if len(step_vectors):
                nearest_step = self._distances(step_vectors, w).min(axis=0)
                np.minimum(distances[row], nearest_step, out=distances[row])
        if uncalled:
            called = sorted({t for _, t in pairs})
            distances[:, called] = self.own[:, called]
        return distances

    def _distances(self, vectors: Matrix, w: Matrix) -> Matrix:
        """Cosine distances of the mapped vectors to every tool."""
        mapped = vectors @ w
        mapped /= np.linalg.norm(mapped, axis=1, keepdims=True)
        return 1.0 - mapped @ self.tools.T


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    parser.add_argument("--lambdas", default="1,3,10,30")
    parser.add_argument("--uncalled", action="store_true", help="adapt only never-called tools")
    args = parser.parse_args()
    ridges = [0.0] + [float(x) for x in args.lambdas.split(",")]
    fusion = dense.Fusion()
    with tune.session(args.cache) as tuner:
        for directory, prepared in tune.each_dataset(tuner, args.datasets):
            config = tune.Config()
            assert tuner.vectors is not None
            texts = tuner._queries(prepared, config)
            replay = usage.replay_of(tuner, prepared)
            data = Data(
                prepared,
                tuner.vectors.embed([config.document(t) for t in prepared.dataset.tools]).astype(
                    np.float64
                ),
                replay.queries.astype(np.float64),
                [
                    tuner.vectors.embed(parts).astype(np.float64)
                    if parts
                    else np.empty((0, replay.queries.shape[1]))
                    for parts in (steps(text) for text in texts)
                ],
                replay.own,
            )
            for ridge in ridges:
                cells = []
                for label, learned, measured in replay.rows():
                    distances = (
                        data.own
                        if ridge == 0
                        else data.adapted(learned, ridge, uncalled=args.uncalled)
                    )
                    warm = usage.warm_recall(
                        prepared,
                        replay.tfs,
                        replay.terms,
                        distances,
                        replay.queries,
                        learned,
                        measured,
                        fusions=[fusion],
                        word_weight=LEARNED_WEIGHT,
                    )
                    cells.append(f"{label} {warm.hybrid[0]:.3f} (dense {warm.dense:.3f})")
                print(f"{directory.name:<17} λ {ridge:<4g} " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
