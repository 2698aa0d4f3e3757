"""What-if variants on top of prf.py / tune.py: lexical RM3 feedback and three-list fusion.

Reuses prf.Data unchanged (product field texts analysed by PostgreSQL, the BM25 formula,
cached ONNX vectors over `document_text`, the gate of `toolsift.selection.dense.fuse`) and adds:

- "rm3:m=..,n=..,lam=..[,sel=tf|idf]": BM25's top m tools give expansion terms, weight
  sum_d tf(t,d)/len(d) * score(d)/sum(scores) (times idf with sel=idf); the n best join the
  query with total weight lam relative to the original terms (RM3 interpolation, original
  terms keep weight 1 each, expansion terms share lam/(1-lam) * |q|); BM25 is re-ranked with
  the weighted query. The fusion gate stays on the ORIGINAL query's top BM25 score.
- "tri:m=..,beta=..,w3=..[,mode=add|split]": RRF over three lists: BM25, plain dense and
  the hybrid-PRF dense list (q' = q + beta * mean of the fused top m tools' vectors).
  Gate weight L as usual; mode=add: weights L, 1-L, w3*(1-L); mode=split: L, (1-L)(1-w3),
  (1-L) w3 (the dense share is split, BM25 keeps its share).
- "disc:m=..,beta=..,c=..": the hybrid-PRF dense list replaces plain dense, fused again with
  BM25 whose gate weight is multiplied by c (c < 1 undoes the double count).
- "rrf:k=..,scale=..,floor=..,cov=0|1|2": fusion constants (default the product's); cov is
  how the floor is scaled: 0 not at all (before migration 0025), 1 by the coverage over the
  words the catalog has (the product's), 2 by the coverage over all the query's words.

Combinations with "+". The dense mode stays plain dense (the product's dense mode); the
check "hybrid >= components" is against plain dense and the variant's BM25 list (and the
plain BM25 list). `--doc previous` embeds the text of before 0025's release. Targets come
from the baselines recorded in benchmarks/quality/<dataset>/results.json.

    python benchmarks/quality/fusion_variants.py DATASET_DIR... \
        --cache /tmp/toolsift-tune --halves --only 'base;rm3:m=3,n=10,lam=0.3'
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import prf
import tune

from toolsift.selection.dense import Fusion
from toolsift.selection.service import CANDIDATE_POOL
from toolsift_tooling.eval.dataset import EvalTool, NoQueries, load

SHORT = prf.SHORT
Ranking = prf.Ranking
Scored = prf.Scored


def previous_document(tool: EvalTool) -> str:
    """The embedded text before 0025's release: `name. title. description. Parameters: ...`."""
    from toolsift.lexical.analysis import split_identifier

    t = tool.tool
    parameters = t.input_schema.get("properties")
    parts = [split_identifier(t.name)]
    if t.title:
        parts.append(t.title)
    if t.description:
        parts.append(t.description)
    if isinstance(parameters, dict) and parameters:
        parts.append("Parameters: " + ", ".join(split_identifier(str(p)) for p in parameters))
    if t.examples:
        parts.append("Examples: " + "; ".join(t.examples))
    return ". ".join(p.strip().rstrip(".") for p in parts if p.strip())


def current_targets(directory: Path) -> float | None:
    """The target of docs/quality.md from the recorded baselines of this clone."""
    path = Path(__file__).parent / directory.name / "results.json"
    if not path.exists():
        return None
    r = json.loads(path.read_text())["results"]
    best: float = max(r["baseline_bm25s"]["recall@5"], r["baseline_dense"]["recall@5"])
    return best + 0.05 if best <= 0.90 else best + (1 - best) / 2


@dataclass(frozen=True)
class RM3:
    m: int
    n: int
    lam: float
    sel: str = "tf"
    adapt: int = 0  # 1: lam times scale/(top+scale), less expansion the more lexical evidence

    @property
    def name(self) -> str:
        return (
            f"rm3:m={self.m},n={self.n},lam={self.lam:g}"
            + (f",sel={self.sel}" if self.sel != "tf" else "")
            + (",adapt=1" if self.adapt else "")
        )


@dataclass(frozen=True)
class Tri:
    m: int
    beta: float
    w3: float
    mode: str = "add"

    @property
    def name(self) -> str:
        return f"tri:m={self.m},beta={self.beta:g},w3={self.w3:g},mode={self.mode}"


@dataclass(frozen=True)
class Disc:
    m: int
    beta: float
    c: float

    @property
    def name(self) -> str:
        return f"disc:m={self.m},beta={self.beta:g},c={self.c:g}"


@dataclass(frozen=True)
class RRF:
    k: float = Fusion.k
    scale: float = Fusion.bm25_scale
    floor: float = Fusion.bm25_floor
    # The floor times the query's coverage in BM25's first tool: 0 none (before 0025), 1 over
    # the words the catalog has (the product's), 2 over all the query's words.
    cov: int = 1

    @property
    def name(self) -> str:
        return f"rrf:k={self.k:g},scale={self.scale:g},floor={self.floor:g},cov={self.cov}"


@dataclass(frozen=True)
class Variant:
    rm3: RM3 | None = None
    tri: Tri | None = None
    disc: Disc | None = None
    rrf: RRF | None = None

    @property
    def name(self) -> str:
        parts = [p.name for p in (self.rm3, self.tri, self.disc, self.rrf) if p is not None]
        return "+".join(parts) or "base"


def gate_weight(top: float, rrf: RRF, has_bm25: bool, cov: float = 1.0) -> float:
    top = max(top, 0.0)
    return max(top / (top + rrf.scale), rrf.floor * cov) if has_bm25 else 0.0


def fuse_lists(lists: list[tuple[float, list[int]]], k: float) -> list[int]:
    fused: dict[int, float] = {}
    for weight, ids in lists:
        for rank, tool in enumerate(ids, start=1):
            fused[tool] = fused.get(tool, 0.0) + weight / (k + rank)
    return sorted(fused, key=lambda i: (-fused[i], i))


class Data(prf.Data):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        weights = {f: float(getattr(self.config.weights, f)) for f in tune.FIELDS}
        self.tfs: list[dict[str, float]] = []
        for i in range(len(self.prepared.names)):
            tf: dict[str, float] = defaultdict(float)
            for f in tune.FIELDS:
                if weights[f] > 0:
                    for lexeme, count in self.per_field[f][i].items():
                        tf[lexeme] += weights[f] * count
            self.tfs.append(dict(tf))
        n = len(self.tfs)
        self.lengths = np.array([sum(tf.values()) for tf in self.tfs])
        self.avgdl = self.lengths.sum() / n
        df: dict[str, int] = defaultdict(int)
        for tf in self.tfs:
            for t in tf:
                df[t] += 1
        self.idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        grouped: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for i, tf in enumerate(self.tfs):
            for t, v in tf.items():
                grouped[t].append((i, v))
        self.postings = {
            t: (np.array([i for i, _ in it]), np.array([v for _, v in it]))
            for t, it in grouped.items()
        }
        self.memo3: dict[object, object] = {}
        self.base_bm25 = self.bm25(None)

    def weighted_bm25(self, query: dict[str, float]) -> tuple[list[int], list[float]]:
        k1, b = self.config.k1, self.config.b
        n = len(self.tfs)
        scores = np.zeros(n)
        hit = np.zeros(n, dtype=bool)
        for term in sorted(query):
            if term not in self.postings:
                continue
            ids, values = self.postings[term]
            norm = values + k1 * (1 - b + b * self.lengths[ids] / self.avgdl)
            scores[ids] += query[term] * self.idf[term] * values * (k1 + 1) / norm
            hit[ids] = True
        cands = np.flatnonzero(hit)
        order = np.lexsort((cands, -scores[cands]))
        top = cands[order][:CANDIDATE_POOL]
        return [int(c) for c in top], [float(scores[c]) for c in top]

    def coverage(self, q: int, mode: int) -> float:
        """The query's coverage in BM25's first tool: 1 as the product counts it (tune.py's
        `Lexical.coverage`, over the words the catalog has), 2 with the words no tool has
        counted too, at the idf of df 0."""
        first = self.base_bm25[q]
        if mode == 1:
            return first.coverage
        terms = set(self.query_terms[q])
        if not first.ids or not terms:
            return 1.0
        unknown = math.log(1 + (len(self.tfs) + 0.5) / 0.5)
        top = self.tfs[first.ids[0]]
        weights = {t: self.idf.get(t, unknown) for t in terms}
        return sum(w for t, w in weights.items() if t in top) / sum(weights.values())

    def rm3_bm25(self, rm3: RM3) -> Scored:
        key = ("rm3", rm3)
        if key in self.memo3:
            return self.memo3[key]  # type: ignore[return-value]
        out: Scored = []
        for q, (ids, scores, coverage) in enumerate(self.base_bm25):
            original = {t for t in self.query_terms[q] if t in self.idf}
            chosen = ids[: rm3.m]
            if not chosen or not original:
                out.append(tune.Lexical(ids, scores, coverage))
                continue
            total = sum(scores[: rm3.m]) or 1.0
            weight: dict[str, float] = defaultdict(float)
            for d, s in zip(chosen, scores[: rm3.m], strict=False):
                length = self.lengths[d] or 1.0
                for t, v in self.tfs[d].items():
                    weight[t] += v / length * s / total
            if rm3.sel == "idf":
                weight = defaultdict(float, {t: w * self.idf[t] for t, w in weight.items()})
            best = sorted(weight.items(), key=lambda kv: (-kv[1], kv[0]))[: rm3.n]
            mass = sum(w for _, w in best) or 1.0
            lam = rm3.lam
            if rm3.adapt:
                lam *= 10.0 / (scores[0] + 10.0)
            share = lam / (1 - lam) * len(original)
            query: dict[str, float] = dict.fromkeys(original, 1.0)
            for t, w in best:
                query[t] = query.get(t, 0.0) + share * w / mass
            out.append(tune.Lexical(*self.weighted_bm25(query), coverage))
        self.memo3[key] = out
        return out

    def hprf_dense(self, tops: Ranking, m: int, beta: float) -> Ranking:
        return self.dense_rank(self.feedback_vectors(tops, prf.Feedback("hybrid", m, beta)))

    def run3(self, v: Variant) -> dict[str, Ranking]:
        rrf = v.rrf or RRF()
        lexical = self.rm3_bm25(v.rm3) if v.rm3 else self.base_bm25
        gates = [
            gate_weight(
                s[0] if s else 0.0, rrf, bool(ids), self.coverage(q, rrf.cov) if rrf.cov else 1.0
            )
            for q, (ids, s, _) in enumerate(self.base_bm25)
        ]
        lex_ids = [r[0] for r in lexical]
        near = self.dense_base
        hybrid = [
            fuse_lists([(L, b), (1 - L, d)], rrf.k)
            for L, b, d in zip(gates, lex_ids, near, strict=True)
        ]
        if v.tri:
            t = v.tri
            third = self.hprf_dense(hybrid, t.m, t.beta)
            out = []
            for L, b, d, e in zip(gates, lex_ids, near, third, strict=True):
                if t.mode == "add":
                    ws = (L, 1 - L, t.w3 * (1 - L))
                else:
                    ws = (L, (1 - L) * (1 - t.w3), (1 - L) * t.w3)
                out.append(fuse_lists([(ws[0], b), (ws[1], d), (ws[2], e)], rrf.k))
            hybrid = out
        elif v.disc:
            t2 = v.disc
            third = self.hprf_dense(hybrid, t2.m, t2.beta)
            hybrid = [
                fuse_lists([(L * t2.c, b), (1 - L, e)], rrf.k)
                for L, b, e in zip(gates, lex_ids, third, strict=True)
            ]
        return {
            "bm25": lex_ids,
            "bm25_0": [r.ids for r in self.base_bm25],
            "dense": near,
            "hybrid": hybrid,
        }

    def evaluate3(self, v: Variant) -> dict[str, tuple[float, float, float]]:
        return self.recalls(self.run3(v))


def parse_variant(text: str) -> Variant:
    v = Variant()
    if text == "base":
        return v
    for part in text.split("+"):
        kind, _, args = part.partition(":")
        kv = dict(p.split("=") for p in args.split(",") if p)
        if kind == "rm3":
            v = replace(
                v,
                rm3=RM3(
                    int(kv["m"]),
                    int(kv["n"]),
                    float(kv["lam"]),
                    kv.get("sel", "tf"),
                    int(kv.get("adapt", 0)),
                ),
            )
        elif kind == "tri":
            v = replace(
                v,
                tri=Tri(int(kv["m"]), float(kv["beta"]), float(kv["w3"]), kv.get("mode", "add")),
            )
        elif kind == "disc":
            v = replace(v, disc=Disc(int(kv["m"]), float(kv["beta"]), float(kv["c"])))
        elif kind == "rrf":
            v = replace(
                v,
                rrf=RRF(
                    float(kv.get("k", RRF.k)),
                    float(kv.get("scale", RRF.scale)),
                    float(kv.get("floor", RRF.floor)),
                    int(kv.get("cov", RRF.cov)),
                ),
            )
        else:
            raise SystemExit(f"unknown variant part {part!r}")
    return v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    parser.add_argument("--only", required=True, help="variants separated by ';'")
    parser.add_argument("--halves", action="store_true")
    parser.add_argument(
        "--doc", default="product", choices=["product", "previous"], help="embedded text"
    )
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.only.split(";") if v]
    config = tune.Config(
        document=previous_document if args.doc == "previous" else tune.product_document
    )
    targets: dict[str, float] = {}
    with tune.session(args.cache) as tuner:
        data: dict[str, Data] = {}
        for directory in args.datasets:
            try:
                data[directory.name] = Data(tuner, tuner.prepare(load(directory)), config)
            except NoQueries:
                continue
            t = current_targets(directory)
            if t is not None:
                targets[directory.name] = t
        names = list(data)
        print(
            "variant".ljust(52) + "".join(SHORT.get(n, n)[:8].rjust(9) for n in names) + "  fails",
            flush=True,
        )
        for variant in variants:
            results = {n: data[n].evaluate3(variant) for n in names}
            fails = 0
            rows = dict.fromkeys(("hybrid", "dense", "bm25", "tune", "check"), "")
            for n in names:
                r = results[n]
                h = r["hybrid"][0]
                flag = ""
                if n in targets and h < targets[n] - 1e-9:
                    flag += "*"
                if h < max(r["bm25"][0], r["bm25_0"][0], r["dense"][0]):
                    flag += "<"
                fails += bool(flag)
                rows["hybrid"] += f"{h:.4f}{flag:<2}".rjust(9)
                rows["dense"] += f"{r['dense'][0]:.3f}  ".rjust(9)
                rows["bm25"] += f"{r['bm25'][0]:.3f}  ".rjust(9)
                rows["tune"] += f"{r['hybrid'][1]:.3f}  ".rjust(9)
                rows["check"] += f"{r['hybrid'][2]:.3f}  ".rjust(9)
            print(variant.name.ljust(52) + rows["hybrid"] + f"  {fails}", flush=True)
            if variant.rm3 or variant == Variant():
                print("  bm25 (this variant)".ljust(52) + rows["bm25"], flush=True)
            if variant == Variant():
                print("  dense".ljust(52) + rows["dense"], flush=True)
            if args.halves:
                print("  hybrid tune half".ljust(52) + rows["tune"], flush=True)
                print("  hybrid check half".ljust(52) + rows["check"], flush=True)


if __name__ == "__main__":
    main()
