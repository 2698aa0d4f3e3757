"""Could a floor on cosine similarity tell a turn that needs no tool from one that does?

Dense ranks every embedded tool for any text, so a hybrid select fills `k` even for
"thanks!". A floor would drop dense candidates below some similarity. This measures, per
dataset and with the product's model and embedded text (tune.py's cached vectors):

- the similarity of each query to each of its relevant tools (low percentiles: what a floor
  would cut from the right answers);
- each query's best similarity to any tool (what a floor would leave empty);
- the best similarity of turns that need no tool (greetings, thanks, "yes, do it", noise)
  to the same catalog.

A floor works only if the last column sits below the other two.

    python benchmarks/quality/floor.py /path/to/datasets/* --cache /tmp/toolsift-tune
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tune

NO_TOOL_TURNS = (
    "thanks!", "thank you, that's all", "hello", "hi there", "ok", "okay great", "lol",
    "yes, do it", "no", "sounds good", "bye", "cool", "what do you think?", "hmm",
    "asdfgh qwerty", "xyzzy", "good morning", "can you help me?", "nevermind",
    "perfect, thanks a lot", "who are you?", "tell me a joke", "that's wrong", "why?",
    "great job", "ok continue", "please go on", "I don't understand", "sure", "wait",
)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    args = parser.parse_args()
    config = tune.Config()
    print(
        "| dataset | relevant: p1 / p5 | query's best: min / p1 | no-tool turn's best:"
        " median / max | no-tool turns above the queries' p1 |"
    )
    print("|---|---:|---:|---:|---:|")
    with tune.session(args.cache) as tuner:
        assert tuner.vectors is not None
        for directory, prepared in tune.each_dataset(tuner, args.datasets):
            dataset = prepared.dataset
            documents = tuner.vectors.embed([config.document(t) for t in dataset.tools])
            queries = tuner.vectors.embed([tune.query_of(q.text) for q in dataset.queries])
            similarity = queries @ documents.T
            index = {name: i for i, name in enumerate(prepared.names)}
            relevant = np.array(
                [
                    similarity[q, index[name]]
                    for q, query in enumerate(dataset.queries)
                    for name in query.relevant
                    if name in index
                ]
            )
            best = similarity.max(axis=1)
            turns = tuner.vectors.embed([tune.query_of(t) for t in NO_TOOL_TURNS])
            idle = (turns @ documents.T).max(axis=1)
            p1 = np.percentile(best, 1)
            print(
                f"| {directory.name} | {np.percentile(relevant, 1):.2f} /"
                f" {np.percentile(relevant, 5):.2f} | {best.min():.2f} / {p1:.2f} |"
                f" {np.median(idle):.2f} / {idle.max():.2f} |"
                f" {int((idle > p1).sum())} of {len(NO_TOOL_TURNS)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
