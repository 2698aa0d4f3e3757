"""Tenant isolation and permissions, end to end through the HTTP API on a real PostgreSQL.

Every check here is about what a caller can learn or reach: other tenants' tools and objects,
forbidden tools, roles not granted, and changes (revocations) that must hold from the very
next request on.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar

import anyio
import anyio.to_thread
import pytest
from fastapi.testclient import TestClient
from httpx import Response

from tests.fixtures.factories import (
    SUPPORT_CATALOG,
    Caller,
    agent_key,
    new_tenant,
    support_catalog,
    tool_body,
)
from toolsift.db import Database

from .conftest import embedded

REFUND = "refund the payment of this order"
SHIPPING = "where is my order shipping status"
QUERIES = [
    REFUND,
    SHIPPING,
    "delete the customer account permanently",
    "look up the account by email",
    "search the help center articles",
    "refund policy for card payments",
]
FORMATS = ["anthropic", "openai", "mcp"]
FORBIDDEN = ("issue_refund", "delete_account")
ALL_ROLES = ["support", "billing", "administrator"]
CATALOG_NAMES = [name for name, *_ in SUPPORT_CATALOG]


def _tool_name(tool: dict[str, Any]) -> str:
    function = tool.get("function")
    return str(function["name"] if isinstance(function, dict) else tool["name"])


def _debug(caller: Caller, content: str, **body: Any) -> dict[str, Any]:
    result: dict[str, Any] = caller.ok(caller.select(content, debug=True, k=50, **body))
    return result


def _names(body: dict[str, Any]) -> list[str]:
    return [_tool_name(t) for t in body["tools"]]


def _candidate_names(body: dict[str, Any]) -> list[str]:
    return [c["name"] for c in body["candidates"]]


def _scores(body: dict[str, Any]) -> list[tuple[str, int, float, list[str]]]:
    return [(c["name"], c["rank"], c["score"], c["matched_terms"]) for c in body["candidates"]]


def _without_id(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "selection_id"}


@dataclass
class Tenant:
    admin: Caller
    agent: Caller  # granted every role
    ids: dict[str, Any]
    prefix: str  # names of the tools only this tenant has start with it


def _twin_tools(prefix: str) -> list[dict[str, Any]]:
    """Tools with the catalog's very words under names no other tenant has."""
    return [tool_body(f"{prefix}{n}", d, p, False) for n, d, p, _ in SUPPORT_CATALOG]


def _tenant(admin: Caller, ids: dict[str, Any], prefix: str) -> Tenant:
    twins = admin.ok(admin.put("/admin/v1/tools", {"tools": _twin_tools(prefix)}))["tools"]
    ids.update({t["name"]: t["id"] for t in twins})
    return Tenant(admin, agent_key(admin, ALL_ROLES, name="all"), ids, prefix)


@pytest.fixture
def acme(admin: Caller, catalog: dict[str, Any]) -> Tenant:
    return _tenant(admin, catalog, "acme_")


@pytest.fixture
def globex(client: TestClient, database: Database) -> Tenant:
    """A second tenant with the same catalog (same names, same words) and its own twins."""
    admin = new_tenant(client, database, "globex")
    return _tenant(admin, support_catalog(admin), "globex_")


@pytest.fixture
def support_only(admin: Caller, catalog: dict[str, Any]) -> Caller:
    """May read the CRM and orders; holds neither billing.refund nor admin."""
    return agent_key(admin, ["support"], name="support-only")


# --- other tenants ---------------------------------------------------------------------------


class TestOtherTenantsTools:
    def test_never_selected_nor_candidates(
        self, acme: Tenant, globex: Tenant, database: Database, mode: str
    ) -> None:
        embedded(database, mode, acme.admin.tenant_id, globex.admin.tenant_id)
        for me, other in ((acme, globex), (globex, acme)):
            own = {*CATALOG_NAMES, *(me.prefix + n for n in CATALOG_NAMES)}
            for query in [*QUERIES, f"{other.prefix}issue_refund {other.prefix}order_status"]:
                for fmt in FORMATS:
                    body = _debug(me.agent, query, format=fmt, budget_tokens=200_000, mode=mode)
                    names, candidates = _names(body), _candidate_names(body)
                    assert candidates, f"{query!r} matched nothing: the check below is empty"
                    assert set(names) <= own
                    assert set(candidates) <= own
                    # A same-named tool of the other tenant would show up as a duplicate.
                    assert len(names) == len(set(names))
                    assert len(candidates) == len(set(candidates))
                    # (`query` is the caller's own text echoed back, so it is left out.)
                    assert other.prefix not in json.dumps({**body, "query": None})

    def test_same_named_tools_are_each_tenants_own(self, acme: Tenant, globex: Tenant) -> None:
        """Same names, same words: each tenant gets exactly one copy, and it is its own."""
        for me in (acme, globex):
            body = _debug(me.agent, REFUND, budget_tokens=200_000)
            assert _names(body).count("issue_refund") == 1
            assert _candidate_names(body).count("issue_refund") == 1
            listed = me.admin.ok(me.admin.get("/admin/v1/tools", params={"limit": 1000}))["items"]
            assert {t["name"]: t["id"] for t in listed}["issue_refund"] == me.ids["issue_refund"]

    def test_used_tools_of_another_tenant_are_not_brought_in(
        self, acme: Tenant, globex: Tenant
    ) -> None:
        def request(prefix: str) -> dict[str, Any]:
            call = {"name": f"{prefix}lookup_account", "arguments": "{}"}
            messages = [
                {"role": "user", "content": "go on"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": f"{prefix}issue_refund"}],
                    "tool_calls": [{"id": "c1", "type": "function", "function": call}],
                },
                # A Responses API call item, and a Gemini call part.
                {"type": "function_call", "call_id": "c2", "name": f"{prefix}refund_policy"},
                {"role": "model", "parts": [{"functionCall": {"name": f"{prefix}search_help"}}]},
                {"role": "user", "content": "ok"},
            ]
            task = {"recent_tools": [f"{prefix}order_status"]}
            return {"messages": messages, "task": task, "debug": True, "k": 50}

        used = ["issue_refund", "lookup_account", "order_status", "refund_policy"]
        # Control: the same request naming acme's own twins brings all three in.
        own = _names(acme.agent.ok(acme.agent.post("/v1/select", request("acme_"))))
        assert {f"acme_{n}" for n in used} <= set(own)
        # Naming globex's twins brings in none of them (and nothing of globex at all).
        body = acme.agent.ok(acme.agent.post("/v1/select", request("globex_")))
        assert not any(n.startswith("globex_") for n in [*_names(body), *_candidate_names(body)])
        assert body["candidates"], "the recent tools' words still score acme's own tools"

    def test_authorize_reads_another_tenants_tool_as_unknown(
        self, acme: Tenant, globex: Tenant
    ) -> None:
        unknown = acme.agent.post("/v1/authorize", {"tool": "no_such_tool"})
        assert unknown.json()["allowed"] is False
        for name in ("globex_issue_refund", "globex_search_help", "globex_order_status"):
            for arguments in (None, {}, {"ref": 1}):
                body: dict[str, Any] = {"tool": name}
                control: dict[str, Any] = {"tool": "no_such_tool"}
                if arguments is not None:
                    body["arguments"] = control["arguments"] = arguments
                answer = acme.agent.post("/v1/authorize", body)
                expected = acme.agent.post("/v1/authorize", control)
                assert (answer.status_code, answer.json()) == (200, expected.json())
        # Control: the tenant's own tool of that name is allowed.
        assert acme.agent.ok(acme.agent.post("/v1/authorize", {"tool": "issue_refund"}))["allowed"]
        assert globex.agent.ok(globex.agent.post("/v1/authorize", {"tool": "globex_issue_refund"}))[
            "allowed"
        ]

    def test_authorize_reads_a_deleted_tool_as_unknown(self, acme: Tenant) -> None:
        call = {"tool": "search_help", "arguments": {}}
        assert acme.agent.ok(acme.agent.post("/v1/authorize", call))["allowed"] is True
        listed = acme.admin.ok(acme.admin.get("/admin/v1/tools", params={"limit": 1000}))
        [tool_id] = [t["id"] for t in listed["items"] if t["name"] == "search_help"]
        acme.admin.ok(acme.admin.delete(f"/admin/v1/tools/{tool_id}"), 204)
        unknown = {"tool": "no_such_tool", "arguments": {}}
        assert acme.agent.ok(acme.agent.post("/v1/authorize", call)) == acme.agent.ok(
            acme.agent.post("/v1/authorize", unknown)
        )


class TestOtherTenantsVolume:
    # BM25 only: its statistics are what another tenant's writes could move. A cosine distance
    # reads one vector and the query, and hybrid fuses those two ranks; both modes' isolation
    # is checked above. (A thousand more tools cost about 25 s per mode here.)
    def test_a_thousand_tools_elsewhere_leave_scores_bit_identical(
        self, acme: Tenant, globex: Tenant
    ) -> None:
        mode = "bm25"

        def snapshot(tenant: Tenant) -> list[tuple[list[str], Any]]:
            out = []
            for query in QUERIES:
                body = _debug(tenant.agent, query, budget_tokens=200_000, mode=mode)
                out.append((_names(body), _scores(body)))
            return out

        before, theirs_before = snapshot(acme), snapshot(globex)
        words = [
            "refund",
            "payment",
            "order",
            "shipping",
            "status",
            "customer",
            "account",
            "card",
            "policy",
            "help",
            "articles",
            "delete",
            "email",
            "look",
            "search",
        ]
        bulk = [
            tool_body(
                f"bulk_{i:04d}",
                " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(1 + i % 5)),
                None,
            )
            for i in range(1000)
        ]
        for start in range(0, len(bulk), 500):
            batch = bulk[start : start + 500]
            result = globex.admin.ok(globex.admin.put("/admin/v1/tools", {"tools": batch}))
            assert result["created"] == len(batch)
        # The same names as acme's tools, changed, and one deleted, too.
        changed = [
            tool_body(n, f"{d} refund order account status", p) for n, d, p, _ in SUPPORT_CATALOG
        ]
        assert globex.admin.ok(globex.admin.put("/admin/v1/tools", {"tools": changed}))[
            "updated"
        ] == len(changed)
        deleted = globex.admin.delete(f"/admin/v1/tools/{globex.ids['refund_policy']}")
        assert deleted.status_code == 204

        after, theirs_after = snapshot(acme), snapshot(globex)
        # Floats compared with ==: the same bits, not merely close.
        assert after == before
        # Not vacuous: the same queries do score differently in the tenant that changed.
        assert theirs_after != theirs_before


class TestOtherTenantsObjects:
    def test_ids_of_another_tenant_are_not_found(self, acme: Tenant, globex: Tenant) -> None:
        admin, ids = acme.admin, globex.ids
        theirs = globex.admin

        def state() -> list[Any]:
            return [
                theirs.ok(theirs.get("/admin/v1/tools", params={"include_deleted": True})),
                theirs.ok(theirs.get("/admin/v1/roles")),
                theirs.ok(theirs.get("/admin/v1/permissions")),
                theirs.ok(theirs.get("/admin/v1/keys")),
            ]

        before = state()
        key_id = globex.agent.extra["key_id"]
        tool, role, permission = ids["issue_refund"], ids["billing"], ids["billing.refund"]
        attempts: list[tuple[str, str, Any]] = [
            ("GET", f"/admin/v1/tools/{tool}", None),
            ("PATCH", f"/admin/v1/tools/{tool}", {"description": "hijacked"}),
            ("PATCH", f"/admin/v1/tools/{tool}", {"required_permission": None}),
            ("DELETE", f"/admin/v1/tools/{tool}", None),
            ("GET", f"/admin/v1/roles/{role}", None),
            ("PATCH", f"/admin/v1/roles/{role}", {"permissions": []}),
            ("PUT", f"/admin/v1/roles/{role}/permissions/billing.refund", None),
            ("DELETE", f"/admin/v1/roles/{role}/permissions/billing.refund", None),
            ("DELETE", f"/admin/v1/roles/{role}", None),
            ("GET", f"/admin/v1/permissions/{permission}", None),
            ("DELETE", f"/admin/v1/permissions/{permission}", None),
            ("GET", f"/admin/v1/keys/{key_id}", None),
            ("DELETE", f"/admin/v1/keys/{key_id}", None),
        ]
        for method, path, body in attempts:
            response = admin.client.request(method, path, json=body, headers=admin.headers)
            # The same answer as for an id that exists nowhere: no existence oracle.
            nowhere = path.replace(path.split("/")[4], str(uuid.uuid4()))
            control = admin.client.request(method, nowhere, json=body, headers=admin.headers)
            assert (method, path, response.status_code) == (method, path, 404), response.text
            assert response.json() == control.json()
        assert state() == before
        assert "issue_refund" in globex.agent.names(REFUND, roles=["billing"])


# --- roles -----------------------------------------------------------------------------------


class TestAssertedRoles:
    @pytest.mark.parametrize("path", ["/v1/select", "/v1/authorize"])
    def test_only_granted_roles(
        self, path: str, support_only: Caller, globex: Tenant, admin: Caller
    ) -> None:
        # `ops` exists only in the other tenant; `ghost` exists nowhere.
        globex.admin.ok(globex.admin.post("/admin/v1/roles", {"name": "ops"}), 201)
        base: dict[str, Any] = (
            {"messages": [{"role": "user", "content": REFUND}]}
            if path == "/v1/select"
            else {"tool": "issue_refund"}
        )
        cases = [
            (["billing"], 0),
            (["support", "billing"], 1),
            (["support", "administrator"], 1),
            (["support", "support", "ops"], 2),
            (["ghost"], 0),
        ]
        answers: dict[str, dict[str, Any]] = {}
        for roles, index in cases:
            response = support_only.post(path, {**base, "roles": roles})
            assert response.status_code == 403, response.text
            error = response.json()["error"]
            assert (error["code"], error["field"]) == ("forbidden", f"roles[{index}]")
            answers[roles[index]] = error
        # A role of another tenant reads exactly like one that exists nowhere.
        ghost = answers["ghost"]
        as_ops = {**ghost, "message": ghost["message"].replace("ghost", "ops"), "field": "roles[2]"}
        assert answers["ops"] == as_ops
        assert support_only.post(path, {**base, "roles": ["support"]}).status_code == 200
        # And an admin cannot grant the other tenant's role to a key of its own.
        refused = admin.post("/admin/v1/keys", {"name": "x", "scope": "agent", "roles": ["ops"]})
        assert refused.status_code == 422

    def test_a_recreated_role_is_not_inherited_by_old_keys(
        self, admin: Caller, catalog: dict[str, Any], support_agent: Caller
    ) -> None:
        """Grants are by role id: deleting a role and creating another of the same name
        gives nothing to keys that held the old one."""
        admin.ok(admin.delete(f"/admin/v1/roles/{catalog['billing']}"), 204)
        admin.ok(
            admin.post("/admin/v1/roles", {"name": "billing", "permissions": ["billing.refund"]}),
            201,
        )
        refused = support_agent.select(REFUND, roles=["billing"])
        assert refused.status_code == 403
        assert refused.json()["error"]["field"] == "roles[0]"
        assert "issue_refund" not in support_agent.names(REFUND)


# --- changes hold from the next request on ---------------------------------------------------


def _during_response(
    caller: Caller, method: str, path: str, body: Any, probe: Callable[[], Response]
) -> tuple[int, Response]:
    """Send one request straight to the ASGI app and run `probe` as soon as the response is
    complete, as a client would that sends its next request on receiving the answer.

    TestClient only returns once the whole ASGI call has finished (dependency cleanup
    included), so it cannot see work that happens after the response went out.
    """
    app = caller.client.app
    payload = json.dumps(body).encode() if body is not None else b""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "server": ("testserver", 80),
        "client": ("testclient", 50000),
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            (b"authorization", f"Bearer {caller.key}".encode()),
        ],
        "state": {},
    }
    status: list[int] = []
    probed: list[Response] = []

    async def run() -> None:
        done = anyio.Event()
        consumed = False

        async def receive() -> MutableMapping[str, Any]:
            nonlocal consumed
            if not consumed:
                consumed = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                probed.append(await anyio.to_thread.run_sync(probe))
                done.set()

        await app(scope, receive, send)

    anyio.run(run)
    return status[0], probed[0]


class TestChangesApplyAtOnce:
    def test_revoked_permission_is_gone_at_the_next_select(
        self,
        admin: Caller,
        catalog: dict[str, Any],
        support_agent: Caller,
        database: Database,
        mode: str,
    ) -> None:
        embedded(database, mode, admin.tenant_id)
        grant = f"/admin/v1/roles/{catalog['billing']}/permissions/billing.refund"
        assert "issue_refund" in support_agent.names(REFUND, roles=["billing"], mode=mode)
        admin.ok(admin.delete(grant))
        assert "issue_refund" not in support_agent.names(REFUND, roles=["billing"], mode=mode)
        assert "issue_refund" not in support_agent.names(REFUND, mode=mode)
        assert not support_agent.ok(support_agent.post("/v1/authorize", {"tool": "issue_refund"}))[
            "allowed"
        ]
        admin.ok(admin.put(grant))
        assert "issue_refund" in support_agent.names(REFUND, roles=["billing"], mode=mode)

    def test_revoked_key_is_refused_at_its_next_request(
        self, admin: Caller, support_agent: Caller
    ) -> None:
        assert support_agent.select(REFUND).status_code == 200
        admin.ok(admin.delete(f"/admin/v1/keys/{support_agent.extra['key_id']}"))
        for response in (
            support_agent.select(REFUND),
            support_agent.post("/v1/authorize", {"tool": "search_help"}),
        ):
            assert response.status_code == 401, response.text
        # A revoked admin key too.
        other = admin.ok(admin.post("/admin/v1/keys", {"name": "ops", "scope": "admin"}), 201)
        admin.ok(admin.delete(f"/admin/v1/keys/{other['id']}"))
        revoked = admin.client.get(
            "/admin/v1/tools", headers={"Authorization": "Bearer " + other["secret"]}
        )
        assert revoked.status_code == 401

    def test_tool_permission_change_applies_at_the_next_select(
        self, admin: Caller, catalog: dict[str, Any], support_only: Caller
    ) -> None:
        tool = f"/admin/v1/tools/{catalog['refund_policy']}"
        assert "refund_policy" in support_only.names(REFUND)
        admin.ok(admin.patch(tool, {"required_permission": "billing.refund"}))
        body = _debug(support_only, REFUND)
        assert "refund_policy" not in _names(body)
        assert "refund_policy" not in _candidate_names(body)
        admin.ok(admin.patch(tool, {"required_permission": "orders.read"}))
        assert "refund_policy" in support_only.names(REFUND)
        admin.ok(admin.patch(tool, {"required_permission": None}))
        assert "refund_policy" in support_only.names(REFUND)
        # And the other way: a permitted tool moved behind a permission the caller lacks.
        admin.ok(
            admin.patch(
                f"/admin/v1/tools/{catalog['order_status']}", {"required_permission": "admin"}
            )
        )
        assert "order_status" not in support_only.names(SHIPPING)

    def test_permission_revoke_holds_when_its_response_arrives(
        self, admin: Caller, catalog: dict[str, Any], support_agent: Caller
    ) -> None:
        path = f"/admin/v1/roles/{catalog['billing']}/permissions/billing.refund"
        status, probe = _during_response(
            admin, "DELETE", path, None, lambda: support_agent.select(REFUND, roles=["billing"])
        )
        assert status == 200
        assert "issue_refund" not in [t["name"] for t in probe.json()["tools"]]

    def test_key_revoke_holds_when_its_response_arrives(
        self, admin: Caller, support_agent: Caller
    ) -> None:
        path = f"/admin/v1/keys/{support_agent.extra['key_id']}"
        status, probe = _during_response(
            admin, "DELETE", path, None, lambda: support_agent.select(REFUND)
        )
        assert status == 200
        assert probe.status_code == 401, probe.text

    def test_tool_restriction_holds_when_its_response_arrives(
        self, admin: Caller, catalog: dict[str, Any], support_only: Caller
    ) -> None:
        path = f"/admin/v1/tools/{catalog['refund_policy']}"
        status, probe = _during_response(
            admin,
            "PATCH",
            path,
            {"required_permission": "billing.refund"},
            lambda: support_only.select(REFUND),
        )
        assert status == 200
        assert "refund_policy" not in [t["name"] for t in probe.json()["tools"]]


# --- forbidden tools leave no trace ----------------------------------------------------------


def _anthropic_history(tool: str, last: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "please close my account"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Working on it."},
                {"type": "tool_use", "id": "tu_1", "name": tool, "input": {"ref": "42"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1"}]},
        {"role": "user", "content": last},
    ]


def _openai_history(tool: str, last: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": tool, "arguments": "{}"}}
    return [
        {"role": "user", "content": "refund me"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "{}"},
        {"role": "user", "content": last},
    ]


def _responses_history(tool: str, last: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": [{"type": "input_text", "text": "refund me"}]},
        {"type": "function_call", "call_id": "c1", "name": tool, "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "{}"},
        {"role": "user", "content": last},
    ]


def _gemini_history(tool: str, last: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "parts": [{"text": "refund me"}]},
        {"role": "model", "parts": [{"functionCall": {"name": tool, "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": tool, "response": {}}}]},
        {"role": "user", "parts": [{"text": last}]},
    ]


def _requests() -> Iterator[tuple[str, Any]]:
    """What a curious caller might send to learn about tools it may not use."""
    texts = [
        REFUND,
        "issue_refund delete_account",
        "issue refund and delete account",
        "delete the customer account permanently",
        "refund the payment to the card",
        "issueRefund deleteAccount issue-refund delete.account",
    ]
    for fmt in FORMATS:
        for content in texts:
            message = {"role": "user", "content": content}
            common = {"format": fmt, "debug": True, "k": 50, "budget_tokens": 200_000}
            yield "/v1/select", {"messages": [message], **common}
        for forbidden in FORBIDDEN:
            common = {"format": fmt, "debug": True, "k": 50, "budget_tokens": 200_000}
            yield (
                "/v1/select",
                {
                    "messages": [{"role": "user", "content": "yes, do it"}],
                    "task": {"plan": f"call {forbidden} now", "recent_tools": [forbidden]},
                    **common,
                },
            )
            yield "/v1/select", {"messages": _anthropic_history(forbidden, "ok"), **common}
            yield "/v1/select", {"messages": _openai_history(forbidden, "go"), **common}
            yield "/v1/select", {"messages": _responses_history(forbidden, "go"), **common}
            yield "/v1/select", {"messages": _gemini_history(forbidden, "go"), **common}
            yield "/v1/select", {"messages": _anthropic_history(forbidden, forbidden), **common}
    # Errors must not name them either.
    naming = [{"role": "user", "content": "issue_refund delete_account"}]
    yield "/v1/select", {"messages": naming, "k": 0}
    yield "/v1/select", {"messages": naming, "roles": ["billing"], "debug": True}
    yield "/v1/select", {"messages": naming, "format": "issue_refund"}
    yield "/v1/select", {"messages": naming, "task": {"recent_tools": "delete_account"}}
    for forbidden in (*FORBIDDEN, "no_such_tool"):
        yield "/v1/authorize", {"tool": forbidden}
        yield "/v1/authorize", {"tool": forbidden, "arguments": {"ref": "42"}}
        yield "/v1/authorize", {"tool": forbidden, "arguments": {"ref": 42}}
        yield "/v1/authorize", {"tool": forbidden, "roles": ["support"]}
        yield "/v1/authorize", {"tool": forbidden, "roles": ["administrator"]}


def _assert_nothing_named(response: Response, sent: Any) -> None:
    text = response.text
    body = response.json()
    echoed = body.get("query") if isinstance(body, dict) else None
    if echoed:
        # Debug echoes the query it scored: only the caller's own words, nothing added.
        for word in echoed.split():
            assert word in json.dumps(sent), (word, echoed)
        encoded = json.dumps(echoed, ensure_ascii=False)
        assert text.count(encoded) == 1, "the echo is not where expected"
        text = text.replace(encoded, '""')
    for name in FORBIDDEN:
        assert name not in text, (sent, response.status_code, response.text)


class TestForbiddenToolsLeaveNoTrace:
    @pytest.mark.parametrize("as_role", [None, ["support"]])
    def test_no_response_names_them(
        self,
        as_role: list[str] | None,
        support_only: Caller,
        support_agent: Caller,
        admin: Caller,
        database: Database,
        mode: str,
    ) -> None:
        # A key granted only support, and a key that holds billing but acts as support.
        caller = support_only if as_role is None else support_agent
        embedded(database, mode, admin.tenant_id)
        statuses: set[int] = set()
        for path, sent in _requests():
            if path == "/v1/select":
                sent = {"mode": mode, **sent}
            if as_role is not None:
                if "billing" in sent.get("roles", ()):
                    continue  # granted to this key: not a forbidden probe for it
                sent = {"roles": as_role, **sent}
            response = caller.post(path, sent)
            statuses.add(response.status_code)
            _assert_nothing_named(response, sent)
        assert {200, 403, 422} <= statuses
        # Control: the same battery does surface them to a caller who may use them.
        allowed = (
            caller.ok(caller.select(REFUND, roles=["billing"], mode=mode)) if as_role else None
        )
        assert allowed is None or "issue_refund" in json.dumps(allowed)

    def test_authorize_forbidden_and_unknown_read_the_same(self, support_only: Caller) -> None:
        for extra in ({}, {"arguments": {"ref": "42"}}, {"arguments": {"ref": 42}}):
            unknown = support_only.post("/v1/authorize", {"tool": "no_such_tool", **extra})
            for forbidden in FORBIDDEN:
                answer = support_only.post("/v1/authorize", {"tool": forbidden, **extra})
                assert answer.status_code == unknown.status_code == 200
                assert answer.content == unknown.content
        # Control: for a tool it may use, the endpoint does say more.
        checked = support_only.post(
            "/v1/authorize", {"tool": "order_status", "arguments": {"ref": 42}}
        )
        assert checked.json()["errors"]
        assert support_only.ok(support_only.post("/v1/authorize", {"tool": "order_status"}))[
            "allowed"
        ]

    def test_a_forbidden_core_tool_is_not_forced_in(
        self, admin: Caller, catalog: dict[str, Any], support_only: Caller
    ) -> None:
        """Core means "always, when allowed": never a way around the permission."""
        admin.ok(admin.patch(f"/admin/v1/tools/{catalog['delete_account']}", {"core": True}))
        for fmt in FORMATS:
            response = support_only.select("ok", format=fmt, debug=True)
            _assert_nothing_named(response, {"messages": [{"role": "user", "content": "ok"}]})
            assert _names(response.json()) == ["search_help"]
        everything = agent_key(admin, ALL_ROLES, name="all")
        assert everything.names("ok") == ["search_help", "delete_account"]

    def test_permitted_caller_does_see_them(self, admin: Caller, catalog: dict[str, Any]) -> None:
        """The battery's control: these requests do name the tools to one who may use them."""
        everything = agent_key(admin, ALL_ROLES, name="all")
        body = _debug(everything, "issue_refund delete_account", budget_tokens=200_000)
        assert set(FORBIDDEN) <= set(_names(body))
        assert everything.ok(everything.post("/v1/authorize", {"tool": "delete_account"}))[
            "allowed"
        ]


# --- tools already in use --------------------------------------------------------------------


class TestUsedTools:
    def test_anthropic_tool_use_kept_while_allowed(
        self, admin: Caller, catalog: dict[str, Any], support_agent: Caller
    ) -> None:
        request = {"messages": _anthropic_history("issue_refund", "ok"), "debug": True}
        body = support_agent.ok(support_agent.post("/v1/select", request))
        assert body["candidates"] == [], "the query must match nothing: only use brings it in"
        assert _names(body) == ["search_help", "issue_refund"]
        acting = support_agent.ok(
            support_agent.post("/v1/select", {**request, "roles": ["support"]})
        )
        assert _names(acting) == ["search_help"]
        admin.ok(admin.delete(f"/admin/v1/roles/{catalog['billing']}/permissions/billing.refund"))
        assert _names(support_agent.ok(support_agent.post("/v1/select", request))) == [
            "search_help"
        ]

    def test_openai_tool_calls_kept_while_allowed(
        self, admin: Caller, catalog: dict[str, Any], support_only: Caller
    ) -> None:
        messages = _openai_history("lookup_account", "go")
        messages[1]["tool_calls"].append(
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "delete_account", "arguments": ""},
            }
        )
        request = {"messages": messages, "format": "openai", "debug": True}
        body = support_only.ok(support_only.post("/v1/select", request))
        assert body["candidates"] == []
        assert _names(body) == ["search_help", "lookup_account"]
        admin_agent = agent_key(admin, ["support", "administrator"], name="admin-agent")
        body = admin_agent.ok(admin_agent.post("/v1/select", request))
        assert _names(body) == ["search_help", "lookup_account", "delete_account"]
        admin.ok(
            admin.patch(
                f"/admin/v1/tools/{catalog['lookup_account']}", {"required_permission": "admin"}
            )
        )
        assert _names(support_only.ok(support_only.post("/v1/select", request))) == ["search_help"]

    def test_recent_tools_kept_while_allowed(
        self, admin: Caller, catalog: dict[str, Any], support_only: Caller
    ) -> None:
        request = {
            "messages": [{"role": "user", "content": "ok"}],
            "task": {"recent_tools": ["lookup_account", "issue_refund"]},
            "debug": True,
            "k": 1,
        }
        body = support_only.ok(support_only.post("/v1/select", request))
        assert "lookup_account" in _names(body)
        assert "issue_refund" not in json.dumps({**body, "query": None})
        admin.ok(admin.delete(f"/admin/v1/tools/{catalog['lookup_account']}"), 204)
        assert "lookup_account" not in _names(
            support_only.ok(support_only.post("/v1/select", request))
        )

    def test_used_tools_keep_registry_order(self, support_agent: Caller) -> None:
        # Used newest first (delete_account is not allowed, so only these two), output by position.
        messages = _anthropic_history("issue_refund", "ok")
        messages[1]["content"].append(
            {"type": "tool_use", "id": "tu_2", "name": "lookup_account", "input": {}}
        )
        body = support_agent.ok(support_agent.post("/v1/select", {"messages": messages}))
        assert _names(body) == ["search_help", "lookup_account", "issue_refund"]


# --- task state ------------------------------------------------------------------------------


class TestTaskState:
    CONVERSATION: ClassVar[list[dict[str, Any]]] = [
        {"role": "user", "content": "I was charged twice for order 1234"},
        {"role": "assistant", "content": "Shall I refund the second payment to your card?"},
        {"role": "user", "content": "yes, do it"},
    ]

    def test_bare_yes_alone_matches_nothing(self, support_agent: Caller) -> None:
        body = support_agent.ok(
            support_agent.post("/v1/select", {"messages": self.CONVERSATION, "debug": True})
        )
        assert body["candidates"] == []
        assert _names(body) == ["search_help"]

    def test_plan_finds_the_tasks_tools(self, support_agent: Caller) -> None:
        task = {"plan": "refund the duplicate payment of order 1234 to the card"}
        body = support_agent.ok(
            support_agent.post("/v1/select", {"messages": self.CONVERSATION, "task": task})
        )
        assert "issue_refund" in _names(body)

    def test_recent_tools_find_the_tasks_tools(self, support_agent: Caller) -> None:
        # Not a tool of the tenant: only its words can bring order_status in.
        task = {"recent_tools": ["getOrderStatus_v2"]}
        body = support_agent.ok(
            support_agent.post(
                "/v1/select", {"messages": self.CONVERSATION, "task": task, "debug": True}
            )
        )
        assert "order_status" in _names(body)
        assert next(c for c in body["candidates"] if c["name"] == "order_status")["reason"] == (
            "selected"
        )


# --- determinism and order -------------------------------------------------------------------


class TestOrder:
    def test_same_request_same_answer(self, support_agent: Caller) -> None:
        for query in QUERIES:
            for fmt in FORMATS:
                first = _debug(support_agent, query, format=fmt)
                second = _debug(support_agent, query, format=fmt)
                assert _without_id(first) == _without_id(second)
                assert first["selection_id"] != second["selection_id"]

    def test_core_first_then_registry_order_not_relevance(
        self, client: TestClient, database: Database
    ) -> None:
        admin = new_tenant(client, database, "initech")
        created = [
            tool_body("status_page", "Show the service status page", None, core=True),
            tool_body("archive_records", "Archive old records; an invoice may be among them"),
            tool_body("email_invoice", "Email the invoice to the customer"),
            tool_body("create_invoice", "Create an invoice: invoice lines and invoice totals"),
            tool_body("help_center", "Search the help center", None, core=True),
        ]
        for tool in created:
            admin.ok(admin.post("/admin/v1/tools", tool), 201)
        agent = agent_key(admin, [])
        body = _debug(agent, "invoice")
        # Relevance is the reverse of creation order ...
        assert _candidate_names(body) == ["create_invoice", "email_invoice", "archive_records"]
        # ... yet the output is core tools, then registry order.
        expected = [
            "status_page",
            "help_center",
            "archive_records",
            "email_invoice",
            "create_invoice",
        ]
        assert _names(body) == expected
        assert _names(_debug(agent, "invoice")) == expected


class TestHiddenToolsMoveNoScore:
    """Statistics come from the caller's allowed catalog: hidden tools shift nothing it sees."""

    def _scores(self, caller: Caller) -> dict[str, float]:
        body = _debug(caller, "refund the payment of this order")
        return {c["name"]: c["score"] for c in body["candidates"]}

    def test_deleting_a_forbidden_tool_leaves_scores_bit_identical(
        self, admin: Caller, catalog: dict[str, Any], support_only: Caller
    ) -> None:
        before = self._scores(support_only)
        admin.ok(admin.delete(f"/admin/v1/tools/{catalog['issue_refund']}"), 204)
        assert self._scores(support_only) == before

    def test_adding_forbidden_tools_leaves_scores_bit_identical(
        self, admin: Caller, catalog: dict[str, Any], support_only: Caller
    ) -> None:
        before = self._scores(support_only)
        hidden = [
            tool_body(f"refund_variant_{i}", "Refund the order payment", "billing.refund")
            for i in range(50)
        ]
        admin.ok(admin.put("/admin/v1/tools", {"tools": hidden}))
        assert self._scores(support_only) == before

    def test_the_permitted_caller_does_see_the_statistics_move(
        self, admin: Caller, catalog: dict[str, Any], support_agent: Caller
    ) -> None:
        # Control: for a caller holding billing.refund the same change does move scores.
        before = {
            c["name"]: c["score"]
            for c in _debug(support_agent, REFUND, roles=["billing"])["candidates"]
        }
        hidden = [
            tool_body(f"refund_variant_{i}", "Refund the order payment", "billing.refund")
            for i in range(5)
        ]
        admin.ok(admin.put("/admin/v1/tools", {"tools": hidden}))
        after = {
            c["name"]: c["score"]
            for c in _debug(support_agent, REFUND, roles=["billing"])["candidates"]
        }
        assert after["refund_policy"] != before["refund_policy"]
