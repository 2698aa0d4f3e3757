"""bge-small and the ensemble of local models: what the select and the worker rely on.

No fp32 reference of bge-small can be made here (its only copy is the int8 file), so its
pipeline is pinned by what it must do: [CLS] pooling over the packaged tokenizer's ids, the
512-token window, one text per run, and meaning (a paraphrase above an unrelated text).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import numpy as np
import numpy.typing as npt
import pytest
from fastapi.testclient import TestClient

from tests.fixtures.embedding import republish_and_run
from tests.fixtures.factories import PEPPER, Caller, agent_key, new_tenant, tool_body
from toolsift.app import create_app
from toolsift.config import Settings
from toolsift.db import Database
from toolsift.embedding import EmbeddingConfig, EmbeddingError, bge, get_backend, local, onnx

ENSEMBLE = local.ENSEMBLE_MODEL
LONG = " ".join(f"word{i} of a very long tool description" for i in range(200))


@pytest.fixture(scope="module")
def small() -> bge.BgeBackend:
    return bge.BgeBackend()


@pytest.fixture(scope="module")
def ensemble() -> local.LocalBackend:
    return local.backend(ENSEMBLE)


def _matrix(vectors: list[list[float]]) -> npt.NDArray[np.float64]:
    return np.asarray(vectors, dtype=np.float64)


class TestBgeSmall:
    def test_vectors_are_unit_length_and_sized(self, small: bge.BgeBackend) -> None:
        vectors = _matrix(small.embed(["one", "a somewhat longer second text", ""]))
        assert vectors.shape == (3, small.dimension) == (3, 384)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)

    def test_paraphrase_ranks_above_unrelated(self, small: bge.BgeBackend) -> None:
        query, paraphrase, unrelated = _matrix(
            small.embed(
                ["cancel my subscription", "terminate a recurring plan", "get the weather forecast"]
            )
        )
        assert query @ paraphrase > query @ unrelated + 0.1

    def test_the_vector_is_the_cls_tokens(self, small: bge.BgeBackend) -> None:
        text = "Refund a customer order payment to the card"
        loaded = onnx.runtime(
            bge.packaged_file("model_quantized.onnx"),
            1,
            tokenizer_path=bge.packaged_file("tokenizer.json"),
            max_tokens=bge.MAX_TOKENS,
        )
        ids = loaded.tokenizer.encode(text).ids
        hidden, mask = onnx.run(loaded, [ids])
        (vector,) = small.embed([text])
        np.testing.assert_allclose(vector, bge.cls_normalise(hidden)[0], atol=1e-6)
        # Mean pooling (MiniLM's) gives another vector: the test can tell them apart.
        assert float(np.asarray(vector) @ onnx.mean_pool_normalise(hidden, mask)[0]) < 0.99

    def test_tokens_are_framed_and_cut_at_the_window(self) -> None:
        loaded = onnx.runtime(
            bge.packaged_file("model_quantized.onnx"),
            1,
            tokenizer_path=bge.packaged_file("tokenizer.json"),
            max_tokens=bge.MAX_TOKENS,
        )
        short = loaded.tokenizer.encode("send an email").ids
        assert (short[0], short[-1]) == (101, 102)  # [CLS] ... [SEP]
        assert len(loaded.tokenizer.encode(LONG).ids) == bge.MAX_TOKENS

    def test_text_past_the_window_is_ignored(self, small: bge.BgeBackend) -> None:
        a, b = small.embed([LONG, LONG + " and then something entirely different"])
        np.testing.assert_allclose(a, b, atol=1e-6)

    def test_a_vector_depends_on_its_text_alone(self, small: bge.BgeBackend) -> None:
        # Its activations are quantised per run: a run is one text, whatever the call holds.
        texts = ["refund an order", "x", LONG, "send an e-mail to the customer"]
        together = small.embed(texts)
        alone = [small.embed([t])[0] for t in texts]
        assert together == alone
        assert small.embed(texts[::-1]) == together[::-1]

    def test_empty_input_and_bare_string(self, small: bge.BgeBackend) -> None:
        assert small.embed([]) == []
        with pytest.raises(TypeError):
            small.embed("not a list")

    def test_a_file_other_than_the_pinned_one_is_refused(self, tmp_path: Path) -> None:
        other = tmp_path / "model.onnx"
        shutil.copy(onnx.default_model_path(), other)  # a real model, not the pinned one
        with pytest.raises(EmbeddingError, match="not the pinned model file"):
            onnx.runtime(other, 1, sha256=bge.MODEL_SHA256)

    def test_without_its_package_it_says_which(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(bge, "PACKAGE", "no-such-package-here")
        with pytest.raises(EmbeddingError, match="needs the no-such-package-here package"):
            bge.BgeBackend().embed(["x"])


class TestEnsemble:
    TEXTS = (
        "cancel my subscription",
        "end_membership: Stop a recurring plan and its future charges",
        "order_status: Get the shipping status of an order",
        "",
        LONG,
    )

    def test_its_cosine_is_the_mean_of_the_members(self, ensemble: local.LocalBackend) -> None:
        joined = _matrix(ensemble.embed(self.TEXTS))
        minilm = _matrix(onnx.OnnxBackend().embed(self.TEXTS))
        small = _matrix(bge.BgeBackend().embed(self.TEXTS))
        np.testing.assert_allclose(
            joined @ joined.T, (minilm @ minilm.T + small @ small.T) / 2, atol=1e-6
        )

    def test_vectors_are_unit_length_and_sized(self, ensemble: local.LocalBackend) -> None:
        vectors = _matrix(ensemble.embed(self.TEXTS))
        assert vectors.shape == (len(self.TEXTS), 768) == (len(self.TEXTS), ensemble.dimension)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)

    def test_empty_input_and_bare_string(self, ensemble: local.LocalBackend) -> None:
        assert ensemble.embed([]) == []
        with pytest.raises(TypeError, match="not one str"):
            ensemble.embed("not a list")

    def test_it_needs_two_members(self) -> None:
        with pytest.raises(ValueError, match="at least two"):
            local.EnsembleBackend("alone", [onnx.OnnxBackend()])

    def test_files_are_every_members(self, ensemble: local.LocalBackend) -> None:
        files = ensemble.files()
        assert len(files) == 2
        assert all(f.is_file() for f in files)
        assert files[1] == bge.packaged_file("model_quantized.onnx")


@pytest.mark.parametrize("model", list(local.MODELS))
def test_every_local_model_by_name(model: str) -> None:
    backend = get_backend(
        EmbeddingConfig(embedding_onnx_model=model, embedding_dimension=local.MODELS[model])
    )
    assert (backend.model, backend.dimension) == (model, local.MODELS[model])
    assert len(backend.embed(["refund an order"])[0]) == local.MODELS[model]


class TestSettings:
    def test_the_setting_offers_every_local_model(self) -> None:
        annotation = Settings.model_fields["embedding_onnx_model"].annotation
        assert set(get_args(annotation)) == set(local.MODELS)
        assert Settings.model_fields["embedding_onnx_model"].default == local.DEFAULT_MODEL
        assert next(iter(local.MODELS)) == local.DEFAULT_MODEL

    def test_naming_the_model_is_enough(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("TOOLSIFT_EMBEDDING_ONNX_MODEL", ENSEMBLE)
        settings = Settings(env="testing")
        assert settings.embedding_dimension == 768
        assert get_backend(settings).dimension == 768

    def test_a_dimension_set_against_the_model_is_refused(self) -> None:
        settings = Settings(env="testing", embedding_onnx_model=ENSEMBLE, embedding_dimension=384)
        with pytest.raises(ValueError, match=r"embedding_dimension is 384.*yields 768"):
            get_backend(settings)

    def test_an_unknown_model_names_the_setting(self) -> None:
        with pytest.raises(ValueError, match="embedding_onnx_model"):
            Settings(env="testing", embedding_onnx_model="bge-large")

    def test_the_http_backend_keeps_its_own_dimension(self) -> None:
        settings = Settings(env="testing", embedding_backend="http", embedding_onnx_model=ENSEMBLE)
        assert settings.embedding_dimension == 384


@pytest.fixture
def ensemble_client(database_url: str, database: Database) -> Iterator[TestClient]:
    settings = Settings(
        env="testing", database_url=database_url, key_pepper=PEPPER, embedding_onnx_model=ENSEMBLE
    )
    with TestClient(create_app(settings, database)) as test_client:
        yield test_client


def test_a_tenant_served_by_the_ensemble(
    ensemble_client: TestClient, database: Database, ensemble: local.LocalBackend
) -> None:
    admin = new_tenant(ensemble_client, database, "ensemble")
    for name, description in [
        ("end_membership", "Stop a recurring plan and its future charges"),
        ("order_status", "Get the shipping status of an order"),
        ("weather_today", "Tell the forecast for a city"),
    ]:
        admin.ok(admin.post("/admin/v1/tools", tool_body(name, description)), 201)
    republish_and_run(database, ensemble)  # the worker, with the ensemble
    status = admin.ok(admin.get("/admin/v1/embeddings"))
    assert status["model"] == status["query_model"] == ENSEMBLE
    agent: Caller = agent_key(admin, [])
    for mode in ("dense", "hybrid"):
        body = agent.ok(agent.select("cancel my subscription", mode=mode, k=1))
        assert [t["name"] for t in body["tools"]] == ["end_membership"], mode
        assert body["missing_embeddings"] == 0
