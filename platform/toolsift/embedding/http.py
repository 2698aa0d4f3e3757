"""A backend for OpenAI-compatible embedding servers (`POST {base_url}/v1/embeddings`).

For deployments that serve a model elsewhere (vLLM, TEI, llama.cpp, Ollama, OpenAI itself).
Overload and network failures are retried with exponential backoff and then surface as
`EmbeddingUnavailable`, which callers treat as transient; anything a retry cannot fix
(a 4xx, a malformed answer, the wrong dimension) is an `EmbeddingError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import numpy as np

from .base import EmbeddingError, EmbeddingUnavailable, refuse_one_str

_MAX_RETRY_AFTER = 30.0


def embeddings_url(base_url: str) -> str:
    """`{base_url}/v1/embeddings`, accepting a base URL that already ends in /v1 (OpenAI SDK style)."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return f"{base}/v1/embeddings"


def _retryable(status: int) -> bool:
    """Timeouts, rate limits and server errors pass; other 4xx are the caller's mistake."""
    return status in (408, 429) or status >= 500


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return min(float(value), _MAX_RETRY_AFTER) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


class HttpBackend:
    """Embeds through an OpenAI-compatible server; inject `client` to share a pool or to test."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dimension: int,
        token: str | None = None,
        batch_size: int = 64,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if retries < 0:
            raise ValueError("retries must not be negative")
        self.model = model
        self.dimension = dimension
        self.url = embeddings_url(base_url)
        self.batch_size = batch_size
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._own_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=timeout)
        self._sleep = sleep

    def __repr__(self) -> str:
        # Never the token.
        return f"HttpBackend(url={self.url!r}, model={self.model!r}, dimension={self.dimension})"

    def close(self) -> None:
        """Close the connection pool, if this backend made it."""
        if self._own_client:
            self._client.close()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        refuse_one_str(texts)
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(self._embed_batch(list(texts[start : start + self.batch_size])))
        return vectors

    def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        body = self._post({"model": self.model, "input": batch})
        return self._parse(body, len(batch))

    def _delay(self, attempt: int) -> float:
        return float(min(self.max_backoff, self.backoff * 2**attempt))

    def _post(self, payload: dict[str, Any]) -> Any:
        last: str = ""
        for attempt in range(self.retries + 1):
            wait: float | None = None
            try:
                response = self._client.post(
                    self.url, json=payload, headers=self._headers, timeout=self.timeout
                )
            except httpx.TransportError as exc:  # connect, read timeout, reset ...
                last = f"{type(exc).__name__}: {exc}"
            else:
                if _retryable(response.status_code):
                    last = f"HTTP {response.status_code}"
                    wait = _retry_after(response)
                elif response.is_error:
                    raise EmbeddingError(
                        f"embedding server answered HTTP {response.status_code}: "
                        f"{response.text[:200]}"
                    )
                else:
                    try:
                        return response.json()
                    except ValueError as exc:
                        raise EmbeddingError("embedding server answered non-JSON") from exc
            if attempt < self.retries:
                self._sleep(max(wait or 0.0, self._delay(attempt)))
        raise EmbeddingUnavailable(
            f"embedding server {self.url} failed after {self.retries + 1} attempts ({last})"
        )

    def _parse(self, body: Any, expected: int) -> list[list[float]]:
        try:
            items = sorted(body["data"], key=lambda item: int(item["index"]))
            indices = [int(item["index"]) for item in items]
            matrix = np.asarray([item["embedding"] for item in items], dtype=np.float64)
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbeddingError(f"malformed embeddings response: {exc!r}") from exc
        if indices != list(range(expected)):
            raise EmbeddingError(f"expected {expected} embeddings with indices 0..{expected - 1}")
        if matrix.ndim != 2 or matrix.shape[1] != self.dimension:
            got = matrix.shape[1] if matrix.ndim == 2 else "ragged"
            raise EmbeddingError(
                f"{self.model} returned dimension {got}, expected {self.dimension}"
            )
        # Servers differ on whether they normalise; the vector index assumes unit vectors.
        if not np.all(np.isfinite(matrix)):
            raise EmbeddingError(f"{self.model} returned a non-finite vector")
        # Scaled by the largest component first: the norm of huge (finite) components would
        # overflow to inf and the vector would come out as zeros.
        largest = np.max(np.abs(matrix), axis=1, keepdims=True)
        if np.any(largest == 0):
            raise EmbeddingError(f"{self.model} returned a zero vector")
        scaled = matrix / largest
        return (scaled / np.linalg.norm(scaled, axis=1, keepdims=True)).tolist()  # type: ignore[no-any-return]
