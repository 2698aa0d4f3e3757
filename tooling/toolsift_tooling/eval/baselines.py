"""In-process yardsticks on the same tools and queries: bm25s, and brute-force cosine.

Both see a tool as its dataset name plus its description: what a simple retriever would
index. They run in this process, with no network, permissions or budget.

`baseline_bm25s` is meant as the strong lexical yardstick, not a straw man: bm25s (Lucene
BM25) with English stop words and Snowball stemming (PyStemmer), identifiers split into their
words in the name, the description and the query alike. `baseline_dense` embeds the name
(identifiers split) and the description as they are.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from toolsift.embedding.base import EmbeddingBackend
from toolsift.lexical.analysis import split_identifier

from .dataset import EvalQuery, EvalTool
from .metrics import Outcome

BM25S = "baseline_bm25s"
DENSE = "baseline_dense"
BASELINES = (BM25S, DENSE)

# Word boundaries inside identifiers: separators (snake_case, kebab-case, dotted and path
# names), a lower case or digit before an upper case (camelCase), the end of an acronym
# (`HTTPStatus`), and letters beside digits (`base64Encode`, `v2`).
_SEPARATORS = re.compile(r"[_.\-/:]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_DIGITS = re.compile(r"(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])")


def document(tool: EvalTool) -> str:
    """The text `baseline_dense` embeds: the name, identifiers split, and the description."""
    return f"{split_identifier(tool.label)} {tool.tool.description}".strip()


def split_words(text: str) -> str:
    """Every identifier in `text` as its words: `getUserProfile_v2.list` -> `get User
    Profile v 2 list`. Prose is left as it reads (bm25s splits at punctuation anyway)."""
    return _DIGITS.sub(" ", _CAMEL.sub(" ", _SEPARATORS.sub(" ", text)))


def lexical_document(tool: EvalTool) -> str:
    """The text `baseline_bm25s` indexes: the name and the description, identifiers split."""
    return split_words(f"{tool.label} {tool.tool.description}").strip()


def _bm25s() -> tuple[Any, Any]:
    """bm25s and an English Snowball stemmer."""
    import bm25s  # on first use: it loads scipy
    import Stemmer  # type: ignore[import-not-found]  # no stubs, no py.typed

    return bm25s, Stemmer.Stemmer("english")


class Bm25sRetriever:
    """bm25s (Lucene BM25, k1 1.5, b 0.75) with English stop words, English stemming and
    identifiers split, over the name and the description; the query is read the same way."""

    def __init__(self, tools: Sequence[EvalTool]) -> None:
        self._bm25s, self._stemmer = _bm25s()
        self.names = [t.tool.name for t in tools]
        self.retriever = self._bm25s.BM25()
        self.retriever.index(self.tokens([lexical_document(t) for t in tools]), show_progress=False)

    def tokens(self, texts: list[str], *, ids: bool = True) -> Any:
        """Lower case, words of two characters or more, stop words out (before stemming,
        as bm25s does), then stemmed; `ids` False gives the stems as strings."""
        return self._bm25s.tokenize(
            [split_words(t) for t in texts],
            stopwords="en",
            stemmer=self._stemmer,
            return_ids=ids,
            show_progress=False,
        )

    def search(self, text: str, k: int) -> list[str]:
        tokens = self.tokens([text], ids=False)
        if not any(tokens):
            return []
        # A stem no tool has is left out by bm25s; a query of only such stems scores 0.
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
