"""What-if: dense over the query's sentences as well as the whole query, in tune.py's loop.

A request of several steps ("Retrieve the SLA of ... Then back up ... Finally, get the
price of ...") has one vector, an average of its steps, that may be near none of the tools
it needs. Here each query of `--at-least` sentences of three words or more (4, the product's
`MIN_STEPS`) also embeds each (`toolsift.selection.query.steps`, at most the first 8), and
the tools' nearness to those sentences enters hybrid in one of two ways:

- `list=W`: a third list, the tools by their nearest sentence, at W times dense's share
  (the slot the usage list fills when a tenant has learned usage);
- `margin=M`: dense ranks a tool by the nearer of the whole query and its nearest sentence
  plus M (`margin=0` and `--at-least 4` is what the product serves since migration 0033).

`--split clauses` reads a query's clauses as its steps instead: it also cuts at commas and
at "and" and "then" ("Generate a report of bitcoin and save it in /root/bitcoin.md"), for
the requests of one sentence and two asks. `--split asks` reads a request of two or three
sentences by its last one as well ("We are building an app ... We need a model that ..."):
the ask without the scene, which misleads when every sentence is a step.

Cold (nothing learned); recall@5 of hybrid on the tune half, then on the check half.

    python benchmarks/quality/segments.py /path/to/datasets/* --cache /tmp/toolsift-tune
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import tune
from usage import nearest_first

from toolsift.selection import dense
from toolsift.selection.query import MAX_STEPS, MIN_STEP_WORDS, MIN_STEPS, steps

VARIANTS = "plain,list=0.25,list=0.5,list=1,margin=0.03,margin=0.06,margin=0.1"
_CLAUSE_END = re.compile(r"[.!?;]+(?:\s+|$)|,\s+|\s+(?:and then|then|and)\s+")


def clauses(query: str, min_steps: int) -> list[str]:
    """`steps` with clauses for sentences: the same word floor and cap."""
    parts = [
        p for p in (c.strip() for c in _CLAUSE_END.split(query)) if len(p.split()) >= MIN_STEP_WORDS
    ]
    return parts[:MAX_STEPS] if len(parts) >= min_steps else []


def asks(query: str, min_steps: int) -> list[str]:
    """`steps` from `min_steps` sentences on; below that, from two, the last sentence."""
    return steps(query, min_steps) or steps(query, 2)[-1:]


def ranked(
    variant: str,
    own: npt.NDArray[np.float64],
    nearest_sentence: npt.NDArray[np.float64] | None,
    lexical: tune.Lexical,
    fusion: dense.Fusion,
) -> list[int]:
    """Hybrid's ranking of one query under `variant` (see the module's docstring)."""
    dense_ids: Sequence[int] = nearest_first(own)
    third: Sequence[int] = ()
    if nearest_sentence is not None and variant != "plain":
        kind, value = variant.split("=")
        if kind == "list":
            third = nearest_first(nearest_sentence)
            fusion = replace(fusion, usage_weight=float(value))
        else:
            dense_ids = nearest_first(np.minimum(own, nearest_sentence + float(value)))
    fused = dense.fuse(
        lexical.ids,
        dense_ids,
        fusion,
        bm25_top=lexical.scores[0] if lexical.scores else 0.0,
        bm25_coverage=lexical.coverage,
        usage_ids=third,
    )
    return sorted(fused, key=lambda t: (-fused[t], t))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    parser.add_argument(
        "--at-least", type=int, default=MIN_STEPS, help="sentences a query must have"
    )
    parser.add_argument("--variants", default=VARIANTS, help="comma-separated, `plain` first")
    parser.add_argument("--split", choices=("sentences", "clauses", "asks"), default="sentences")
    args = parser.parse_args()
    split_of = {"sentences": steps, "clauses": clauses, "asks": asks}[args.split]
    variants = args.variants.split(",")
    print(f"{'dataset':<17} {'half':<5} {'split':>9} " + " ".join(f"{v:>11}" for v in variants))
    with tune.session(args.cache) as tuner:
        for directory, prepared in tune.each_dataset(tuner, args.datasets):
            config = tune.Config()
            assert tuner.vectors is not None
            tools = tuner.vectors.embed([config.document(t) for t in prepared.dataset.tools])
            texts = tuner._queries(prepared, config)
            queries = tuner.vectors.embed(texts)
            split = [split_of(text, args.at_least) for text in texts]
            flat = [s for parts in split for s in parts]
            vectors = tuner.vectors.embed(flat) if flat else queries[:0]
            scored = tuner.bm25_scored(prepared, config)
            runs: dict[str, list[list[int]]] = {v: [] for v in variants}
            start = 0
            for q, parts in enumerate(split):
                own = 1.0 - (tools @ queries[q]).astype(np.float64)
                nearest_sentence = None
                if parts:
                    mine = vectors[start : start + len(parts)]
                    nearest_sentence = (1.0 - (tools @ mine.T).astype(np.float64)).min(axis=1)
                    start += len(parts)
                for variant in variants:
                    runs[variant].append(
                        ranked(variant, own, nearest_sentence, scored[q], config.fusion)
                    )
            multi = sum(1 for parts in split if parts)
            for label, half in zip(("tune", "check"), tune.halves(prepared.dataset), strict=True):
                cells = " ".join(f"{tune.recall5(prepared, runs[v], half):11.3f}" for v in variants)
                print(f"{directory.name:<17} {label:<5} {multi:>4}/{len(split):<4} {cells}")


if __name__ == "__main__":
    main()
