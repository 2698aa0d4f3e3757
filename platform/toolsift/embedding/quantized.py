"""The default local model: the packaged all-MiniLM-L6-v2 with integer matrix products.

The packaged graph stores int8 weights but dequantises them, so it runs fp32 matrix
products. This module builds, from that same file and with nothing downloaded, a graph
whose MatMuls multiply int8 by int8: ONNX Runtime folds the packaged graph, its
transformer optimiser fuses the layer norms and GELUs, and dynamic quantisation gives
every MatMul and the embedding tables int8 weights (one scale per output channel), with
each run's activations quantised to uint8 as they come. On one core that is 2.2x the
packaged model with VNNI, at a worst cosine of 0.99 against the fp32 reference
(docs/benchmarks.md, "The default model").

A run's activations share one scale, so a text's vector would depend on its batch
neighbours: the backend runs one text at a time with this model (`OnnxBackend.plan`).

Building takes a few seconds and needs the `onnx` package, so the file is built once, in a
child process (the build's memory and its libraries' logging leave with it), and kept in a
cache folder: `TOOLSIFT_EMBEDDING_CACHE_DIR`, else `$XDG_CACHE_HOME/toolsift`, else
`~/.cache/toolsift`. Its name carries the source file's hash, the recipe and the versions
of the tools that built it, so an upgrade builds a new file rather than reusing a stale
one; a SHA-256 kept beside it catches a damaged or unreadable file, which is built again.
A folder that cannot be written falls back to a private temporary folder for the life of
the process (and a warning): slower starts, same vectors.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from .base import EmbeddingError

_log = logging.getLogger(__name__)

# Bump when the build steps change: the cached file's name then changes with them.
RECIPE = 1
# all-MiniLM-L6-v2's shape, for the transformer optimiser's fusions.
_HEADS = 12
_HIDDEN = 384
# A partial file this old was left by a build that was killed.
_STALE_PARTIAL_SECONDS = 600

_private_dirs: list[str] = []


def default_cache_dir() -> Path:
    """Where built model files are kept unless `TOOLSIFT_EMBEDDING_CACHE_DIR` says otherwise.

    A relative `XDG_CACHE_HOME` is ignored, as the XDG specification asks.
    """
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".cache"
    return root / "toolsift"


def file_name(model: str, source_sha256: str) -> str:
    """The cached file's name: a change of source, recipe or builder is a new file."""
    tools = "-".join(f"{name}{metadata.version(name)}" for name in ("onnxruntime", "onnx"))
    return f"{model}-{source_sha256[:16]}-r{RECIPE}-{tools}.onnx"


def prepare(
    model: str,
    source: Path,
    source_sha256: str,
    cache_dir: Path | None = None,
    *,
    private_fallback: bool = True,
) -> Path:
    """The built file for `source`, building it into the cache first if it is not there
    intact. Without `private_fallback`, a cache that cannot be written is an error.

    Two processes that build at once each write a file of their own and rename it into
    place; both files are the same bytes, so whichever rename lands last is as good.
    """
    try:
        folder = cache_dir.expanduser() if cache_dir else default_cache_dir()
    except RuntimeError as error:  # no home directory to put a cache in
        return _build_private(model, source, error, None, private_fallback)
    target = folder / file_name(model, source_sha256)
    if _intact(target):
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _remove_stale_partials(folder)
        fd, partial = tempfile.mkstemp(dir=folder, prefix=".building-", suffix=".onnx")
    except OSError as error:
        return _build_private(model, source, error, folder, private_fallback)
    os.close(fd)
    try:
        _build(source, Path(partial), model)
        # mkstemp made it private; an image builds as root and serves as another user.
        os.chmod(partial, 0o644)
        digest = file_sha256(Path(partial))
        os.replace(partial, target)
        _write_digest(target, digest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
    return target


def _digest_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _intact(target: Path) -> bool:
    """The file is there, readable, and the bytes its build wrote (about 20 ms)."""
    try:
        return _digest_path(target).read_text().strip() == file_sha256(target)
    except OSError:
        return False


def _write_digest(target: Path, digest: str) -> None:
    fd, partial = tempfile.mkstemp(dir=target.parent, prefix=".building-", suffix=".sha256")
    try:
        with os.fdopen(fd, "w") as file:
            file.write(digest + "\n")
        os.chmod(partial, 0o644)
        os.replace(partial, _digest_path(target))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)


def _remove_stale_partials(folder: Path) -> None:
    """What builds that were killed left behind: partial files, and the scratch folders
    of the build's steps (`build`)."""
    cutoff = time.time() - _STALE_PARTIAL_SECONDS
    for partial in folder.glob(".building-*"):
        with contextlib.suppress(OSError):
            if partial.stat().st_mtime < cutoff:
                if partial.is_dir():
                    shutil.rmtree(partial)
                else:
                    partial.unlink()


def _build_private(
    model: str, source: Path, error: Exception, folder: Path | None, allowed: bool
) -> Path:
    where = f"the cache folder {folder}" if folder else "a cache folder"
    if not allowed:
        raise EmbeddingError(
            f"cannot use {where} ({error}); set TOOLSIFT_EMBEDDING_CACHE_DIR to a writable folder"
        ) from error
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
    """Run the build in a child process: it peaks at about 600 MB and leaves about 200 MB
    behind, and the quantiser installs a root log handler; neither should stay in an API
    or worker process for its lifetime."""
    started = time.perf_counter()
    child = subprocess.run(
        [sys.executable, "-m", __name__, str(source), str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        lines = child.stderr.strip().splitlines() or [f"exit status {child.returncode}"]
        raise EmbeddingError(f"building {model} failed: {lines[-1]}")
    _log.info("built %s in %.1f s", model, time.perf_counter() - started)


def build(source: Path, target: Path) -> None:
    """The build itself, in this process (the child's side of `_build`)."""
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
        raise EmbeddingError(f"the build needs the onnx package ({exc})") from exc
    # Beside the target, named as a partial: a build killed midway leaves its 200 MB of
    # steps where the next build removes them, not in /tmp for good.
    with tempfile.TemporaryDirectory(prefix=".building-", dir=target.parent) as scratch:
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


if __name__ == "__main__":
    # Both tools log advice meant for other models' pipelines; errors still show.
    logging.disable(logging.WARNING)
    try:
        build(Path(sys.argv[1]), Path(sys.argv[2]))
    except EmbeddingError as error:
        sys.exit(str(error))
