"""The embedding interface the rest of toolsift depends on, and the choice of backend.

Callers see only `EmbeddingBackend`; which model runs where is configuration, so the API
process, the workers and the tests can each pick theirs without code changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable


class EmbeddingError(RuntimeError):
    """Embedding failed in a way a retry will not fix (bad configuration, bad answer)."""


class EmbeddingUnavailable(EmbeddingError):
    """Embedding failed for now (server overloaded or unreachable): callers retry later."""


@runtime_checkable
class EmbeddingBackend(Protocol):
    """Turns texts into L2-normalised vectors of `dimension` floats, in input order.

    `model` names the vector space: vectors from different `model` values never mix.
    """

    model: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class EmbeddingSettings(Protocol):
    """The settings `get_backend` reads; `toolsift.config.Settings` or `EmbeddingConfig`.

    Read-only properties, so that frozen dataclasses and pydantic settings both fit.
    """

    @property
    def embedding_backend(self) -> str: ...
    @property
    def embedding_dimension(self) -> int: ...
    @property
    def embedding_threads(self) -> int: ...
    @property
    def embedding_batch_size(self) -> int: ...
    @property
    def embedding_onnx_model(self) -> str: ...
    @property
    def embedding_cache_dir(self) -> Path | None: ...
    @property
    def embedding_http_url(self) -> str | None: ...
    @property
    def embedding_http_model(self) -> str: ...
    @property
    def embedding_http_token(self) -> str | None: ...
    @property
    def embedding_http_timeout(self) -> float: ...
    @property
    def embedding_http_retries(self) -> int: ...


@dataclass(frozen=True)
class EmbeddingConfig:
    """Defaults of `EmbeddingSettings`: the local int8 MiniLM, one thread per process."""

    embedding_backend: str = "onnx"
    embedding_dimension: int = 384
    # One intra-op thread: throughput scales by adding worker processes, not threads.
    embedding_threads: int = 1
    embedding_batch_size: int = 32
    embedding_onnx_model: str = "all-MiniLM-L6-v2-int8-dynamic"
    embedding_cache_dir: Path | None = None
    embedding_http_url: str | None = None
    embedding_http_model: str = "all-MiniLM-L6-v2"
    embedding_http_token: str | None = None
    embedding_http_timeout: float = 10.0
    embedding_http_retries: int = 3


BACKENDS = ("onnx", "http")


def refuse_one_str(texts: Sequence[str]) -> None:
    """Every backend's first check: a str is a sequence of one-letter texts to the type
    checker, and embedding each letter of a query is never what was meant."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not one str")


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form, every float in its shortest exact repr: stored tool vectors and
    query vectors go through this one function, so both reach the database bit for bit."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def configured_model(config: EmbeddingSettings) -> str:
    """The model name this configuration's vectors carry, without building a backend."""
    if config.embedding_backend.strip().lower() == "onnx":
        return config.embedding_onnx_model
    return config.embedding_http_model


def get_backend(config: EmbeddingSettings) -> EmbeddingBackend:
    """The backend the configuration names; cheap to call (the ONNX model loads on first use)."""
    name = config.embedding_backend.strip().lower()
    if name == "onnx":
        from . import local

        backend = local.configured(config)
        if config.embedding_dimension != backend.dimension:
            raise ValueError(
                f"embedding_dimension is {config.embedding_dimension}, but the onnx backend "
                f"({config.embedding_onnx_model}) yields {backend.dimension}"
            )
        return backend
    if name == "http":
        from .http import HttpBackend

        if not config.embedding_http_url:
            raise ValueError("embedding_backend 'http' needs embedding_http_url")
        return HttpBackend(
            base_url=config.embedding_http_url,
            model=config.embedding_http_model,
            dimension=config.embedding_dimension,
            token=config.embedding_http_token,
            batch_size=config.embedding_batch_size,
            timeout=config.embedding_http_timeout,
            retries=config.embedding_http_retries,
        )
    raise ValueError(
        f"unknown embedding_backend {config.embedding_backend!r}; use one of {BACKENDS}"
    )
