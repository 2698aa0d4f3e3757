"""The local ONNX backend against sentence-transformers' fp32 reference embeddings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from toolsift.embedding import EmbeddingBackend, EmbeddingConfig, EmbeddingError, get_backend
from toolsift.embedding import onnx as onnx_module
from toolsift.embedding.onnx import (
    DYNAMIC_MODEL,
    MAX_TOKENS,
    MODELS,
    PACKAGED_MODEL,
    OnnxBackend,
    mean_pool_normalise,
)

REFERENCE = json.loads((Path(__file__).parent / "reference_minilm.json").read_text())
# Agreement with the fp32 model: int8 weights cost a little (measured minimum 0.9994), int8
# activations a little more: 0.9917 on a CPU with VNNI. Without VNNI, ONNX Runtime's
# uint8-by-int8 kernel can saturate; a dynamically quantised build measured 0.987 on an AVX2
# machine (docs/benchmarks.md), so the bound leaves room for that. A pooling or
# tokenisation bug costs far more (the CLS vector instead of mean pooling: 0.33-0.56).
MIN_COSINE = {PACKAGED_MODEL: 0.999, DYNAMIC_MODEL: 0.98}


@pytest.fixture(scope="module", params=MODELS)
def backend(request: pytest.FixtureRequest) -> OnnxBackend:
    return OnnxBackend(model=request.param)


def _cosine(a: Any, b: Any) -> float:
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))


def test_matches_the_reference_model(backend: OnnxBackend) -> None:
    items = REFERENCE["items"]
    vectors = backend.embed([item["text"] for item in items])
    cosines = [_cosine(v, item["embedding"]) for v, item in zip(vectors, items, strict=True)]
    worst = min(range(len(cosines)), key=cosines.__getitem__)
    assert cosines[worst] >= MIN_COSINE[backend.model], (items[worst]["text"][:60], cosines[worst])


def test_reference_covers_truncation() -> None:
    # The fixture must hold a text longer than the window, or truncation goes untested.
    assert REFERENCE["max_seq_length"] == MAX_TOKENS
    assert max(item["tokens_untruncated"] for item in REFERENCE["items"]) > MAX_TOKENS


def test_paraphrase_ranks_above_unrelated(backend: OnnxBackend) -> None:
    query, paraphrase, unrelated = backend.embed(
        ["cancel my subscription", "terminate a recurring plan", "get the weather forecast"]
    )
    assert _cosine(query, paraphrase) > _cosine(query, unrelated) + 0.1


def test_vectors_are_unit_length_and_sized(backend: OnnxBackend) -> None:
    vectors = np.asarray(backend.embed(["one", "a somewhat longer second text", ""]))
    assert vectors.shape == (3, backend.dimension) == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_batching_and_padding_do_not_change_vectors(backend: OnnxBackend) -> None:
    # A vector depends on its text alone, whatever else is embedded with it.
    texts = [item["text"] for item in REFERENCE["items"]]
    batched = np.asarray(OnnxBackend(model=backend.model, batch_size=3).embed(texts))
    alone = np.asarray([backend.embed([text])[0] for text in texts])
    np.testing.assert_allclose(batched, alone, atol=1e-5)


def test_the_dynamic_model_runs_one_text_at_a_time() -> None:
    # Its activations are quantised with one scale per run: batched, neighbours would move a
    # vector by up to 0.03 per coordinate.
    backend = OnnxBackend(model=DYNAMIC_MODEL, batch_size=32, max_batch_tokens=100_000)
    assert backend.plan([30, 10, 12]) == [[0], [1], [2]]


def test_runs_hold_similar_lengths_within_the_token_budget() -> None:
    backend = OnnxBackend(model=PACKAGED_MODEL, batch_size=4, max_batch_tokens=100)
    lengths = [30, 10, 256, 12, 31, 11, 50, 13, 9, 10]
    runs = backend.plan(lengths)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
    for run in runs:
        assert len(run) <= 4
        longest = max(lengths[i] for i in run)
        # A run pads to its longest text; only a text over the budget may run alone above it.
        assert longest * len(run) <= 100 or len(run) == 1
    assert [[lengths[i] for i in run] for run in runs] == [
        [9, 10, 10, 11],
        [12, 13, 30],
        [31, 50],
        [256],
    ]


def test_token_budget_does_not_change_vectors(backend: OnnxBackend) -> None:
    texts = [item["text"] for item in REFERENCE["items"]]
    one_run = np.asarray(
        OnnxBackend(model=backend.model, batch_size=64, max_batch_tokens=100_000).embed(texts)
    )
    np.testing.assert_allclose(np.asarray(backend.embed(texts)), one_run, atol=1e-5)


def test_text_past_the_window_is_ignored(backend: OnnxBackend) -> None:
    long_text = REFERENCE["items"][-1]["text"]
    a, b = backend.embed([long_text, long_text + " and then something entirely different"])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_input_order_is_kept(backend: OnnxBackend) -> None:
    texts = ["refund an order", "x", "send an e-mail to the customer about their invoice"]
    forward = backend.embed(texts)
    backward = backend.embed(texts[::-1])
    np.testing.assert_allclose(forward, backward[::-1], atol=1e-6)


def test_empty_input_and_bare_string(backend: OnnxBackend) -> None:
    assert backend.embed([]) == []
    with pytest.raises(TypeError):
        backend.embed("not a list")


def test_mean_pooling_ignores_padding() -> None:
    hidden = np.array([[[1.0, 0.0], [3.0, 4.0], [100.0, 100.0]]], dtype=np.float32)
    mask = np.array([[1, 1, 0]], dtype=np.int64)
    pooled = mean_pool_normalise(hidden, mask)
    np.testing.assert_allclose(pooled, [[0.707107, 0.707107]], atol=1e-6)


def test_one_session_per_process_under_concurrency() -> None:
    onnx_module._runtimes.clear()
    backend = OnnxBackend(threads=1)
    results: list[list[list[float]]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(backend.embed(["list open tickets", "create a calendar event"]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(onnx_module._runtimes) == 1
    for result in results[1:]:
        np.testing.assert_allclose(result, results[0], atol=1e-6)


def test_missing_model_file(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="not found"):
        OnnxBackend(model_path=tmp_path / "nope.onnx").embed(["x"])


def test_get_backend_defaults_to_onnx() -> None:
    backend = get_backend(EmbeddingConfig())
    assert isinstance(backend, OnnxBackend)
    assert isinstance(backend, EmbeddingBackend)
    assert (backend.model, backend.dimension) == ("all-MiniLM-L6-v2-int8-dynamic", 384)
    packaged = get_backend(EmbeddingConfig(embedding_onnx_model="all-MiniLM-L6-v2-int8"))
    assert packaged.model == "all-MiniLM-L6-v2-int8"


def test_the_default_model_is_built_once_into_the_cache(tmp_path: Path) -> None:
    first = OnnxBackend(cache_dir=tmp_path)
    path = first.model_path
    assert path.parent == tmp_path
    assert path.name.startswith(DYNAMIC_MODEL)
    # The file and its digest, no partial file left; readable by the user an image runs as.
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, f"{path.name}.sha256"]
    assert path.stat().st_mode & 0o777 == 0o644
    built_at = path.stat().st_mtime_ns
    again = OnnxBackend(cache_dir=tmp_path)
    assert again.model_path == path
    assert path.stat().st_mtime_ns == built_at
    # A build is the same bytes every time: these vectors are the shared cache's.
    texts = ["refund an order", "terminate a recurring plan"]
    assert again.embed(texts) == OnnxBackend().embed(texts)


def test_a_cache_that_cannot_be_written_falls_back_to_a_private_build(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    backend = OnnxBackend(cache_dir=blocker / "cache")
    with caplog.at_level("WARNING", logger="toolsift.embedding.quantized"):
        path = backend.model_path
    assert not path.is_relative_to(tmp_path)
    assert path.is_file()
    assert "TOOLSIFT_EMBEDDING_CACHE_DIR" in caplog.text
    assert backend.embed(["refund an order"]) == OnnxBackend().embed(["refund an order"])


def test_get_backend_rejects_bad_configuration() -> None:
    with pytest.raises(ValueError, match="yields 384"):
        get_backend(EmbeddingConfig(embedding_dimension=768))
    with pytest.raises(ValueError, match="unknown embedding_backend"):
        get_backend(EmbeddingConfig(embedding_backend="torch"))
    with pytest.raises(ValueError, match="threads"):
        get_backend(EmbeddingConfig(embedding_threads=0))
    with pytest.raises(ValueError, match="unknown onnx model 'all-MiniLM-L6-v2'"):
        get_backend(EmbeddingConfig(embedding_onnx_model="all-MiniLM-L6-v2"))


def test_import_is_light() -> None:
    # The API process with the http backend must not pay for onnxruntime or the model.
    code = (
        "import sys, toolsift.embedding, toolsift.embedding.onnx;"
        "assert 'onnxruntime' not in sys.modules and 'tokenizers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_build_is_silent_and_leaves_the_process_logging_as_it_was(tmp_path: Path) -> None:
    # The quantiser's `logging.warning` installs a root handler in a process that has none
    # (every later line of the API would print twice), and both tools log advice.
    code = (
        "import logging; from pathlib import Path; from toolsift.embedding.onnx import OnnxBackend;"
        f"OnnxBackend(cache_dir=Path({str(tmp_path)!r})).model_path;"
        "assert logging.getLogger().handlers == [], logging.getLogger().handlers"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert len(list(tmp_path.glob("*.onnx"))) == 1


def test_a_damaged_cached_file_is_built_again(tmp_path: Path) -> None:
    path = OnnxBackend(cache_dir=tmp_path).model_path
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    again = OnnxBackend(cache_dir=tmp_path)
    assert again.model_path == path
    assert path.read_bytes() == whole
    assert again.embed(["refund an order"]) == OnnxBackend().embed(["refund an order"])


def test_what_a_killed_build_left_is_removed_by_the_next(tmp_path: Path) -> None:
    # A build's steps go to a scratch folder beside the file; a killed build leaves it.
    stale, recent = tmp_path / ".building-stale", tmp_path / ".building-recent"
    for folder in (stale, recent):
        folder.mkdir()
        (folder / "folded.onnx").write_bytes(b"x" * 1024)
    hour_ago = time.time() - 3600
    os.utime(stale, (hour_ago, hour_ago))
    path = OnnxBackend(cache_dir=tmp_path).model_path
    # The stale folder is gone; one that may belong to a build still running stays.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [path.name, f"{path.name}.sha256", recent.name]
    )


def test_an_unloadable_model_is_an_embedding_error(tmp_path: Path) -> None:
    # Not onnxruntime's own exception: callers fall back to BM25 on EmbeddingError only.
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(EmbeddingError, match="cannot load the embedding model"):
        OnnxBackend(model_path=broken).embed(["x"])


def test_a_strict_prepare_refuses_a_cache_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    backend = OnnxBackend(cache_dir=blocker / "cache")
    with pytest.raises(EmbeddingError, match="TOOLSIFT_EMBEDDING_CACHE_DIR"):
        backend.prepare(private_fallback=False)


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolsift.embedding.quantized import default_cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert default_cache_dir() == Path.home() / ".cache" / "toolsift"
    monkeypatch.setenv("XDG_CACHE_HOME", "/srv/cache")
    assert default_cache_dir() == Path("/srv/cache/toolsift")
