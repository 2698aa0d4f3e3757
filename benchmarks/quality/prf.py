"""What-if variants on top of tune.py: pseudo-relevance feedback and prefix stems for BM25.

Reuses tune.py's pieces unchanged (analysis on an embedded PostgreSQL, the BM25 formula, query
building, cached ONNX vectors, `toolsift.selection.dense.fuse`) and adds:

- dense PRF (Rocchio): q' = normalise(q + beta * mean(vectors of the dense top-m tools)),
  dense re-ranked with q', then fused with BM25 as usual ("dprf:m=..,beta=..");
- hybrid PRF: the same, but the feedback tools are the fused hybrid top-m, and the new dense
  list is fused again with the original BM25 list ("hprf:m=..,beta=..");
- prefix stems: beside each Snowball lexeme of length >= L, a token "^" + lexeme[:L] is
  indexed (weight w times the weight of the field it came from, "rel", or w flat, "flat") and
  queried; BM25 statistics (df, lengths, avgdl) include those tokens ("pfx:L=..,w=..,mode=..");
- combinations ("pfx:...+hprf:...").

    python benchmarks/quality/prf.py /path/to/datasets/* --cache /tmp/toolsift-tune \
        [--only 'base,pfx:L=5,w=0.5,mode=rel'] [--halves]

Per variant it prints recall@5 for bm25, dense and hybrid per dataset; "*" marks a hybrid
below its target (docs/quality.md) and "<" a hybrid below one of its own components.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tune

from toolsift.selection import dense as dense_mod
from toolsift.selection.service import CANDIDATE_POOL
from toolsift_tooling.eval.dataset import NoQueries, load

TARGETS = {
    "mcptoolbench_pp": 0.969,
    "livemcpbench": 0.378,
    "metatool": 0.788,
    "toollens": 0.293,
    "gorilla_apibench": 0.287,
    "bfcl_pooled": 0.867,
    "seal_tools": 0.823,
}
SHORT = {
    "mcptoolbench_pp": "mcp++",
    "livemcpbench": "live",
    "metatool": "meta",
    "toollens": "lens",
    "gorilla_apibench": "gorilla",
    "bfcl_pooled": "bfcl",
    "seal_tools": "seal",
}

Ranking = list[list[int]]
Scored = list[tune.Lexical]


@dataclass(frozen=True)
class Prefix:
    length: int
    weight: float
    mode: str  # "rel": w * field weight; "flat": w
    gate: str = "own"  # fusion gate from this BM25's top score ("own") or the plain one ("base")

    @property
    def name(self) -> str:
        gate = ",gate=base" if self.gate == "base" else ""
        return f"pfx:L={self.length},w={self.weight:g},mode={self.mode}{gate}"


@dataclass(frozen=True)
class Feedback:
    source: str  # "dense" or "hybrid"
    m: int
    beta: float

    @property
    def name(self) -> str:
        return f"{'d' if self.source == 'dense' else 'h'}prf:m={self.m},beta={self.beta:g}"


@dataclass(frozen=True)
class Variant:
    prefix: Prefix | None = None
    feedback: Feedback | None = None

    @property
    def name(self) -> str:
        parts = [p.name for p in (self.prefix, self.feedback) if p is not None]
        return "+".join(parts) or "base"


def prefix_token(lexeme: str, length: int) -> str | None:
    return "^" + lexeme[:length] if len(lexeme) >= length else None


class Data:
    """One dataset: lexemes per field, query lexemes, vectors; rankings memoised."""

    def __init__(self, tuner: tune.Tuner, prepared: tune.Prepared, config: tune.Config) -> None:
        self.tuner = tuner
        self.prepared = prepared
        self.config = config
        self.per_field = tuner._fields(prepared, config.text_search)
        queries = tuner._queries(prepared, config)
        self.query_terms = tuner.analyser.lexemes(config.text_search, queries)
        assert tuner.vectors is not None
        self.matrix = tuner.vectors.embed([config.document(t) for t in prepared.dataset.tools])
        self.qvecs = tuner.vectors.embed(queries).astype(np.float32)
        self.positions = np.arange(self.matrix.shape[0])
        self.bm25_memo: dict[Prefix | None, Scored] = {}
        self.dense_base = self.dense_rank(self.qvecs)

    # -- BM25, the formula of tune.Tuner.bm25_scored, over (optionally) extra prefix tokens --
    def bm25(self, prefix: Prefix | None) -> Scored:
        if prefix is not None and prefix.gate != "own":
            prefix = Prefix(prefix.length, prefix.weight, prefix.mode)  # same ranking
        if prefix in self.bm25_memo:
            return self.bm25_memo[prefix]
        weights = {f: float(getattr(self.config.weights, f)) for f in tune.FIELDS}
        n = len(self.prepared.names)
        tfs: list[dict[str, float]] = []
        for i in range(n):
            tf: dict[str, float] = defaultdict(float)
            for f in tune.FIELDS:
                if weights[f] <= 0:
                    continue
                for lexeme, count in self.per_field[f][i].items():
                    tf[lexeme] += weights[f] * count
                    if prefix is not None:
                        token = prefix_token(lexeme, prefix.length)
                        if token is not None:
                            w = prefix.weight * (weights[f] if prefix.mode == "rel" else 1.0)
                            tf[token] += w * count
            tfs.append(tf)
        queries = []
        for query_terms in self.query_terms:
            terms = set(query_terms)
            if prefix is not None:
                terms |= {t for t in (prefix_token(x, prefix.length) for x in query_terms) if t}
            queries.append(terms)
        rankings: Scored = tune.rank_bm25(tfs, queries, k1=self.config.k1, b=self.config.b)
        self.bm25_memo[prefix] = rankings
        return rankings

    # -- dense, as tune.Tuner.dense_scored, for any query vectors --
    def dense_rank(self, qvecs: np.ndarray) -> Ranking:
        similarity = qvecs @ self.matrix.T
        out: Ranking = []
        for row in similarity:
            distance = 1.0 - row.astype(np.float64)
            order = np.lexsort((self.positions, distance))[:CANDIDATE_POOL]
            out.append([int(i) for i in order])
        return out

    def feedback_vectors(self, tops: Ranking, fb: Feedback) -> np.ndarray:
        out = np.empty_like(self.qvecs)
        for q, ids in enumerate(tops):
            chosen = ids[: fb.m]
            v = self.qvecs[q].astype(np.float64)
            if chosen:
                v = v + fb.beta * self.matrix[chosen].astype(np.float64).mean(axis=0)
            out[q] = (v / np.linalg.norm(v)).astype(np.float32)
        return out

    def fuse(self, lexical: Scored, near: Ranking, gate: Scored) -> Ranking:
        """tune.Tuner.hybrid, with the gate's top BM25 score taken from `gate`."""
        out: Ranking = []
        for r, g, dense_ids in zip(lexical, gate, near, strict=True):
            top = g.scores[0] if g.scores else 0.0
            fused = dense_mod.fuse(
                r.ids,
                dense_ids,
                self.config.fusion,
                bm25_top=top,
                bm25_coverage=g.coverage,
            )
            out.append(sorted(fused, key=lambda i: (-fused[i], i)))
        return out

    def run(self, variant: Variant) -> dict[str, Ranking]:
        lexical = self.bm25(variant.prefix)
        gate = self.bm25(None) if variant.prefix and variant.prefix.gate == "base" else lexical
        near = self.dense_base
        hybrid = self.fuse(lexical, near, gate)
        fb = variant.feedback
        if fb is not None:
            tops = near if fb.source == "dense" else hybrid
            near = self.dense_rank(self.feedback_vectors(tops, fb))
            hybrid = self.fuse(lexical, near, gate)
        return {"bm25": [r.ids for r in lexical], "dense": near, "hybrid": hybrid}

    def evaluate(self, variant: Variant) -> dict[str, tuple[float, float, float]]:
        return self.recalls(self.run(variant))

    def recalls(self, runs: dict[str, Ranking]) -> dict[str, tuple[float, float, float]]:
        """recall@5 per mode: over all queries, the tuning half and the check half."""
        tune_half, check_half = tune.halves(self.prepared.dataset)
        everyone = range(len(self.prepared.dataset.queries))
        return {
            mode: tuple(  # type: ignore[misc]
                tune.recall5(self.prepared, r, s) for s in (everyone, tune_half, check_half)
            )
            for mode, r in runs.items()
        }


def parse_variant(text: str) -> Variant:
    prefix = feedback = None
    if text == "base":
        return Variant()
    for part in text.split("+"):
        kind, _, args = part.partition(":")
        kv = dict(p.split("=") for p in args.split(","))
        if kind == "pfx":
            prefix = Prefix(
                int(kv["L"]), float(kv["w"]), kv.get("mode", "rel"), kv.get("gate", "own")
            )
        elif kind in ("dprf", "hprf"):
            feedback = Feedback(
                "dense" if kind == "dprf" else "hybrid", int(kv["m"]), float(kv["beta"])
            )
        else:
            raise SystemExit(f"unknown variant part {part!r}")
    return Variant(prefix, feedback)


def grid() -> list[Variant]:
    variants = [Variant()]
    for source in ("dense", "hybrid"):
        for m in (1, 2, 3, 5):
            for beta in (0.3, 0.5, 1.0):
                variants.append(Variant(feedback=Feedback(source, m, beta)))
    for length in (4, 5, 6):
        for w in (0.3, 0.5, 1.0):
            for mode in ("rel", "flat"):
                variants.append(Variant(prefix=Prefix(length, w, mode)))
    return variants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    parser.add_argument("--only", default="", help="variants separated by ';' (default: grid)")
    parser.add_argument("--halves", action="store_true", help="also print tune/check halves")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.only.split(";") if v] if args.only else grid()
    config = tune.Config()
    with tune.session(args.cache) as tuner:
        data: dict[str, Data] = {}
        for directory in args.datasets:
            try:
                data[directory.name] = Data(tuner, tuner.prepare(load(directory)), config)
            except NoQueries:
                continue
        names = list(data)
        print(
            "variant".ljust(40) + "".join(SHORT.get(n, n)[:8].rjust(9) for n in names) + "  misses",
            flush=True,
        )
        for variant in variants:
            results = {n: data[n].evaluate(variant) for n in names}
            misses = 0
            lines = {"hybrid": "", "dense": "", "bm25": ""}
            halves_lines = {"tune": "", "check": ""}
            for n in names:
                r = results[n]
                h = r["hybrid"][0]
                flag = ""
                if n in TARGETS and h < TARGETS[n]:
                    flag += "*"
                if h < max(r["bm25"][0], r["dense"][0]):
                    flag += "<"
                misses += bool(flag)
                lines["hybrid"] += f"{h:.4f}{flag:<2}".rjust(9)
                lines["dense"] += f"{r['dense'][0]:.3f}  ".rjust(9)
                lines["bm25"] += f"{r['bm25'][0]:.3f}  ".rjust(9)
                halves_lines["tune"] += f"{r['hybrid'][1]:.3f}  ".rjust(9)
                halves_lines["check"] += f"{r['hybrid'][2]:.3f}  ".rjust(9)
            print(variant.name.ljust(40) + lines["hybrid"] + f"  {misses}", flush=True)
            print("  dense".ljust(40) + lines["dense"], flush=True)
            print("  bm25".ljust(40) + lines["bm25"], flush=True)
            if args.halves:
                print("  hybrid tune half".ljust(40) + halves_lines["tune"], flush=True)
                print("  hybrid check half".ljust(40) + halves_lines["check"], flush=True)


if __name__ == "__main__":
    main()
