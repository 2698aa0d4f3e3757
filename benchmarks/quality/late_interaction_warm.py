"""The late-interaction rerank (`late_interaction.py`) after usage was learned, in
`usage.py`'s model of the warm select: the served fusion, learned queries, learned words and
tools called together, then MaxSim over the first N of what that fusion ranks.

Rows as `usage.py` prints them: `tuneQ` learns a quarter of the tune half and measures the
rest (what a choice may read), `check` learns the whole tune half and measures the check
half (what `toolsift eval --warm` measures). Recall@5 of hybrid.

    python benchmarks/quality/late_interaction_warm.py /path/to/datasets/* \
        [--variants 20/0.35/short,10/0.5/short]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tune
import usage
from late_interaction import Tokens, TokenVectors, maxsim, reranked

from toolsift.lexical.analysis import LEARNED_WEIGHT
from toolsift.selection import dense
from toolsift.selection.query import steps


def rescorer(
    variant: str,
    measured: Sequence[int],
    texts: Sequence[str],
    documents: Tokens,
    encode: TokenVectors,
) -> Callable[[dict[int, float]], dict[int, float]]:
    """`usage.warm_recall` rescores the measured queries' final scores, in their order:
    under `variant`, the first N reranked, as scores that rank them so."""
    queries = iter(measured)

    def rescore(scores: dict[int, float]) -> dict[int, float]:
        q = next(queries)
        if variant == "served":
            return scores
        n, weight, *flags = variant.split("/")
        if "short" in flags and steps(texts[q]):
            return scores
        ranking = sorted(scores, key=lambda t: (-scores[t], t))
        ((query, _),) = encode([texts[q]])
        top = [documents[t] for t in ranking[: int(n)]]
        order = reranked(ranking, maxsim(query, top, np.ones(len(query))), int(n), float(weight))
        return {t: float(len(order) - r) for r, t in enumerate(order)}

    return rescore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    parser.add_argument("--variants", default="20/0.35/short,10/0.5/short")
    args = parser.parse_args()
    variants = ["served", *args.variants.split(",")]
    encode = TokenVectors()
    config = tune.Config()
    print(f"| dataset | half | {' | '.join(variants)} |")
    print(f"|---|---|{'---:|' * len(variants)}")
    with tune.session(args.cache) as tuner:
        for directory, prepared in tune.each_dataset(tuner, args.datasets):
            data = usage.replay_of(tuner, prepared)
            documents = encode([config.document(t) for t in prepared.dataset.tools])
            texts = tuner._queries(prepared, config)
            for label, learned, measured in (
                ("tuneQ", data.quarter, data.rest),
                ("check", data.tune_half, data.check_half),
            ):
                cells = [
                    usage.warm_recall(
                        prepared, data.tfs, data.terms, data.own, data.queries, learned,
                        measured, [dense.Fusion()], LEARNED_WEIGHT,
                        rescore=rescorer(variant, measured, texts, documents, encode),
                    ).hybrid[0]
                    for variant in variants
                ]  # fmt: skip
                row = " | ".join(f"{x:.3f}" for x in cells)
                print(f"| {directory.name} | {label} | {row} |", flush=True)


if __name__ == "__main__":
    main()
