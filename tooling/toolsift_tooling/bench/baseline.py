"""The in-process yardstick: bm25s over the same catalogs and queries, single thread.

bm25s scores in numpy against a prebuilt sparse matrix, with no
network, no transaction and no permission model; toolsift's figures divided by these show
what the service around BM25 costs. Hidden tools are masked out with `weight_mask`, so both
sides rank the same visible set.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from toolsift.lexical.analysis import split_identifier
from toolsift.tools.schemas import ToolCreate

from .stats import Latency
from .synthetic import Catalog, Query


def _bm25s() -> Any:
    import bm25s  # on first use: it loads scipy

    return bm25s


def bm25s_version() -> str:
    return str(getattr(_bm25s(), "__version__", "unknown"))


class Bm25sIndex:
    """One catalog: name (identifier split, as toolsift splits it) plus description."""

    def __init__(self, catalog: Catalog) -> None:
        bm25s = _bm25s()
        import numpy as np

        self._bm25s = bm25s
        tools: Sequence[ToolCreate] = catalog.tools
        self.names = [t.name for t in tools]
        corpus = [f"{split_identifier(t.name)} {t.description}" for t in tools]
        started = time.perf_counter()
        self.retriever = bm25s.BM25()
        self.retriever.index(
            bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False
        )
        self.index_seconds = time.perf_counter() - started
        visible = {t.name for t in catalog.visible()}
        self.mask = np.array([1.0 if n in visible else 0.0 for n in self.names])

    def search(self, text: str, k: int) -> list[str]:
        tokens = self._bm25s.tokenize([text], stopwords="en", show_progress=False, return_ids=False)
        documents, _scores = self.retriever.retrieve(
            tokens, k=min(k, len(self.names)), show_progress=False, weight_mask=self.mask
        )
        return [self.names[int(i)] for i in documents[0]]


@dataclass
class BaselineResult:
    seconds: float
    latency: Latency
    hits: int
    judged: int
    index_seconds: float

    @property
    def throughput(self) -> float:
        return self.latency.count / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "selects_per_second": self.throughput,
            "latency_ms": self.latency.as_dict(),
            "hit_at_k": self.hits / self.judged if self.judged else None,
            "index_seconds": self.index_seconds,
        }


def run(
    work: list[tuple[Bm25sIndex, Query]],
    *,
    k: int,
    duration: float,
    max_requests: int,
    warmup: int = 20,
) -> BaselineResult:
    """Queries one after another, in the HTTP run's order, until `duration` or the count."""
    for index, query in work[:warmup]:
        index.search(query.text, k)
    samples: list[float] = []
    hits = judged = 0
    started = time.perf_counter()
    until = started + duration
    n = 0
    while n < max_requests and time.perf_counter() < until:
        index, query = work[n % len(work)]
        t0 = time.perf_counter()
        found = index.search(query.text, k)
        samples.append((time.perf_counter() - t0) * 1000)
        if n < len(work) and query.target is not None:
            judged += 1
            hits += query.target in found
        n += 1
    return BaselineResult(
        seconds=time.perf_counter() - started,
        latency=Latency.of(samples),
        hits=hits,
        judged=judged,
        index_seconds=sum({id(i): i.index_seconds for i, _ in work}.values()),
    )
