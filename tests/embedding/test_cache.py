"""The query-embedding LRU."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from toolsift.embedding import CachedBackend, EmbeddingBackend


class Counting:
    """A fake backend that records what it was asked to embed."""

    dimension = 2

    def __init__(self, model: str = "m1") -> None:
        self.model = model
        self.calls: list[list[str]] = []
        self.lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        with self.lock:
            self.calls.append(list(texts))
        return [[float(len(t)), 1.0] for t in texts]


def test_hits_skip_the_backend_and_misses_are_batched() -> None:
    inner = Counting()
    cache = CachedBackend(inner, maxsize=10)
    assert cache.embed(["a", "bb"]) == [[1.0, 1.0], [2.0, 1.0]]
    assert cache.embed(["bb", "ccc", "a", "ccc"]) == [
        [2.0, 1.0],
        [3.0, 1.0],
        [1.0, 1.0],
        [3.0, 1.0],
    ]
    assert inner.calls == [["a", "bb"], ["ccc"]]
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.size) == (3, 3, 3)
    assert isinstance(cache, EmbeddingBackend)
    assert (cache.model, cache.dimension) == ("m1", 2)


def test_a_bare_string_is_refused_before_the_backend() -> None:
    inner = Counting()
    with pytest.raises(TypeError, match="not one str"):
        CachedBackend(inner, maxsize=10).embed("abc")
    assert inner.calls == []


def test_least_recently_used_is_evicted() -> None:
    inner = Counting()
    cache = CachedBackend(inner, maxsize=2)
    cache.embed_one("a")
    cache.embed_one("b")
    cache.embed_one("a")  # a is now the most recent
    cache.embed_one("c")  # evicts b
    cache.embed_one("a")
    cache.embed_one("b")
    assert inner.calls == [["a"], ["b"], ["c"], ["b"]]
    assert cache.stats().size == 2


def test_keyed_by_model() -> None:
    inner = Counting("m1")
    cache = CachedBackend(inner)
    cache.embed_one("q")
    cache.model = inner.model = "m2"
    cache.embed_one("q")
    assert inner.calls == [["q"], ["q"]]


def test_callers_cannot_corrupt_entries() -> None:
    cache = CachedBackend(Counting())
    cache.embed_one("q").append(99.0)
    assert cache.embed_one("q") == [1.0, 1.0]


def test_thread_safe_and_bounded() -> None:
    cache = CachedBackend(Counting(), maxsize=50)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(300):
                text = f"q{(i * 7 + offset) % 120}"
                assert cache.embed_one(text) == [float(len(text)), 1.0]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    stats = cache.stats()
    assert stats.size <= 50
    assert stats.hits + stats.misses == 8 * 300


def test_rejects_bad_size() -> None:
    with pytest.raises(ValueError, match="maxsize"):
        CachedBackend(Counting(), maxsize=0)
