"""The admin and agent API as `toolsift eval` uses them: over HTTP, like any client.

Tools are uploaded with `PUT /admin/v1/tools` in chunks that stay under the server's body
limit; the tenant is fresh, so every tool is created (none updated or unchanged).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from .dataset import EvalTool

# Below the default TOOLSIFT_MAX_BODY_BYTES (256 KiB), with room for the envelope.
CHUNK_BYTES = 200_000
CHUNK_TOOLS = 500
BUDGET_TOKENS = 200_000  # the largest budget a select accepts: ranking, not budget, is measured


class ApiError(RuntimeError):
    """The server refused or failed a call; the message carries method, path and answer."""


def checked(response: httpx.Response, expected: int = 200) -> Any:
    """The answer's JSON, or an ApiError naming the call and quoting the answer."""
    if response.status_code != expected:
        request = response.request
        raise ApiError(
            f"{request.method} {request.url.path}: HTTP {response.status_code}: "
            f"{response.text[:500]}"
        )
    return response.json() if response.content else None


@dataclass(frozen=True)
class EmbeddingStatus:
    model: str | None
    tools: int
    embedded: int
    stale: int
    missing: int
    pending_jobs: int
    learned_queries: int
    learned_embedded: int

    @property
    def done(self) -> bool:
        return self.missing == 0 and self.stale == 0

    @property
    def settled(self) -> bool:
        """No job left: what has no current vector now (a text the server refused for good)
        never will."""
        return self.done or self.pending_jobs == 0


class Admin:
    """One tenant's admin key."""

    def __init__(self, base_url: str, key: str, *, timeout: float = 120.0) -> None:
        self.http = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout
        )

    def close(self) -> None:
        self.http.close()

    def tenant(self) -> dict[str, Any]:
        result: dict[str, Any] = checked(self.http.get("/admin/v1/tenant"))
        return result

    def update_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """Merge `settings` into the tenant's (PATCH /admin/v1/tenant); its settings after."""
        tenant = checked(self.http.patch("/admin/v1/tenant", json={"settings": settings}))
        result: dict[str, Any] = tenant["settings"]
        return result

    def has_tools(self) -> bool:
        page = checked(self.http.get("/admin/v1/tools", params={"limit": 1}))
        return bool(page["items"])

    def agent_key(self, name: str = "toolsift-eval") -> tuple[str, str]:
        """(id, secret) of a new agent key; `revoke` it when done."""
        created = checked(
            self.http.post("/admin/v1/keys", json={"name": name, "scope": "agent", "roles": []}),
            201,
        )
        return str(created["id"]), str(created["secret"])

    def revoke(self, key_id: str) -> None:
        checked(self.http.delete(f"/admin/v1/keys/{key_id}"))

    def upload(self, tools: Sequence[EvalTool], progress: Callable[[int], None]) -> None:
        """Every tool, in chunks under the body limit, in dataset order (= registry order)."""
        chunk: list[dict[str, Any]] = []
        size = 0
        for item in tools:
            body = item.tool.model_dump(mode="json")
            length = len(json.dumps(body)) + 2
            if chunk and (size + length > CHUNK_BYTES or len(chunk) >= CHUNK_TOOLS):
                self._put(chunk)
                progress(len(chunk))
                chunk, size = [], 0
            chunk.append(body)
            size += length
        if chunk:
            self._put(chunk)
            progress(len(chunk))

    def _put(self, chunk: list[dict[str, Any]]) -> None:
        checked(self.http.put("/admin/v1/tools", json={"tools": chunk}))

    def token_costs(self) -> dict[str, int]:
        """Registry name -> token cost, as the server computed it (what a select spends)."""
        costs: dict[str, int] = {}
        after: int | None = None
        while True:
            params: dict[str, int] = {"limit": 1000}
            if after is not None:
                params["after"] = after
            page = checked(self.http.get("/admin/v1/tools", params=params))
            for tool in page["items"]:
                costs[tool["name"]] = int(tool["token_cost"])
            after = page.get("next_cursor")
            if after is None or not page["items"]:
                return costs

    def embeddings(self) -> EmbeddingStatus:
        response = self.http.get("/admin/v1/embeddings")
        if response.status_code == 404:
            raise ApiError(
                "GET /admin/v1/embeddings: HTTP 404: this server has no embeddings pipeline"
            )
        data = checked(response)
        return EmbeddingStatus(**{k: data[k] for k in EmbeddingStatus.__dataclass_fields__})

    def wait_for_embeddings(
        self,
        progress: Callable[[EmbeddingStatus], None],
        *,
        timeout: float,
        poll: float = 1.0,
    ) -> EmbeddingStatus:
        """Poll until every live tool has a current vector, or no job is left; fail after
        `timeout` s of no progress."""
        last_change = time.monotonic()
        previous: EmbeddingStatus | None = None
        while True:
            status = self.embeddings()
            progress(status)
            if status.settled:
                return status
            if previous is None or status.embedded != previous.embedded:
                last_change = time.monotonic()
            elif time.monotonic() - last_change > timeout:
                raise ApiError(
                    f"embeddings made no progress for {timeout:.0f} s "
                    f"({status.embedded}/{status.tools} embedded, {status.pending_jobs} jobs "
                    "pending): is a worker running?"
                )
            previous = status
            time.sleep(poll)

    def wait_for_learning(self, *, timeout: float, poll: float = 1.0) -> EmbeddingStatus:
        """Poll until every learned query has a vector of the served model; fail after
        `timeout` s without progress (the worker computes them)."""
        last_change = time.monotonic()
        previous = -1
        while True:
            status = self.embeddings()
            if status.learned_embedded >= status.learned_queries:
                return status
            if status.learned_embedded != previous:
                last_change, previous = time.monotonic(), status.learned_embedded
            elif time.monotonic() - last_change > timeout:
                raise ApiError(
                    f"learned queries made no progress for {timeout:.0f} s "
                    f"({status.learned_embedded}/{status.learned_queries} embedded): "
                    "is a worker running?"
                )
            time.sleep(poll)


def create_tenant(base_url: str, operator_key: str, name: str) -> tuple[str, str]:
    """A fresh tenant through `POST /admin/v1/tenants`; returns its id and admin key."""
    response = httpx.post(
        f"{base_url.rstrip('/')}/admin/v1/tenants",
        json={"name": name},
        headers={"Authorization": f"Bearer {operator_key}"},
        timeout=30,
    )
    created = checked(response, 201)
    return str(created["tenant"]["id"]), str(created["admin_key"]["secret"])


def delete_tenant(base_url: str, operator_key: str, tenant_id: str) -> None:
    response = httpx.delete(
        f"{base_url.rstrip('/')}/admin/v1/tenants/{tenant_id}",
        headers={"Authorization": f"Bearer {operator_key}"},
        timeout=60,
    )
    checked(response, 204)


def select_body(text: str, *, mode: str, k: int) -> bytes:
    """One user turn; debug for the ranked candidates (tools come back in registry order)."""
    body = {
        "messages": [{"role": "user", "content": text}],
        "k": k,
        "budget_tokens": BUDGET_TOKENS,
        "mode": mode,
        "debug": True,
    }
    return json.dumps(body).encode()


def ranking(answer: dict[str, Any]) -> list[str]:
    """The selected tools in rank order, from the debug candidates."""
    candidates = answer.get("candidates") or []
    chosen = [c for c in candidates if c.get("selected")]
    return [str(c["name"]) for c in sorted(chosen, key=lambda c: int(c["rank"]))]
