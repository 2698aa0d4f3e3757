"""Throughput of the ONNX backend alone: `python -m toolsift_tooling.bench.onnx_throughput`.

Texts are tool-description sized (30-60 words), the length the indexer embeds. Figures are
per process; on N cores, N one-thread worker processes are the scaling unit.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from toolsift.embedding.onnx import OnnxBackend

_VERBS = ["Create", "Search", "Update", "Cancel", "Refund", "List", "Export", "Schedule"]
_OBJECTS = ["invoice", "subscription", "support ticket", "calendar event", "order", "customer"]
_CLAUSES = [
    "for the tenant's billing account",
    "using the customer's e-mail address or account ID",
    "and returns the new status together with an audit trail entry",
    "within the permissions granted to the calling agent",
    "with optional filters on date range, owner and priority",
    "so that downstream workflows can pick up the change",
    "failing with a clear error when the record is locked or archived",
    "and notifies the assigned team in their preferred channel",
    "respecting rate limits of the upstream provider",
    "where amounts are given in the smallest currency unit",
]


def tool_descriptions(count: int, seed: int = 7) -> list[str]:
    """Deterministic synthetic descriptions of 30-60 words."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        words = [rng.choice(_VERBS), "a", rng.choice(_OBJECTS)]
        target = rng.randint(30, 60)
        while len(words) < target:
            words.extend(rng.choice(_CLAUSES).split())
        texts.append(" ".join(words[:target]) + ".")
    return texts


def measure(
    threads: int, batch: int, texts: list[str], repeats: int, *, corpus: bool = False
) -> tuple[float, float]:
    """Best-of-`repeats` embeddings per wall second and per CPU second.

    Calls of `batch` texts (a caller's own batches: padded to their longest text), or with
    `corpus` one call for all texts, batched internally by `batch` after sorting by length
    (what the indexer does: less padding). Best-of, like timeit: on a shared machine the
    fastest pass is the least disturbed one.
    """
    backend = OnnxBackend(threads=threads, batch_size=batch)
    backend.embed(texts[:batch])  # load and warm up
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        if corpus:
            backend.embed(texts)
        else:
            for i in range(0, len(texts), batch):
                backend.embed(texts[i : i + batch])
        wall.append(len(texts) / (time.perf_counter() - start))
        cpu.append(len(texts) / (time.process_time() - start_cpu))
    return max(wall), max(cpu)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64])
    args = parser.parse_args(argv)
    texts = tool_descriptions(args.texts)
    words = [len(t.split()) for t in texts]
    out = sys.stdout
    out.write(
        f"{len(texts)} texts, {min(words)}-{max(words)} words (mean {statistics.mean(words):.0f})\n"
    )
    runs = [(t, corpus) for t in args.threads for corpus in (False, True)]
    heads = [f"{t} thread(s), {'corpus' if c else 'calls'}: emb/s (per CPU-s)" for t, c in runs]
    out.write("| batch | " + " | ".join(heads) + " |\n")
    out.write("|---:|" + "---:|" * len(runs) + "\n")
    for batch in args.batches:
        rates = [measure(t, batch, texts, args.repeats, corpus=c) for t, c in runs]
        cells = [f"{wall:.0f} ({cpu:.0f})" for wall, cpu in rates]
        out.write(f"| {batch} | " + " | ".join(cells) + " |\n")
        out.flush()


if __name__ == "__main__":
    main()
