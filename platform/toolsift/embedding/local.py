"""The local models by name: what `TOOLSIFT_EMBEDDING_ONNX_MODEL` may say, and the backend
that serves each.

Besides the single models, one ensemble: MiniLM and bge-small side by side
(`EnsembleBackend`). Measured on the datasets' check halves it finds more than either model
alone, for about three times the embedding work (docs/quality.md and docs/benchmarks.md,
"A second model").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from . import bge, models, onnx
from .base import EmbeddingSettings, refuse_one_str

ENSEMBLE_MODEL = models.ENSEMBLE
DEFAULT_MODEL = models.DEFAULT
#: Every local model and its dimension; the first is the default.
MODELS = models.DIMENSIONS


class LocalBackend(Protocol):
    """An `EmbeddingBackend` that runs in process, from files on this machine."""

    model: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    def files(self, *, private_fallback: bool = True) -> list[Path]:
        """The model files it runs, built first where a model is built."""
        ...

    def warm_up(self) -> None: ...


class EnsembleBackend:
    """Several models' vectors side by side, each scaled by 1/sqrt(n).

    Each member's vector has unit length, so the joined one does too, and the cosine of two
    joined vectors is the mean of the members' cosines. One pgvector column, one exact scan
    and one model name then serve the ensemble: the select, the learned queries and a model
    switch need nothing of their own. Members must be deterministic per text (both local
    models run one text per session run).
    """

    def __init__(self, model: str, members: Sequence[LocalBackend]) -> None:
        if len(members) < 2:
            raise ValueError("an ensemble needs at least two models")
        self.model = model
        self.members = tuple(members)
        self.dimension = sum(m.dimension for m in self.members)
        self._scale = 1.0 / math.sqrt(len(self.members))

    def __repr__(self) -> str:
        return f"EnsembleBackend({self.model!r}, {list(self.members)!r})"

    def files(self, *, private_fallback: bool = True) -> list[Path]:
        return [f for m in self.members for f in m.files(private_fallback=private_fallback)]

    def warm_up(self) -> None:
        for member in self.members:
            member.warm_up()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        refuse_one_str(texts)
        if not texts:
            return []
        parts = [np.asarray(m.embed(texts), dtype=np.float32) for m in self.members]
        joined = np.concatenate(parts, axis=1) * np.float32(self._scale)
        vectors: list[list[float]] = joined.tolist()
        return vectors


def backend(
    model: str, *, threads: int = 1, batch_size: int = 32, cache_dir: Path | None = None
) -> LocalBackend:
    """The backend of a local model by its name."""
    if model not in MODELS:
        raise ValueError(f"unknown onnx model {model!r}; expected one of {', '.join(MODELS)}")
    if model == bge.MODEL:
        return bge.BgeBackend(threads=threads)
    if model == ENSEMBLE_MODEL:
        members: list[LocalBackend] = [
            onnx.OnnxBackend(threads=threads, cache_dir=cache_dir),
            bge.BgeBackend(threads=threads),
        ]
        return EnsembleBackend(model, members)
    return onnx.OnnxBackend(
        model=model, threads=threads, batch_size=batch_size, cache_dir=cache_dir
    )


def configured(
    config: EmbeddingSettings, *, threads: int | None = None, model: str | None = None
) -> LocalBackend:
    """The local backend the settings name (`threads` and `model` override theirs)."""
    return backend(
        model or config.embedding_onnx_model,
        threads=config.embedding_threads if threads is None else threads,
        batch_size=config.embedding_batch_size,
        cache_dir=config.embedding_cache_dir,
    )
