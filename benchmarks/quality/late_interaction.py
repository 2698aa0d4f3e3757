"""What-if: a rerank stage over hybrid's first N, by late interaction with the served model.

No registry package ships a cross-encoder without torch (docs/decisions.md), but the model
the product already ships gives a token vector for every word piece of a text. MaxSim
(as ColBERT scores, here untrained): each query token's best cosine against the tool's
tokens, averaged over the query's tokens, or weighted by their IDF in the catalog's tool
texts. The first N tools of hybrid are ranked by it, and that ranking is fused with
hybrid's own by reciprocal rank, `1/(K + rank) + W/(K + maxsim rank)`; below N, hybrid's
order stays.

Variants are `N/W`, then `/idf` for the weighted average, `/short` to rerank only a request
that is not read as steps (`toolsift.selection.query.steps`): MaxSim averages over every
token of a long request of several steps, as one vector averages its steps. They are judged by the rule of the other what-ifs: the
largest gain summed over the tune halves, among the variants that cost no tune half more
than half a point. The check halves are printed to report, not to choose. Then the cost: a
select would have to encode its first N tool texts through the model (or store every
token vector of every tool), which is timed here against encoding the query alone.

    python benchmarks/quality/late_interaction.py /path/to/datasets/* [--variants 20/0.35]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tune

from toolsift.embedding.onnx import OnnxBackend, run, runtime
from toolsift.selection.query import steps

VARIANTS = (
    "10/0.25,10/0.5,20/0.25,20/0.35,20/0.5,20/1,20/0.25/idf,20/0.5/idf,20/1/idf,"
    "10/0.5/short,20/0.35/short,20/0.5/short,20/0.5/idf/short"
)
K = 10

Tokens = list[tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]]


class TokenVectors:
    """Each text's unit token vectors (no [CLS], no [SEP]) and word piece ids."""

    def __init__(self) -> None:
        self.backend = OnnxBackend()
        self.loaded = runtime(self.backend.model_path, 1)

    def __call__(self, texts: Sequence[str]) -> Tokens:
        found: Tokens = []
        for encoding in self.loaded.tokenizer.encode_batch(list(texts)):
            # One text a run, as the served dynamic model embeds (`OnnxBackend.plan`).
            hidden, _ = run(self.loaded, [encoding.ids])
            inner = slice(1, -1) if len(encoding.ids) > 2 else slice(None)
            vectors = hidden[0][inner]
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            found.append((vectors, np.asarray(encoding.ids[inner], dtype=np.int64)))
        return found


def idf_of(documents: Tokens) -> dict[int, float]:
    """BM25's idf of each word piece over the tool texts."""
    df = Counter(i for _, ids in documents for i in set(ids.tolist()))
    n = len(documents)
    return {i: float(np.log(1 + (n - d + 0.5) / (d + 0.5))) for i, d in df.items()}


def maxsim(
    query: npt.NDArray[np.float32], documents: Tokens, weights: npt.NDArray[np.float64]
) -> list[float]:
    """Each document's MaxSim: every query token's best cosine, averaged by `weights`."""
    return [
        float(((query @ tool.T).max(axis=1) * weights).sum() / weights.sum())
        for tool, _ in documents
    ]


def reranked(ranking: list[int], scores: list[float], n: int, weight: float) -> list[int]:
    top = ranking[:n]
    order = sorted(range(len(top)), key=lambda i: (-scores[i], i))
    own = {i: r for r, i in enumerate(order)}
    fused = [1 / (K + i) + weight / (K + own[i]) for i in range(len(top))]
    return [top[i] for i in sorted(range(len(top)), key=lambda i: (-fused[i], i))] + ranking[n:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    parser.add_argument("--variants", default=VARIANTS)
    args = parser.parse_args()
    variants = args.variants.split(",")
    widest = max(int(v.split("/")[0]) for v in variants)
    encode = TokenVectors()
    config = tune.Config()
    scores: dict[str, dict[str, tuple[float, float]]] = {v: {} for v in ["hybrid", *variants]}
    # (query alone, query and its first 20 tools, MaxSim over 20 tools already encoded), ms
    costs: list[tuple[float, float, float]] = []
    pieces: list[int] = []  # word pieces of each tool text
    with tune.session(args.cache) as tuner:
        for directory, prepared in tune.each_dataset(tuner, args.datasets):
            lexical = tuner.bm25_scored(prepared, config)
            hybrid = tuner.hybrid(lexical, tuner.dense(prepared, config), config.fusion)
            texts = [config.document(t) for t in prepared.dataset.tools]
            documents = encode(texts)
            queries = tuner._queries(prepared, config)
            idf = idf_of(documents)
            pieces += [len(ids) for _, ids in documents]
            runs: dict[str, list[list[int]]] = {v: [] for v in variants}
            for q, ranking in enumerate(hybrid):
                ((query, ids),) = encode([queries[q]])
                flat = np.ones(len(ids))
                weighted = np.array([idf.get(i, 0.0) for i in ids.tolist()]) + 1e-9
                top = [documents[t] for t in ranking[:widest]]
                plain, rare = maxsim(query, top, flat), maxsim(query, top, weighted)
                for variant in variants:
                    n, weight, *flags = variant.split("/")
                    chosen = rare if "idf" in flags else plain
                    if "short" in flags and steps(queries[q]):
                        runs[variant].append(ranking)
                        continue
                    runs[variant].append(reranked(ranking, chosen, int(n), float(weight)))
                if q < 20:  # what a select would pay, on this dataset's first queries
                    # This thread's CPU: the model runs in it (one thread), and numpy's
                    # BLAS threads, which spin after each product above, are not its work.
                    started = time.thread_time()
                    encode([queries[q]])
                    alone = time.thread_time() - started
                    encode([queries[q], *(texts[t] for t in ranking[:20])])
                    both = time.thread_time() - started - alone
                    started = time.thread_time()
                    maxsim(query, [documents[t] for t in ranking[:20]], flat)
                    stored = time.thread_time() - started
                    costs.append((alone * 1000, both * 1000, stored * 1000))
            tune_half, check = tune.halves(prepared.dataset)
            for name, rankings in [("hybrid", hybrid), *runs.items()]:
                scores[name][directory.name] = (
                    tune.recall5(prepared, rankings, tune_half),
                    tune.recall5(prepared, rankings, check),
                )
            print(f"{directory.name} done", file=sys.stderr, flush=True)
    names = list(scores["hybrid"])
    print("recall@5, tune half / check half; K", K)
    print(f"| variant | {' | '.join(names)} | tune: summed gain | worst |")
    print(f"|---|{'---:|' * len(names)}---:|---:|")
    for variant, cells in scores.items():
        judged = tune.verdict([cells[n][0] for n in names], [scores["hybrid"][n][0] for n in names])
        row = " | ".join(f"{cells[n][0]:.3f} / {cells[n][1]:.3f}" for n in names)
        print(f"| {variant} | {row} | {judged} |")
    alone, twenty, stored = (statistics.median(c[i] for c in costs) for i in range(3))
    print(
        f"CPU per select, median of {len(costs)}: the query's token vectors {alone:.1f} ms;"
        f" the query's and its first 20 tools' {twenty:.1f} ms; MaxSim over 20 tools whose"
        f" token vectors were stored {stored:.2f} ms"
    )
    piece = statistics.median(pieces)
    print(
        f"word pieces a tool text: median {piece:.0f}, 90th percentile"
        f" {statistics.quantiles(pieces, n=10)[-1]:.0f}; stored as halfvec, {piece * 384 * 2 / 1024:.0f}"
        " KB a tool at the median"
    )


if __name__ == "__main__":
    main()
