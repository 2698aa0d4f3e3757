"""bge-small-en-v1.5 (int8 ONNX) on onnxruntime: the second model of the ensemble.

BAAI's bge-small-en-v1.5 (MIT), 12 layers of width 384, as quantised for onnxruntime by
the Xenova conversion: the only stronger English encoder than MiniLM found with its
weights inside a registry package (`compartment`, Apache-2.0, which carries the file and
its tokenizer; the package's own code is never imported). Its pipeline: WordPiece tokens
truncated to 512, the transformer, the [CLS] token's vector, L2 normalisation. No query
instruction: measured on the datasets' tune halves, the bare query did as well
(docs/quality.md, "A second model").

Its MatMuls quantise each run's activations with one scale, so, as with MiniLM's dynamic
build, a run is one text: batched, a vector would depend on its neighbours.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import numpy as np
import numpy.typing as npt

from . import models
from .base import EmbeddingError, refuse_one_str
from .onnx import l2_normalise, run, runtime

MODEL = models.BGE_SMALL
DIMENSION = models.DIMENSIONS[MODEL]
MAX_TOKENS = 512
PACKAGE = "compartment"
_FOLDER = "compartment/models/bge-small-en-v1.5-int8"
# Pinned here, so that another release of the package cannot change the vectors unnoticed.
MODEL_SHA256 = "6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4"


def packaged_file(name: str) -> Path:
    """A file of the model's folder in the installed package, found without importing it."""
    return _locate(PACKAGE, name)


@functools.cache
def _locate(package: str, name: str) -> Path:
    # Cached: looking a distribution up walks sys.path, and every query embedding asks.
    try:
        path = Path(str(metadata.distribution(package).locate_file(f"{_FOLDER}/{name}")))
    except metadata.PackageNotFoundError as exc:
        raise EmbeddingError(f"the {MODEL} model needs the {package} package") from exc
    if not path.is_file():
        raise EmbeddingError(f"{path} is missing from the {package} package")
    return path


class BgeBackend:
    """bge-small-en-v1.5 int8, in process; cheap to construct, the session is shared."""

    model = MODEL
    dimension = DIMENSION

    def __init__(self, *, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self.threads = threads

    def __repr__(self) -> str:
        return f"BgeBackend(threads={self.threads})"

    def files(self, *, private_fallback: bool = True) -> list[Path]:
        """The packaged model file (nothing is built)."""
        return [packaged_file("model_quantized.onnx")]

    def warm_up(self) -> None:
        """Load the model now instead of on the first request."""
        self.embed(["warm up"])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        refuse_one_str(texts)
        if not texts:
            return []
        loaded = runtime(
            packaged_file("model_quantized.onnx"),
            self.threads,
            tokenizer_path=packaged_file("tokenizer.json"),
            max_tokens=MAX_TOKENS,
            sha256=MODEL_SHA256,
        )
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        for i, encoding in enumerate(loaded.tokenizer.encode_batch(list(texts))):
            hidden, _ = run(loaded, [encoding.ids])
            out[i] = cls_normalise(hidden)[0]
        return out.tolist()


def cls_normalise(hidden: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The [CLS] token's vector, L2-normalised: bge's sentence vector."""
    return l2_normalise(hidden[:, 0, :])
