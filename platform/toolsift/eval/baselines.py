"""In-process yardsticks on the same tools and queries: bm25s, and brute-force cosine.

Both see a tool as its dataset name (identifiers split) plus its description: what a simple
retriever would index. They run in this process, with no network, permissions or budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..embedding.base import EmbeddingBackend
from ..lexical.analysis import split_identifier
from .dataset import EvalQuery, EvalTool
from .metrics import Outcome

BM25S = "baseline_bm25s"
DENSE = "baseline_dense"
BASELINES = (BM25S, DENSE)


def document(tool: EvalTool) -> str:
    return f"{split_identifier(tool.label)} {tool.tool.description}".strip()


def _bm25s() -> Any:
    try:
        import bm25s
    except ImportError as error:  # pragma: no cover - part of the eval and dev extras
        raise RuntimeError("bm25s is not installed: pip install 'toolsift[eval]'") from error
    return bm25s


class Bm25sRetriever:
    """bm25s (Lucene BM25, k1 1.5, b 0.75) with English stop words and no stemming."""

    def __init__(self, tools: Sequence[EvalTool]) -> None:
        self._bm25s = _bm25s()
        self.names = [t.tool.name for t in tools]
        self.retriever = self._bm25s.BM25()
        corpus = self._bm25s.tokenize(
            [document(t) for t in tools], stopwords="en", show_progress=False
        )
        self.retriever.index(corpus, show_progress=False)

    def search(self, text: str, k: int) -> list[str]:
        tokens = self._bm25s.tokenize([text], stopwords="en", show_progress=False, return_ids=False)
        if not any(tokens):
            return []
        documents, scores = self.retriever.retrieve(
            tokens, k=min(k, len(self.names)), show_progress=False
        )
        # bm25s fills the top k even with zero scores; a tool sharing no term is no answer.
        return [self.names[int(i)] for i, s in zip(documents[0], scores[0], strict=True) if s > 0]


class DenseRetriever:
    """Cosine similarity against every tool vector (the vectors are L2-normalised)."""

    def __init__(self, tools: Sequence[EvalTool], backend: EmbeddingBackend) -> None:
        self.backend = backend
        self.names = [t.tool.name for t in tools]
        self.matrix = np.asarray(backend.embed([document(t) for t in tools]), dtype=np.float32)

    def search(self, text: str, k: int) -> list[str]:
        vector = np.asarray(self.backend.embed([text])[0], dtype=np.float32)
        scores = self.matrix @ vector
        top = np.argsort(-scores, kind="stable")[:k]
        return [self.names[int(i)] for i in top]


def run(
    search: Callable[[str, int], list[str]],
    queries: Sequence[EvalQuery],
    *,
    depth: int,
    token_costs: dict[str, int],
    progress: Callable[[], None] | None = None,
) -> list[Outcome]:
    """Each query once, one after another; latency is the search call alone."""
    outcomes = []
    for query in queries:
        started = time.perf_counter()
        ranking = search(query.text, depth)
        elapsed = (time.perf_counter() - started) * 1000
        tokens = sum(token_costs.get(name, 0) for name in ranking)
        outcomes.append(Outcome(ranking, query.relevant, tokens, elapsed))
        if progress is not None:
            progress()
    return outcomes
