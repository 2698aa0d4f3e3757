"""What a request of several steps costs the API: its query embedded alone, or with its steps.

Since migration 0033 a request of four or more sentences (`toolsift.selection.query.steps`)
is embedded with each of its steps, at most 8, in one call of the API's model; the default
model runs one text at a time (docs/decisions.md), so each step is one more run. Requests
are built from the bench's synthetic queries, `--steps` of them as sentences of one
request. Both sides embed the same requests, uncached, in alternating rounds; the figures
are the process's CPU ms per request (`time.process_time`, so what else the machine runs
does not count), medians of the rounds, and the median of the rounds' ratios.

    .venv/bin/python benchmarks/query_steps.py [--steps 4] [--requests 50] [--rounds 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

from toolsift.embedding.base import EmbeddingBackend, EmbeddingConfig, get_backend
from toolsift.selection.query import MAX_STEPS, MIN_STEPS, steps
from toolsift_tooling.bench.synthetic import generate_catalog


def requests(count: int, per_request: int, seed: int) -> list[str]:
    """`count` requests of `per_request` sentences each, from the bench's queries."""
    texts = [q.text for q in generate_catalog("big", 1000, seed=seed, queries=count * 4).queries]
    # Only queries of three words or more count as steps; keep those.
    texts = [t for t in texts if len(t.split()) >= 3]
    return [
        ". ".join(texts[(i * per_request + j) % len(texts)] for j in range(per_request)) + "."
        for i in range(count)
    ]


def cpu_ms(backend: EmbeddingBackend, batches: list[list[str]]) -> float:
    """Process CPU ms per batch, each embedded in one call."""
    started = time.process_time()
    for batch in batches:
        backend.embed(batch)
    return (time.process_time() - started) * 1000 / len(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=MIN_STEPS, help="sentences per request")
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    backend = get_backend(EmbeddingConfig())
    texts = requests(args.requests, args.steps, args.seed)
    alone = [[t] for t in texts]
    with_steps = [[t, *steps(t)] for t in texts]
    found = statistics.mean(len(b) - 1 for b in with_steps)
    cpu_ms(backend, alone[:5] + with_steps[:5])  # the model loads, the first runs settle
    sides: dict[str, list[float]] = {"alone": [], "with steps": []}
    for n in range(args.rounds):
        order = [("alone", alone), ("with steps", with_steps)]
        for side, batches in order if n % 2 == 0 else order[::-1]:
            sides[side].append(cpu_ms(backend, batches))
    ratio = statistics.median(
        b / a for a, b in zip(sides["alone"], sides["with steps"], strict=True)
    )
    print(
        f"model {backend.model}; {args.requests} requests of {args.steps} sentences"
        f" ({found:.1f} steps found, at most {MAX_STEPS}); {args.rounds} rounds"
    )
    for side, figures in sides.items():
        print(f"{side:11s} {statistics.median(figures):8.2f} CPU ms per request")
    print(f"with steps / alone {ratio:.2f} (median of rounds)")


if __name__ == "__main__":
    main()
