"""The two ways a case reaches the select service, and the property each case must satisfy.

In process: the real service through the real database and row-level security, as the
endpoint calls it (one transaction per select, agent scope, roles narrowed in SQL), so a case
costs two selects and no HTTP. Over HTTP: real keys, authentication, JSON on the wire and
error bodies, with bodies encoded with `ensure_ascii` so that text that is not valid UTF-8 on
its own (lone surrogates) reaches the server as JSON escapes, as any client may send it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from httpx import Response
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolsift.db import Database
from toolsift.embedding.base import EmbeddingBackend
from toolsift.errors import AppError
from toolsift.selection.schemas import SelectRequest
from toolsift.selection.service import selection

from .world import Caller, World, callers, check_error, check_selection, requests

# Cases per mode: 3 x (3,000 + 400) = 10,200 in all; the run's summary line adds up what ran.
# The variables only lower them for a quick local run.
IN_PROCESS_CASES = int(os.environ.get("TOOLSIFT_TEST_PROPERTY_CASES", "3000"))
HTTP_CASES = int(os.environ.get("TOOLSIFT_TEST_HTTP_CASES", "400"))
MCP_CASES = int(os.environ.get("TOOLSIFT_TEST_MCP_CASES", "300"))

Answer = tuple[int, dict[str, Any]]

# A lone surrogate: legal as a JSON string escape, yet no character (not encodable as UTF-8).
surrogates = st.builds(
    lambda c, rest: c + rest,
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.sampled_from(["", "x", " "]),
)


def select_in_process(
    database: Database, embedder: EmbeddingBackend, caller: Caller, body: dict[str, Any]
) -> Answer:
    """What the endpoint would answer: status and JSON body (as serialised, without nulls)."""
    request = SelectRequest.model_validate(body)
    principal = caller.tenant.principal(caller.key)
    try:
        # An agent's transaction starts with no permission; roles narrow it inside select().
        with database.unit_of_work(principal.tenant_id, permissions="") as session:
            response = selection.select(session, principal, request, embedder)
    except AppError as error:
        return error.status_code, error.body()["error"]
    return 200, response.model_dump(mode="json", exclude_none=True)


def _post(client: TestClient, caller: Caller, path: str, body: dict[str, Any]) -> Response:
    """JSON as a client sends it (lone surrogates escaped), with the caller's key."""
    return client.post(
        path,
        content=json.dumps(body, ensure_ascii=True).encode(),
        headers={
            "authorization": f"Bearer {caller.key.secret}",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",  # as MCP asks of a client
        },
    )


def select_over_http(client: TestClient, caller: Caller, body: dict[str, Any]) -> Answer:
    response = _post(client, caller, "/v1/select", body)
    answer = response.json()
    return response.status_code, answer if response.status_code == 200 else answer["error"]


def _without_id(answer: Answer) -> Answer:
    status, body = answer
    return status, {k: v for k, v in body.items() if k != "selection_id"}


def check_case(
    world: World, caller: Caller, body: dict[str, Any], send: Callable[[], Answer]
) -> Answer:
    """Nothing foreign or forbidden in the answer, whatever it is; the same answer twice.
    Returns the answer."""
    first = send()
    status, answer = first
    if status == 200:
        check_selection(world, caller, body, answer)
    else:
        check_error(world, caller, status, answer)
    second = send()
    assert _without_id(second) == _without_id(first), "same input, different output"
    if status == 200:
        assert second[1]["selection_id"] != answer["selection_id"]
    return first


def _settings(cases: int) -> settings:
    return settings(
        max_examples=cases,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def run_in_process(
    mode: str,
    world: World,
    database: Database,
    embedder: EmbeddingBackend,
    record_property: Callable[[str, object], None],
) -> None:
    cases = lifted = 0

    @_settings(IN_PROCESS_CASES)
    @given(caller=callers(world), body=requests(world, mode))
    def holds(caller: Caller, body: dict[str, Any]) -> None:
        nonlocal cases, lifted
        if caller.roles is not None:
            body = {**body, "roles": caller.roles}
        _, answer = check_case(
            world, caller, body, lambda: select_in_process(database, embedder, caller, body)
        )
        cases += 1
        lifted += any("companion_lift" in c for c in answer.get("candidates") or [])

    holds()
    record_property("property_cases", cases)
    assert cases >= IN_PROCESS_CASES
    # The world's tools called together lift candidates in hybrid: the lift is exercised.
    assert (lifted > 0) is (mode == "hybrid"), lifted


def run_over_http(
    mode: str, world: World, client: TestClient, record_property: Callable[[str, object], None]
) -> None:
    cases = 0

    @_settings(HTTP_CASES)
    @given(
        caller=callers(world),
        body=requests(world, mode),
        odd=st.one_of(
            st.none(), st.tuples(st.sampled_from(["plan", "content", "block"]), surrogates)
        ),
    )
    def holds(caller: Caller, body: dict[str, Any], odd: tuple[str, str] | None) -> None:
        nonlocal cases
        if caller.roles is not None:
            body = {**body, "roles": caller.roles}
        where, text = odd or ("", "")
        if where == "plan":
            body = {**body, "task": {**body["task"], "plan": body["task"]["plan"] + text}}
        elif where:
            content: Any = text if where == "content" else [{"type": "text", "text": text}]
            body = {**body, "messages": [*body["messages"], {"role": "user", "content": content}]}
        if where == "plan":
            # A plain string field: refused, naming it. Message text is scrubbed, as NUL is.
            status, answer = select_over_http(client, caller, body)
            assert (status, answer.get("field")) == (422, "task.plan"), (status, answer)
        else:
            check_case(world, caller, body, lambda: select_over_http(client, caller, body))
        cases += 1

    holds()
    record_property("property_cases", cases)
    assert cases >= HTTP_CASES


def search_over_mcp(client: TestClient, caller: Caller, arguments: dict[str, Any]) -> Answer:
    """The MCP search tool's answer: 200 and its result, or 422 and its error."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "search_tools", "arguments": arguments},
    }
    response = _post(client, caller, "/mcp", call)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    if result.get("isError"):
        return 422, result["structuredContent"]["error"]
    return 200, result["structuredContent"]


def run_over_mcp(
    world: World, client: TestClient, record_property: Callable[[str, object], None]
) -> None:
    """The search tool agents call over MCP: a select in the tenant's default mode (hybrid)
    of one query, under the same rules as `/v1/select`."""
    cases = 0

    @_settings(MCP_CASES)
    @given(caller=callers(world), body=requests(world, "hybrid"))
    def holds(caller: Caller, body: dict[str, Any]) -> None:
        nonlocal cases
        query, recent = body["task"]["plan"], body["task"]["recent_tools"]
        arguments: dict[str, Any] = {
            "query": query,
            "recent_tools": recent,
            "k": body["k"],
            "budget_tokens": body["budget_tokens"],
            "format": body["format"],
        }
        if caller.roles is not None:
            arguments["roles"] = caller.roles
        # The select the search stands for, which the answer is judged as.
        select = {
            **{k: body[k] for k in ("k", "budget_tokens", "format")},
            "messages": [{"role": "user", "content": query}],
            "task": {"plan": "", "recent_tools": recent},
            "mode": "hybrid",
            "debug": False,
        }
        first = search_over_mcp(client, caller, arguments)
        status, answer = first
        if status == 200:
            check_selection(world, caller, select, answer)
        else:  # the one refusal: a role the key was not granted, named, nothing shown
            lacking = [i for i, r in enumerate(caller.roles or []) if r not in caller.key.roles]
            assert lacking, f"refused although every asserted role is granted: {answer}"
            assert answer["field"] == f"roles[{lacking[0]}]", answer
            shown = json.dumps(answer, ensure_ascii=False)
            assert not [m for m in world.markers if m in shown], shown
        second = search_over_mcp(client, caller, arguments)
        assert _without_id(second) == _without_id(first), "same input, different output"
        cases += 1

    holds()
    record_property("property_cases", cases)
    assert cases >= MCP_CASES
