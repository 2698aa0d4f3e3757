"""The OpenAI-compatible HTTP backend, against httpx.MockTransport (no network)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest

from toolsift.embedding import (
    EmbeddingBackend,
    EmbeddingConfig,
    EmbeddingError,
    EmbeddingUnavailable,
    get_backend,
)
from toolsift.embedding.http import HttpBackend, embeddings_url

Handler = Callable[[httpx.Request], httpx.Response]
DIM = 4


def _vector(text: str) -> list[float]:
    """A deterministic, deliberately unnormalised vector per text."""
    seed = sum(map(ord, text)) + 1
    return [float(seed % 7 + 1), float(len(text) + 1), 2.0, float(seed % 3)]


def _ok(request: httpx.Request, *, reverse: bool = True) -> httpx.Response:
    inputs = json.loads(request.content)["input"]
    data = [
        {"object": "embedding", "index": i, "embedding": _vector(t)} for i, t in enumerate(inputs)
    ]
    return httpx.Response(200, json={"object": "list", "data": data[::-1] if reverse else data})


class Recorder:
    def __init__(self, *responses: Handler | httpx.Response | Exception) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]
        if isinstance(step, Exception):
            raise step
        if isinstance(step, httpx.Response):
            return step
        return step(request)


def _backend(handler: Recorder, sleeps: list[float] | None = None, **kwargs: Any) -> HttpBackend:
    options: dict[str, Any] = {
        "base_url": "http://embed.test",
        "model": "test-model",
        "dimension": DIM,
        "retries": 2,
    }
    options.update(kwargs)
    return HttpBackend(
        client=httpx.Client(transport=httpx.MockTransport(handler)),
        sleep=(sleeps.append if sleeps is not None else lambda _: None),
        **options,
    )


def test_posts_openai_request_and_orders_by_index() -> None:
    handler = Recorder(_ok)
    backend = _backend(handler, token="s3cret")
    vectors = backend.embed(["alpha", "beta", "gamma"])

    (request,) = handler.requests
    assert request.method == "POST"
    assert str(request.url) == "http://embed.test/v1/embeddings"
    assert request.headers["authorization"] == "Bearer s3cret"
    assert json.loads(request.content) == {
        "model": "test-model",
        "input": ["alpha", "beta", "gamma"],
    }
    for text, vector in zip(["alpha", "beta", "gamma"], vectors, strict=True):
        expected = np.asarray(_vector(text)) / np.linalg.norm(_vector(text))
        np.testing.assert_allclose(vector, expected, atol=1e-12)
    assert "s3cret" not in repr(backend)
    assert isinstance(backend, EmbeddingBackend)


def test_no_token_no_authorization_header() -> None:
    handler = Recorder(_ok)
    _backend(handler).embed(["x"])
    assert "authorization" not in handler.requests[0].headers


def test_batches_keep_global_order() -> None:
    handler = Recorder(_ok)
    texts = [f"text {i}" for i in range(5)]
    vectors = _backend(handler, batch_size=2).embed(texts)
    assert [json.loads(r.content)["input"] for r in handler.requests] == [
        texts[0:2],
        texts[2:4],
        texts[4:5],
    ]
    np.testing.assert_allclose(vectors, _backend(Recorder(_ok)).embed(texts))


def test_empty_input_sends_nothing() -> None:
    handler = Recorder(_ok)
    assert _backend(handler).embed([]) == []
    assert handler.requests == []


def test_a_bare_string_is_refused_before_any_request() -> None:
    handler = Recorder(_ok)
    with pytest.raises(TypeError, match="not one str"):
        _backend(handler).embed("refund an order")
    assert handler.requests == []


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_retries_overload_with_exponential_backoff(status: int) -> None:
    handler = Recorder(httpx.Response(status), httpx.Response(status), _ok)
    sleeps: list[float] = []
    vectors = _backend(handler, sleeps, backoff=0.5).embed(["x"])
    assert len(vectors) == 1
    assert len(handler.requests) == 3
    assert sleeps == [0.5, 1.0]


def test_honours_retry_after() -> None:
    handler = Recorder(httpx.Response(429, headers={"Retry-After": "3"}), _ok)
    sleeps: list[float] = []
    _backend(handler, sleeps, backoff=0.5).embed(["x"])
    assert sleeps == [3.0]


def test_backoff_is_capped() -> None:
    handler = Recorder(httpx.Response(503))
    sleeps: list[float] = []
    with pytest.raises(EmbeddingUnavailable):
        _backend(handler, sleeps, retries=5, backoff=1.0, max_backoff=4.0).embed(["x"])
    assert sleeps == [1.0, 2.0, 4.0, 4.0, 4.0]


@pytest.mark.parametrize(
    "error",
    [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("eof")],
)
def test_network_errors_become_unavailable_after_last_retry(error: Exception) -> None:
    handler = Recorder(error)
    sleeps: list[float] = []
    with pytest.raises(EmbeddingUnavailable, match="after 3 attempts"):
        _backend(handler, sleeps).embed(["x"])
    assert len(handler.requests) == 3
    assert len(sleeps) == 2


def test_unavailable_is_a_runtime_error() -> None:
    assert issubclass(EmbeddingUnavailable, RuntimeError)
    assert issubclass(EmbeddingUnavailable, EmbeddingError)


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_client_errors_are_not_retried(status: int) -> None:
    handler = Recorder(httpx.Response(status, text="bad model"))
    with pytest.raises(EmbeddingError, match=f"HTTP {status}") as caught:
        _backend(handler).embed(["x"])
    assert not isinstance(caught.value, EmbeddingUnavailable)
    assert len(handler.requests) == 1


def test_wrong_dimension_is_rejected() -> None:
    with pytest.raises(EmbeddingError, match="dimension 4, expected 8"):
        _backend(Recorder(_ok), dimension=8).embed(["x"])


@pytest.mark.parametrize(
    "body",
    [
        {"data": [{"index": 0, "embedding": [1.0, 0.0, 0.0, 0.0]}]},  # one of two
        {
            "data": [
                {"index": 0, "embedding": [1.0, 0, 0, 0]},
                {"index": 0, "embedding": [1, 0, 0, 0]},
            ]
        },
        {"data": [{"embedding": [1.0, 0.0, 0.0, 0.0]}, {"embedding": [1.0, 0.0, 0.0, 0.0]}]},
        {
            "data": [
                {"index": 0, "embedding": [1, 0, 0, 0]},
                {"index": 1, "embedding": [0, 0, 0, 0]},
            ]
        },
        {"data": [{"index": 0, "embedding": [1, 0, 0, 0]}, {"index": 1, "embedding": [1, 0]}]},
        {"error": "nope"},
        ["not", "an", "object"],
    ],
)
def test_malformed_answers_are_errors(body: Any) -> None:
    handler = Recorder(httpx.Response(200, json=body))
    with pytest.raises(EmbeddingError) as caught:
        _backend(handler).embed(["a", "b"])
    assert not isinstance(caught.value, EmbeddingUnavailable)


def test_huge_finite_components_are_normalised_not_zeroed() -> None:
    """The norm of [3e300, 4e300] overflows a float; the direction must survive it."""
    body = {"data": [{"index": 0, "embedding": [3e300, 4e300, 0.0, 0.0]}]}
    (vector,) = _backend(Recorder(httpx.Response(200, json=body))).embed(["a"])
    assert vector == pytest.approx([0.6, 0.8, 0.0, 0.0])


def test_non_json_answer_is_an_error() -> None:
    with pytest.raises(EmbeddingError, match="non-JSON"):
        _backend(Recorder(httpx.Response(200, text="<html>"))).embed(["x"])


@pytest.mark.parametrize(
    "base_url", ["http://h:8080", "http://h:8080/", "http://h:8080/v1", "http://h:8080/v1/"]
)
def test_embeddings_url(base_url: str) -> None:
    assert embeddings_url(base_url) == "http://h:8080/v1/embeddings"


def test_get_backend_http() -> None:
    config = EmbeddingConfig(
        embedding_backend="http",
        embedding_http_url="http://h:8080",
        embedding_http_model="bge-small",
        embedding_dimension=DIM,
        embedding_batch_size=16,
        embedding_http_retries=1,
    )
    backend = get_backend(config)
    assert isinstance(backend, HttpBackend)
    assert (backend.model, backend.dimension, backend.batch_size) == ("bge-small", DIM, 16)
    backend.close()
    with pytest.raises(ValueError, match="embedding_http_url"):
        get_backend(EmbeddingConfig(embedding_backend="http"))
