"""The default local model: the packaged all-MiniLM-L6-v2 with integer matrix products.

The packaged graph stores int8 weights but dequantises them, so it runs fp32 matrix
products. This module builds, from that same file and with nothing downloaded, a graph
whose MatMuls multiply int8 by int8: ONNX Runtime folds the packaged graph, its
transformer optimiser fuses the layer norms and GELUs, and dynamic quantisation gives
every MatMul and the embedding tables int8 weights (one scale per output channel), with
each run's activations quantised to uint8 as they come. On one core that is 2.0-2.2x the
packaged model with VNNI, at a worst cosine of 0.99 against the fp32 reference
(docs/benchmarks.md, "The default model").

A run's activations share one scale, so a text's vector would depend on its batch
neighbours: the backend runs one text at a time with this model (`OnnxBackend.plan`).

Building takes a few seconds and needs the `onnx` package, so the file is built once and
kept in a cache folder: `TOOLSIFT_EMBEDDING_CACHE_DIR`, else `$XDG_CACHE_HOME/toolsift`,
else `~/.cache/toolsift`. Its name carries the source file's hash, the recipe and the
versions of the tools that built it, so an upgrade builds a new file rather than reusing
a stale one. A folder that cannot be written falls back to a private temporary folder for
the life of the process (and a warning): slower starts, same vectors.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from .base import EmbeddingError

_log = logging.getLogger(__name__)

# Bump when the build steps change: the cached file's name then changes with them.
RECIPE = 1
# all-MiniLM-L6-v2's shape, for the transformer optimiser's fusions.
_HEADS = 12
_HIDDEN = 384

_private_dirs: list[str] = []


def default_cache_dir() -> Path:
    """Where built model files are kept unless `TOOLSIFT_EMBEDDING_CACHE_DIR` says otherwise."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "toolsift"


def file_name(model: str, source_sha256: str) -> str:
    """The cached file's name: a change of source, recipe or builder is a new file."""
    tools = "-".join(f"{name}{metadata.version(name)}" for name in ("onnxruntime", "onnx"))
    return f"{model}-{source_sha256[:16]}-r{RECIPE}-{tools}.onnx"


def prepare(model: str, source: Path, source_sha256: str, cache_dir: Path | None = None) -> Path:
    """The built file for `source`, building it into the cache first if it is not there.

    Two processes that build at once each write a file of their own and rename it into
    place; both files are the same bytes, so whichever rename lands last is as good.
    """
    try:
        folder = cache_dir or default_cache_dir()
    except RuntimeError as error:  # no home directory to put a cache in
        return _build_private(model, source, error)
    target = folder / file_name(model, source_sha256)
    if target.is_file():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=folder, prefix=".building-", suffix=".onnx")
    except OSError as error:
        return _build_private(model, source, error, folder)
    os.close(fd)
    try:
        _build(source, Path(partial), model)
        os.replace(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
    return target


def _build_private(model: str, source: Path, error: Exception, folder: Path | None = None) -> Path:
    where = f"the cache folder {folder}" if folder else "a cache folder"
    _log.warning(
        "cannot use %s (%s); building %s for this process only "
        "(set TOOLSIFT_EMBEDDING_CACHE_DIR to a writable folder)",
        where, error, model,
    )  # fmt: skip
    private = tempfile.mkdtemp(prefix="toolsift-model-")
    if not _private_dirs:
        atexit.register(_remove_private_dirs)
    _private_dirs.append(private)
    target = Path(private) / f"{model}.onnx"
    _build(source, target, model)
    return target


def _remove_private_dirs() -> None:
    for folder in _private_dirs:
        shutil.rmtree(folder, ignore_errors=True)


def _build(source: Path, target: Path, model: str) -> None:
    try:
        import onnxruntime as ort  # type: ignore[import-untyped]
        from onnxruntime.quantization import (  # type: ignore[import-untyped]
            QuantType,
            quantize_dynamic,
        )
        from onnxruntime.transformers.fusion_options import (  # type: ignore[import-untyped]
            FusionOptions,
        )
        from onnxruntime.transformers.optimizer import (  # type: ignore[import-untyped]
            optimize_model,
        )
    except ModuleNotFoundError as exc:
        raise EmbeddingError(f"building {model} needs the onnx package ({exc})") from exc
    started = time.perf_counter()
    optimiser_dir = Path(optimize_model.__code__.co_filename).parent
    with tempfile.TemporaryDirectory(prefix="toolsift-build-") as scratch, _quiet(optimiser_dir):
        folded = Path(scratch) / "folded.onnx"
        options = ort.SessionOptions()
        # Basic level only: constant folding turns the packaged DequantizeLinear weights
        # into plain initialisers the quantiser can read; the fused kernels come later.
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        options.log_severity_level = 3
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        fused = Path(scratch) / "fused.onnx"
        fusions = FusionOptions("bert")
        # Symbolic shape inference would need sympy; these fusions do without it.
        fusions.enable_shape_inference = False
        optimize_model(
            str(folded), model_type="bert", num_heads=_HEADS, hidden_size=_HIDDEN,
            optimization_options=fusions, opt_level=0,
        ).save_model_to_file(str(fused))  # fmt: skip
        quantize_dynamic(
            str(fused),
            str(target),
            op_types_to_quantize=["MatMul", "Gather"],
            weight_type=QuantType.QInt8,
            per_channel=True,
        )
    _log.info("built %s in %.1f s", model, time.perf_counter() - started)


class _DropBuildChatter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


@contextlib.contextmanager
def _quiet(optimiser_dir: Path) -> Iterator[None]:
    """Silence the advice the quantiser and the optimiser log for other models' pipelines.

    The quantiser logs through the root logger with `logging.warning`, which installs a
    stderr handler on a root that has none: that handler is removed again, or every later
    log line of the process would print twice. Each optimiser module logs through a logger
    named after the bare module (`fusion_base`, `onnx_model`, ...).
    """
    chatter = _DropBuildChatter()
    root = logging.getLogger()
    handlers = list(root.handlers)
    loggers = [logging.getLogger(path.stem) for path in optimiser_dir.glob("*.py")]
    levels = [logger.level for logger in loggers]
    root.addFilter(chatter)
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.removeFilter(chatter)
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
