"""The default model (int8 products, one text per run) beside the packaged graph.

    .venv/bin/python benchmarks/embed_quantized.py [DATASET_DIR ...] [--rounds 3]

`all-MiniLM-L6-v2-int8-dynamic`, the default local model, is the packaged
all-MiniLM-L6-v2 rebuilt to multiply in int8 (`toolsift/embedding/quantized.py`); it runs
one text per session run. `all-MiniLM-L6-v2-int8`, the packaged graph, dequantises its
int8 weights and multiplies in fp32, texts batched. For each, in this process and one
thread:

* its worst cosine against the fp32 sentence-transformers reference of the tests
  (`tests/embedding/reference_minilm.json`), and against the packaged model on the
  synthetic documents of `bench embed`;
* documents embedded per CPU-second, the two interleaved over `--rounds`;
* for each dataset given, brute-force dense recall@5 over `document_text` (as
  `baseline_dense` of `toolsift eval`, but with the product's embedded text).

Integer products pay most where the CPU has VNNI (AVX-512 VNNI or AVX-VNNI).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from toolsift.embedding.onnx import DYNAMIC_MODEL, PACKAGED_MODEL, OnnxBackend
from toolsift.embedding.service import document_text
from toolsift_tooling.bench.synthetic import generate_catalog
from toolsift_tooling.eval.dataset import load

REFERENCE = Path(__file__).parent.parent / "tests" / "embedding" / "reference_minilm.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("datasets", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    reference = json.loads(REFERENCE.read_text())
    texts = [item["text"] for item in reference["items"]]
    expected = np.array([item["embedding"] for item in reference["items"]])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    catalog = generate_catalog("quantized", 640, seed=7, queries=0)
    docs = [
        document_text(t.name, t.title, t.description, t.input_schema, t.examples)
        for t in catalog.tools
    ]
    backends = {PACKAGED_MODEL: OnnxBackend(model=PACKAGED_MODEL), DYNAMIC_MODEL: OnnxBackend()}
    packaged = np.array(backends[PACKAGED_MODEL].embed(docs))
    print("| variant | worst cosine vs fp32 reference | vs packaged on documents (worst / mean) |")
    print("|---|---:|---:|")
    for name, backend in backends.items():
        against = (np.array(backend.embed(texts)) * expected).sum(axis=1)
        same = (np.array(backend.embed(docs)) * packaged).sum(axis=1)
        print(f"| {name} | {against.min():.5f} | {same.min():.5f} / {same.mean():.5f} |")
    rates: dict[str, list[float]] = {name: [] for name in backends}
    for _ in range(args.rounds):
        for name, backend in backends.items():
            started = time.process_time()
            backend.embed(docs)
            rates[name].append(len(docs) / (time.process_time() - started))
    base = statistics.median(rates[PACKAGED_MODEL])
    print("\n| variant | documents per CPU-second, by round | ratio (medians) |")
    print("|---|---|---:|")
    for name, rate in rates.items():
        rounds = ", ".join(f"{r:.0f}" for r in rate)
        print(f"| {name} | {rounds} | {statistics.median(rate) / base:.2f} |")
    if args.datasets:
        print("\n| dataset | " + " | ".join(f"{n}: dense recall@5" for n in backends) + " |")
        print("|---|" + "---:|" * len(backends))
    for folder in args.datasets:
        data = load(folder)
        names = [t.tool.name for t in data.tools]
        tools = [
            document_text(t.tool.name, t.tool.title, t.tool.description,
                          t.tool.input_schema, t.tool.examples)
            for t in data.tools
        ]  # fmt: skip
        cells = []
        for backend in backends.values():
            vectors = np.array(backend.embed(tools))
            queries = np.array(backend.embed([q.text for q in data.queries]))
            top = np.argsort(-(queries @ vectors.T), axis=1)[:, :5]
            recall = np.mean(
                [
                    len({names[i] for i in row} & q.relevant) / len(q.relevant)
                    for row, q in zip(top, data.queries, strict=True)
                ]
            )
            cells.append(f"{recall:.4f}")
        print(f"| {data.name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
