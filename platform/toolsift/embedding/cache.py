"""A bounded, thread-safe LRU of query embeddings for the API process.

Agents repeat the same queries; a hit skips the model (milliseconds of CPU) or the embedding
server (a network round trip). Keys are (model, text), so a backend change never serves
vectors from the old space.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from .base import EmbeddingBackend, refuse_one_str


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    size: int
    maxsize: int


class CachedBackend:
    """Wraps a backend with an LRU; itself an `EmbeddingBackend`.

    Misses of one call go to the backend in one batch. The lock is not held while embedding,
    so two threads missing the same text at once may both compute it (harmless, same vector).
    """

    def __init__(self, backend: EmbeddingBackend, maxsize: int = 4096) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.backend = backend
        self.model = backend.model
        self.dimension = backend.dimension
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple[str, str], tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        # Set by the select path after a failure or a timeout: until then it does not ask.
        self.rests_until = 0.0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        refuse_one_str(texts)
        model = self.model
        found: dict[str, tuple[float, ...]] = {}
        with self._lock:
            for text in texts:
                entry = self._entries.get((model, text))
                if entry is not None:
                    self._entries.move_to_end((model, text))
                    found[text] = entry
            missing = list(dict.fromkeys(t for t in texts if t not in found))
            # A text repeated within one call counts as a hit: it is computed once.
            self._hits += len(texts) - len(missing)
            self._misses += len(missing)
        if missing:
            vectors = self.backend.embed(missing)
            with self._lock:
                for text, vector in zip(missing, vectors, strict=True):
                    entry = tuple(vector)
                    found[text] = entry
                    self._entries[(model, text)] = entry
                    self._entries.move_to_end((model, text))
                while len(self._entries) > self.maxsize:
                    self._entries.popitem(last=False)
        # Fresh lists: callers may mutate what they get without corrupting the cache.
        return [list(found[text]) for text in texts]

    def embed_one(self, text: str) -> list[float]:
        """The embedding of one query."""
        return self.embed([text])[0]

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, len(self._entries), self.maxsize)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._hits = self._misses = 0
