"""What-if for more vectors per tool, in tune.py's loop: the twin, on the tool's side, of the
steps of a request (docs/quality.md, "Steps of a request").

A tool's one vector embeds its name, description and parameters together; a long
description may bury what the tool does. Here a tool also gets `summary` (its name and the
first sentence of its description) or `sentences` (its name and each sentence, at most 8,
for a description of two or more), and dense measures it by the nearest of its own vector
and those, each plus a margin. Prints dense and hybrid recall@5 on the tune and check
halves, per margin, after the served figures (`-`).

    python benchmarks/quality/documents.py /path/to/datasets/* --split summary \
        --margins 0,0.03,0.06,0.1
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tune

from toolsift.embedding.service import document_text
from toolsift.selection.service import CANDIDATE_POOL
from toolsift.tools.schemas import ToolCreate

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")


def _head(tool: ToolCreate) -> str:
    """`name (title)`, as the tool's own embedded text begins."""
    return document_text(tool.name, tool.title, "", {}, [])


def summary(tool: ToolCreate) -> list[str]:
    parts = [s.strip() for s in _SENTENCE_END.split(tool.description) if s.strip()]
    return [f"{_head(tool)}: {parts[0]}"] if parts else []


def sentences(tool: ToolCreate) -> list[str]:
    parts = [s.strip() for s in _SENTENCE_END.split(tool.description) if len(s.split()) >= 3]
    return [f"{_head(tool)}: {p}" for p in parts[:8]] if len(parts) >= 2 else []


SPLITS: dict[str, Callable[[ToolCreate], list[str]]] = {
    "summary": summary,
    "sentences": sentences,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    parser.add_argument("--split", choices=sorted(SPLITS), default="summary")
    parser.add_argument("--margins", default="0,0.03,0.06,0.1")
    args = parser.parse_args()
    margins = [float(m) for m in args.margins.split(",")]
    config = tune.Config()
    with tune.session(args.cache) as tuner:
        assert tuner.vectors is not None
        for directory, prepared in tune.each_dataset(tuner, args.datasets):
            scored = tuner.bm25_scored(prepared, config)
            own = tuner.distances(prepared, config)
            texts: list[str] = []
            owners: list[int] = []
            for i, item in enumerate(prepared.dataset.tools):
                for text in SPLITS[args.split](item.tool):
                    texts.append(text)
                    owners.append(i)
            queries = tuner.vectors.embed(tuner._queries(prepared, config))
            extra = np.full_like(own, np.inf)
            if texts:
                distances = 1.0 - (queries @ tuner.vectors.embed(texts).T).astype(np.float64)
                for column, owner in enumerate(owners):
                    np.minimum(extra[:, owner], distances[:, column], out=extra[:, owner])
            tuner.vectors.save()
            tune_half, check_half = tune.halves(prepared.dataset)
            print(f"{directory.name} ({len(texts)} more vectors): dense, hybrid; tune / check")
            positions = np.arange(own.shape[1])
            for margin in [None, *margins]:
                distance = own if margin is None else np.minimum(own, extra + margin)
                near = [
                    [int(i) for i in np.lexsort((positions, row))[:CANDIDATE_POOL]]
                    for row in distance
                ]
                hybrid = tuner.hybrid(scored, near, config.fusion)
                cells = "  ".join(
                    " / ".join(
                        f"{tune.recall5(prepared, run, s):.3f}" for s in (tune_half, check_half)
                    )
                    for run in (near, hybrid)
                )
                print(f"  {'-' if margin is None else margin:>5}  {cells}")


if __name__ == "__main__":
    main()
