"""A fast what-if loop for retrieval tuning, in one process, without the API.

`toolsift eval` is the measurement of record: it loads a fresh tenant through the admin API,
waits for the worker's embeddings and sends every query to `POST /v1/select`. That is minutes
per dataset, most of it embedding. This script answers "what if" in seconds instead, with the
product's own pieces:

- lexemes come from PostgreSQL's `to_tsvector` on an embedded server, over the product's own
  field texts (`toolsift.lexical.analysis.field_texts`), counted per field so that any set
  of field weights is a sum, not a re-analysis;
- BM25 is the formula of `toolsift.selection.bm25` (idf `ln(1 + (N - df + 0.5)/(df + 0.5))`,
  weighted tf, ties by registry position, the top `CANDIDATE_POOL`);
- queries are built by `toolsift.selection.query.build_query` from one user message;
- vectors come from the product's ONNX backend over `document_text`, cached on disk by text,
  so a new document text re-embeds only the texts that changed;
- fusion is `toolsift.selection.dense.fuse`.

Its BM25 figures equal `toolsift eval`'s. Its dense ones differed on a few datasets until
migration 0020: this loop embeds the parameter names in the order the dataset wrote them,
and the server embedded them in jsonb's order; since 0020 the server keeps the order written,
and its dense recall@5 on LiveMCPBench and BFCL, where the two had differed, is now the
loop's (docs/quality.md). It guides choices; the figures of record are the
eval command's.

    python benchmarks/quality/tune.py /path/to/datasets/* --cache /tmp/toolsift-tune

Queries are split in two halves by a hash of their id ("tune" and "check"), so a change that
helps only the half it was chosen on shows up as such.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import psycopg

from toolsift.dbobjects import PACKAGE
from toolsift.embedded.postgres import EmbeddedPostgres
from toolsift.embedding.service import document_text
from toolsift.lexical.analysis import DEFAULT_WEIGHTS, TEXT_SEARCH_CONFIG, FieldWeights, field_texts
from toolsift.selection import bm25, dense
from toolsift.selection.dense import Fusion
from toolsift.selection.query import build_query, steps
from toolsift.selection.schemas import SelectRequest
from toolsift.selection.service import CANDIDATE_POOL
from toolsift_tooling.eval.dataset import Dataset, EvalTool, NoQueries, half_of, load
from toolsift_tooling.eval.metrics import Outcome, summarise

#: The product's `toolsift_cjk_bigrams`, which the loop analyses text through, as a statement
#: that may run again on one server.
CJK_BIGRAMS = (
    (PACKAGE / "lexical" / "sql" / "toolsift_cjk_bigrams.sql")
    .read_text()
    .replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
)
#: Where the quality scripts keep the vectors they embedded, shared by all of them.
CACHE = Path(tempfile.gettempdir()) / "toolsift-tune"
KS = (1, 3, 5, 10)
DEPTH = max(KS)
FIELDS = [f.name for f in fields(FieldWeights)]

DocumentText = Callable[[EvalTool], str]


def product_document(tool: EvalTool) -> str:
    t = tool.tool
    return document_text(t.name, t.title, t.description, t.input_schema, t.examples)


@dataclass(frozen=True)
class Config:
    """Everything the loop can vary; the defaults are the product's."""

    weights: FieldWeights = DEFAULT_WEIGHTS
    text_search: str = TEXT_SEARCH_CONFIG
    k1: float = bm25.K1
    b: float = bm25.B
    fusion: dense.Fusion = field(default_factory=dense.Fusion)
    document: DocumentText = product_document
    query: Callable[[str], str] | None = None  # query text -> query; default build_query


def query_of(text: str) -> str:
    return build_query(
        SelectRequest.model_validate({"messages": [{"role": "user", "content": text}]})
    )


class Analyser:
    """`to_tsvector` on a real PostgreSQL, memoised per (configuration, text), after the
    product's `toolsift_cjk_bigrams`, as `toolsift.lexical.index` analyses a tool."""

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self.connection = connection
        connection.execute(CJK_BIGRAMS)
        self.memo: dict[tuple[str, str], Counter[str]] = {}

    def lexemes(self, config: str, texts: Sequence[str]) -> list[Counter[str]]:
        todo = sorted({t for t in texts if (config, t) not in self.memo})
        for start in range(0, len(todo), 2000):
            chunk = todo[start : start + 2000]
            found: dict[int, Counter[str]] = defaultdict(Counter)
            rows = self.connection.execute(
                "SELECT f.i, l.lexeme, cardinality(l.positions)"
                " FROM unnest(%s::text[]) WITH ORDINALITY AS f(body, i),"
                " unnest(to_tsvector(%s::regconfig, public.toolsift_cjk_bigrams(f.body))) AS l",
                (chunk, config),
            )
            for i, lexeme, count in rows:
                found[int(i) - 1][lexeme] = int(count)
            for i, text in enumerate(chunk):
                self.memo[config, text] = found.get(i, Counter())
        return [self.memo[config, t] for t in texts]


class VectorCache:
    """Embeddings by sha1 of the text, kept in one .npz per model between runs."""

    def __init__(self, directory: Path) -> None:
        from toolsift.embedding.onnx import OnnxBackend

        self.backend = OnnxBackend()
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{self.backend.model}.npz"
        self.vectors: dict[str, npt.NDArray[np.float32]] = {}
        if self.path.exists():
            with np.load(self.path) as stored:
                self.vectors = {k: stored[k] for k in stored.files}
        self.dirty = False

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        todo = list(dict.fromkeys(t for t in texts if self.key(t) not in self.vectors))
        for start in range(0, len(todo), 64):
            chunk = todo[start : start + 64]
            for text, vector in zip(chunk, self.backend.embed(chunk), strict=True):
                self.vectors[self.key(text)] = np.asarray(vector, dtype=np.float32)
            self.dirty = True
        if self.dirty and todo:
            self.save()
        return np.stack([self.vectors[self.key(t)] for t in texts])

    def save(self) -> None:
        """Merged with what another run stored meanwhile, and renamed into place whole."""
        if self.path.exists():
            with contextlib.suppress(Exception), np.load(self.path) as stored:
                for k in stored.files:
                    self.vectors.setdefault(k, stored[k])
        partial = self.path.with_suffix(f".{os.getpid()}.npz")
        # numpy's stub types `**kwds` as its own keyword options, not as the arrays they are.
        np.savez(partial, **self.vectors)  # type: ignore[arg-type]
        partial.replace(self.path)
        self.dirty = False


@dataclass
class Prepared:
    """One dataset, analysed per field and per text search configuration."""

    dataset: Dataset
    names: list[str]
    field_lexemes: dict[str, dict[str, list[Counter[str]]]] = field(default_factory=dict)
    query_lexemes: dict[tuple[str, str], list[set[str]]] = field(default_factory=dict)


class Lexical(NamedTuple):
    """One query's BM25 list: tool indices and scores, best first, and the query's coverage
    in the first tool (the idf-weighted share of its words the catalog has that the tool
    contains, as `toolsift_bm25` computes it), which scales the fusion's floor."""

    ids: list[int]
    scores: list[float]
    coverage: float


def rank_bm25(
    tfs: Sequence[dict[str, float]], queries: Sequence[Iterable[str]], *, k1: float, b: float
) -> list[Lexical]:
    """BM25 of `toolsift.selection.bm25` over weighted term frequencies, one document per
    tool: per query, the top tool indices and their scores, best first, ties by position."""
    lengths = np.array([sum(tf.values()) for tf in tfs], dtype=np.float64)
    n = len(tfs)
    avgdl = lengths.sum() / n if n else 1.0
    grouped: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for i, tf in enumerate(tfs):
        for lexeme, value in tf.items():
            grouped[lexeme].append((i, value))
    postings = {
        lexeme: (
            np.array([i for i, _ in items], dtype=np.int64),
            np.array([v for _, v in items], dtype=np.float64),
        )
        for lexeme, items in grouped.items()
    }
    rankings: list[Lexical] = []
    positions = np.arange(n)
    for query_terms in queries:
        scores = np.zeros(n)
        hit = np.zeros(n, dtype=bool)
        idfs: dict[str, float] = {}
        for term in sorted(set(query_terms)):
            if term not in postings:  # a word no tool has does not count
                continue
            ids, values = postings[term]
            df = len(ids)
            idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
            idfs[term] = float(idf)
            norm = values + k1 * (1 - b + b * lengths[ids] / avgdl)
            scores[ids] += idf * values * (k1 + 1) / norm
            hit[ids] = True
        candidates = np.flatnonzero(hit)
        order = np.lexsort((positions[candidates], -scores[candidates]))
        top = candidates[order][:CANDIDATE_POOL]
        coverage = 1.0
        if len(top):
            first = tfs[int(top[0])]
            matched = sum(v for t, v in idfs.items() if t in first)
            coverage = matched / sum(idfs.values())
        rankings.append(Lexical([int(c) for c in top], [float(scores[c]) for c in top], coverage))
    return rankings


class Tuner:
    def __init__(self, analyser: Analyser, vectors: VectorCache | None) -> None:
        self.analyser = analyser
        self.vectors = vectors

    def prepare(self, dataset: Dataset) -> Prepared:
        return Prepared(dataset, [t.tool.name for t in dataset.tools])

    def _fields(self, prepared: Prepared, config: str) -> dict[str, list[Counter[str]]]:
        if config not in prepared.field_lexemes:
            texts = [
                field_texts(
                    name=t.tool.name,
                    title=t.tool.title,
                    description=t.tool.description,
                    input_schema=t.tool.input_schema,
                    examples=t.tool.examples,
                )
                for t in prepared.dataset.tools
            ]
            prepared.field_lexemes[config] = {
                f: self.analyser.lexemes(config, [t[f] for t in texts]) for f in FIELDS
            }
        return prepared.field_lexemes[config]

    def _queries(self, prepared: Prepared, config: Config) -> list[str]:
        build = config.query or query_of
        return [build(q.text) for q in prepared.dataset.queries]

    def bm25(self, prepared: Prepared, config: Config) -> list[list[int]]:
        return [r.ids for r in self.bm25_scored(prepared, config)]

    def term_frequencies(self, prepared: Prepared, config: Config) -> list[dict[str, float]]:
        """Each tool's weighted term frequencies, as `lexical.index.analyse` sums them."""
        per_field = self._fields(prepared, config.text_search)
        weights = {f: float(getattr(config.weights, f)) for f in FIELDS}
        tfs: list[dict[str, float]] = []
        for i in range(len(prepared.names)):
            tf: dict[str, float] = defaultdict(float)
            for f in FIELDS:
                if weights[f] > 0:
                    for lexeme, count in per_field[f][i].items():
                        tf[lexeme] += weights[f] * count
            tfs.append(tf)
        return tfs

    def query_terms(self, prepared: Prepared, config: Config) -> list[Counter[str]]:
        """Each query's lexemes, counted: what BM25 matches, and what a learned query adds."""
        return self.analyser.lexemes(config.text_search, self._queries(prepared, config))

    def bm25_scored(self, prepared: Prepared, config: Config) -> list[Lexical]:
        """Per query: the top tool indices and their BM25 scores, best first."""
        tfs = self.term_frequencies(prepared, config)
        terms = self.query_terms(prepared, config)
        return rank_bm25(tfs, terms, k1=config.k1, b=config.b)

    def dense(self, prepared: Prepared, config: Config) -> list[list[int]]:
        return [ids for ids, _ in self.dense_scored(prepared, config)]

    def dense_scored(
        self, prepared: Prepared, config: Config
    ) -> list[tuple[list[int], list[float]]]:
        """Per query: the nearest tool indices and their cosine distances, nearest first."""
        distances = self.distances(prepared, config)
        rankings: list[tuple[list[int], list[float]]] = []
        positions = np.arange(distances.shape[1])
        for distance in distances:
            # pgvector orders by cosine distance in float8, then registry position.
            order = np.lexsort((positions, distance))[:CANDIDATE_POOL]
            rankings.append(([int(i) for i in order], [float(distance[i]) for i in order]))
        return rankings

    def embed(self, texts: Sequence[str], *, query: bool) -> npt.NDArray[np.float32]:
        """Unit vectors of `texts` as the product embeds them. A what-if overrides it for a
        model that embeds queries and documents apart, or for another space."""
        if self.vectors is None:
            raise RuntimeError("dense needs the embedding backend")
        return self.vectors.embed(texts)

    def distances(self, prepared: Prepared, config: Config) -> npt.NDArray[np.float64]:
        """Queries by tools: each tool's cosine distance to the nearest of the query and its
        steps (`toolsift.selection.query.steps`), as `toolsift_select` measures its own
        vector."""
        matrix = self.embed([config.document(t) for t in prepared.dataset.tools], query=False)
        texts = self._queries(prepared, config)
        distances = 1.0 - (self.embed(texts, query=True) @ matrix.T).astype(np.float64)
        split = [steps(text) for text in texts]
        if flat := [s for parts in split for s in parts]:
            vectors = iter(1.0 - (self.embed(flat, query=True) @ matrix.T).astype(np.float64))
            for row, parts in enumerate(split):
                for _ in parts:
                    np.minimum(distances[row], next(vectors), out=distances[row])
        return distances

    @staticmethod
    def hybrid(lexical: list[Lexical], near: list[list[int]], fusion: Fusion) -> list[list[int]]:
        rankings = []
        for r, dense_ids in zip(lexical, near, strict=True):
            top = r.scores[0] if r.scores else 0.0
            fused = dense.fuse(
                r.ids,
                dense_ids,
                fusion,
                bm25_top=top,
                bm25_coverage=r.coverage,
            )
            rankings.append(sorted(fused, key=lambda i: (-fused[i], i)))
        return rankings


def recall5(prepared: Prepared, rankings: list[list[int]], subset: Iterable[int]) -> float:
    outcomes = [
        Outcome(
            [prepared.names[i] for i in rankings[q][:DEPTH]],
            prepared.dataset.queries[q].relevant,
            0,
            0.0,
        )
        for q in subset
    ]
    return summarise(outcomes, ks=KS, catalog_tokens=1)["recall@5"]


#: The rule every what-if here is judged by: the largest gain summed over the tune halves,
#: among the variants that cost no tune half more than this.
WORST = -0.005


def verdict(tune_halves: Sequence[float], served: Sequence[float]) -> str:
    """A variant's summed gain and worst loss over the served tune halves, as two table
    cells, the second marked when the rule rules the variant out."""
    gains = [mine - theirs for mine, theirs in zip(tune_halves, served, strict=True)]
    fails = "" if min(gains) >= WORST else " (fails)"
    return f"{sum(gains):+.3f} | {min(gains):+.3f}{fails}"


def halves(dataset: Dataset) -> tuple[list[int], list[int]]:
    tune: list[int] = []
    check: list[int] = []
    for i, q in enumerate(dataset.queries):
        (tune if half_of(q.id) == "tune" else check).append(i)
    return tune, check


def evaluate(
    tuner: Tuner, prepared: Prepared, config: Config, modes: Sequence[str]
) -> dict[str, tuple[float, float, float]]:
    """mode -> (all, tune half, check half) recall@5."""
    tune, check = halves(prepared.dataset)
    everyone = range(len(prepared.dataset.queries))
    runs: dict[str, list[list[int]]] = {}
    scored: list[Lexical] = []
    if "bm25" in modes or "hybrid" in modes:
        scored = tuner.bm25_scored(prepared, config)
        runs["bm25"] = [r.ids for r in scored]
    if "dense" in modes or "hybrid" in modes:
        runs["dense"] = tuner.dense(prepared, config)
    if "hybrid" in modes:
        runs["hybrid"] = tuner.hybrid(scored, runs["dense"], config.fusion)
    return {
        mode: tuple(recall5(prepared, runs[mode], s) for s in (everyone, tune, check))  # type: ignore[misc]
        for mode in modes
        if mode in runs
    }


def baselines(directory: Path) -> dict[str, float]:
    """recall@5 of the recorded baselines, from benchmarks/quality/<dataset>/results.json."""
    path = Path(__file__).parent / directory.name / "results.json"
    if not path.exists():
        return {}
    results = json.loads(path.read_text())["results"]
    return {k: v["recall@5"] for k, v in results.items() if k.startswith("baseline_")}


def each_dataset(tuner: Tuner, directories: Iterable[Path]) -> Iterator[tuple[Path, Prepared]]:
    """Each dataset folder with its prepared data, skipping those with no queries (a
    catalog alone, such as `mcp_registry_catalog`)."""
    for directory in directories:
        try:
            yield directory, tuner.prepare(load(directory))
        except NoQueries:
            continue


@contextlib.contextmanager
def session(cache: Path, *, embeddings: bool = True) -> Any:
    with tempfile.TemporaryDirectory(prefix="toolsift-tune-") as work:
        server = EmbeddedPostgres(Path(work), fast=True)
        try:
            url = server.start()
            with psycopg.connect(url, autocommit=True) as connection:
                yield Tuner(Analyser(connection), VectorCache(cache) if embeddings else None)
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--modes", default="bm25,dense,hybrid")
    parser.add_argument("--k1", type=float, default=bm25.K1)
    parser.add_argument("--b", type=float, default=bm25.B)
    parser.add_argument("--rrf-k", type=float, default=dense.Fusion().k)
    parser.add_argument("--bm25-weight", type=float, default=dense.Fusion().bm25_weight)
    parser.add_argument("--dense-weight", type=float, default=dense.Fusion().dense_weight)
    parser.add_argument("--bm25-scale", type=float, default=dense.Fusion().bm25_scale)
    parser.add_argument("--bm25-floor", type=float, default=dense.Fusion().bm25_floor)
    parser.add_argument("--text-search", default=TEXT_SEARCH_CONFIG)
    parser.add_argument("--weights", default="", help="e.g. name=3,title=2,description=1")
    args = parser.parse_args()
    modes = args.modes.split(",")
    overrides = {k: float(v) for k, v in (p.split("=") for p in args.weights.split(",") if p)}
    config = Config(
        weights=replace(DEFAULT_WEIGHTS, **overrides),
        text_search=args.text_search,
        k1=args.k1,
        b=args.b,
        fusion=dense.Fusion(
            args.rrf_k, args.bm25_weight, args.dense_weight, args.bm25_scale, args.bm25_floor
        ),
    )
    with session(args.cache, embeddings=bool({"dense", "hybrid"} & set(modes))) as tuner:
        for directory, prepared in each_dataset(tuner, args.datasets):
            scores = evaluate(tuner, prepared, config, modes)
            recorded = baselines(directory)
            cells = [f"{m} {a:.3f} ({t:.3f}/{c:.3f})" for m, (a, t, c) in scores.items()]
            cells += [f"{k[9:]} {v:.3f}" for k, v in recorded.items()]
            print(f"{directory.name:<18} " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
