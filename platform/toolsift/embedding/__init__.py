"""Text embeddings for dense retrieval: one interface, a local ONNX and an HTTP backend.

Importing this package loads neither onnxruntime nor the model; the ONNX backend loads
them on first use.
"""

from .base import (
    EmbeddingBackend,
    EmbeddingConfig,
    EmbeddingError,
    EmbeddingSettings,
    EmbeddingUnavailable,
    get_backend,
)
from .cache import CachedBackend

__all__ = [
    "CachedBackend",
    "EmbeddingBackend",
    "EmbeddingConfig",
    "EmbeddingError",
    "EmbeddingSettings",
    "EmbeddingUnavailable",
    "get_backend",
]
