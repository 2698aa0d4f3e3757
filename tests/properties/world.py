"""A few random tenants with real catalogs, roles, keys and vectors, and what each caller may see.

The world is built once per test module (embedding is the slow part); hypothesis then draws
callers, requests and hostile text against it. Catalogs come from a seeded `random.Random`, so
a failure names a world that can be rebuilt; what varies per example is the caller and the
request. Names collide on purpose: tenants share tool, role and permission names, with
different grants and descriptions, so a select that crossed a tenant line or mixed up two
same-named roles would show.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from hypothesis import strategies as st
from sqlalchemy import text

from tests.fixtures.factories import PARAMETERS, PEPPER, embed_pending
from toolsift.access.schemas import KeyCreate, PermissionCreate, RoleCreate
from toolsift.access.service import access
from toolsift.auth.deps import Principal
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.tenants.schemas import TenantCreate
from toolsift.tenants.service import tenant as tenant_service
from toolsift.tools.schemas import MAX_TOOL_NAME, ToolCreate
from toolsift.tools.service import tool as tool_service

MODES = ("bm25", "dense", "hybrid")
FORMATS = ("anthropic", "openai", "openai_responses", "mcp", "anthropic_tool_reference")
VERBS = ("get", "list", "create", "update", "delete", "cancel", "refund", "export", "search")
NOUNS = ("order", "invoice", "account", "ticket", "payment", "user", "report", "plan", "stock")
WORDS = (
    "customer", "shipping", "status", "card", "password", "reset", "schedule", "meeting",
    "weather", "forecast", "price", "discount", "subscription", "email", "history", "permanently",
    "refund", "order", "account", "delete", "the", "my", "please", "now", "where", "is",
)  # fmt: skip
PERMISSIONS = ("crm.read", "orders.read", "billing.refund", "admin", "reports.export")
ROLES = ("support", "billing", "ops", "administrator", "viewer", "auditor")
# Text that has broken search engines, SQL and JSON before: quotes, tsquery operators, NUL and
# other control characters, direction overrides, a BOM, combining marks, astral characters.
HOSTILE = (
    "'", '"', "\\", "\x00", "\x1f", "\x7f", "%", "_", "&", "|", "!", ":*", "<->", "(", ")",
    "'; DROP TABLE tools; --", "' OR '1'='1", "\u202e", "\ufeff", "\u0301", "😀", "\U0001d518\U0001d52b\U0001d526", "ß",
    "İ", "ﬁ", "NULL", "*", "$1", "{}", "[]", "\n", "\t", "\r\n", " " * 40, "a" * 300,
    "<script>", "%s%s%n", "${jndi:x}", "∞", "٣", "中文",
)  # fmt: skip


@dataclass(frozen=True)
class ToolFact:
    name: str
    # A word only this tool's description holds: if it shows up in a response (outside the
    # echoed query), this very tool was in it, whatever its name.
    marker: str
    permission: str | None
    core: bool
    deleted: bool
    embedded: bool
    position: int = 0
    # Prompt tokens by format; a tool reference is budgeted as the anthropic definition.
    token_costs: tuple[tuple[str, int], ...] = ()

    def cost(self, fmt: str) -> int:
        costs = dict(self.token_costs)
        return costs.get(fmt, costs["anthropic"])


@dataclass(frozen=True)
class KeyFact:
    key_id: UUID
    secret: str
    roles: frozenset[str]


@dataclass
class TenantWorld:
    index: int
    tenant_id: UUID
    grants: dict[str, frozenset[str]]  # role -> permission names
    keys: list[KeyFact]
    tools: list[ToolFact] = field(default_factory=list)

    def principal(self, key: KeyFact) -> Principal:
        return Principal(self.tenant_id, key.key_id, "agent", key.roles)

    def visible(self, roles: Iterable[str]) -> list[ToolFact]:
        """Live tools that are public or need a permission one of the roles grants."""
        held = set().union(*(self.grants.get(r, frozenset()) for r in roles))
        return [
            t
            for t in self.tools
            if not t.deleted and (t.permission is None or t.permission in held)
        ]


@dataclass
class World:
    tenants: list[TenantWorld]

    @property
    def names(self) -> list[str]:
        return sorted({t.name for w in self.tenants for t in w.tools})

    @property
    def markers(self) -> list[str]:
        return [t.marker for w in self.tenants for t in w.tools]

    @property
    def role_names(self) -> list[str]:
        return sorted({r for w in self.tenants for r in w.grants})


def _catalog(rng: random.Random, index: int, count: int) -> list[ToolFact]:
    names = rng.sample([f"{v}_{n}" for v in VERBS for n in NOUNS], count)
    return [
        ToolFact(
            name=name,
            marker=f"zq{index}m{i:03d}",
            permission=None if rng.random() < 0.4 else rng.choice(PERMISSIONS),
            core=rng.random() < 0.1,
            deleted=False,
            embedded=True,
        )
        for i, name in enumerate(names)
    ]


def _description(tool: ToolFact, rng: random.Random) -> str:
    verb, noun = tool.name.split("_", 1)
    extra = " ".join(rng.sample(WORDS, rng.randint(1, 6)))
    return f"{verb.capitalize()} the {noun}: {extra}. Ref {tool.marker}."


def _upsert(database: Database, tenant_id: UUID, tools: Sequence[ToolFact], seed: int) -> None:
    rng = random.Random(seed)
    items = [
        ToolCreate(
            name=t.name,
            description=_description(t, rng),
            input_schema=PARAMETERS,
            required_permission=t.permission,
            core=t.core,
        )
        for t in tools
    ]
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        tool_service.upsert(session, tenant_id, items)


def _learn(
    database: Database, tenant_id: UUID, tools: Sequence[ToolFact], rng: random.Random
) -> None:
    """A learned query for most tools, as a reported call leaves it (a row and a `learn`
    job), in words that include the tool's own marker: the worker makes them the tool's
    vectors and BM25 words, which must stay behind its permission like the tool."""
    storable = [h for h in HOSTILE if "\x00" not in h]  # as the select's log scrubs them
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        for tool in tools:
            if rng.random() < 0.2:
                continue
            words = [*rng.sample(WORDS, 3), tool.marker, rng.choice(storable)]
            query = " ".join(rng.sample(words, len(words)))
            session.execute(
                text(
                    "INSERT INTO learned_queries"
                    " (tenant_id, tool_id, query_hash, query, required_permission_id, position)"
                    " SELECT t.tenant_id, t.id, sha256(convert_to(:q, 'UTF8')), :q,"
                    " t.required_permission_id, t.position FROM tools t"
                    " WHERE t.tenant_id = :t AND t.name = :name"
                ),
                {"t": tenant_id, "q": query, "name": tool.name},
            )
            session.execute(
                text(
                    "INSERT INTO outbox (tenant_id, id, kind, tool_id, attempts)"
                    " SELECT :t, gen_random_uuid(), 'learn', id, 0 FROM tools"
                    " WHERE tenant_id = :t AND name = :name"
                ),
                {"t": tenant_id, "name": tool.name},
            )


def _call_together(
    database: Database, tenant_id: UUID, tools: Sequence[ToolFact], rng: random.Random
) -> None:
    """Logged selections that called two or three tools each, guarded ones among them, each
    group more than once: hybrid's leads then lift their companions, which must stay behind
    each companion's permission like the tool itself."""
    names = [t.name for t in tools]
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        for _ in range(max(1, len(names) // 3)):
            group = rng.sample(names, rng.randint(2, 3))
            for _ in range(rng.randint(2, 4)):
                session.execute(
                    text(
                        "WITH s AS (INSERT INTO selection_logs (tenant_id, id, key_id, roles,"
                        " mode, format, query, k, budget_tokens, tool_ids, tool_names, details,"
                        " candidate_count, tokens, catalog_tokens, latency_ms)"
                        " VALUES (:t, gen_random_uuid(), NULL, '{}', 'hybrid', 'anthropic',"
                        " 'a task', 5, 4000, '{}', '{}', '[]', 0, 0, 0, 1)"
                        " RETURNING id, created_at)"
                        " INSERT INTO tool_calls (tenant_id, id, selection_id,"
                        " selection_created_at, tool_name, allowed, success)"
                        " SELECT :t, gen_random_uuid(), s.id, s.created_at, n, true, NULL"
                        " FROM s, unnest(CAST(:names AS text[])) n"
                    ),
                    {"t": tenant_id, "names": group},
                )


def build_tenant(database: Database, index: int, *, seed: int, tools: int) -> TenantWorld:
    """Permissions, roles with random grants, keys with random roles, a catalog with vectors,
    learned queries and tools called together, then a few deletions and a few tools written
    after the embedding pass (no vector)."""
    rng = random.Random(seed * 1000 + index)
    with database.unit_of_work(None) as session:
        tenant_id = tenant_service.create(
            session, TenantCreate(name=f"prop-{index}"), pepper=PEPPER
        ).tenant.id
    permissions = rng.sample(PERMISSIONS, rng.randint(2, len(PERMISSIONS)))
    roles = rng.sample(ROLES, rng.randint(3, len(ROLES)))
    grants = {r: frozenset(rng.sample(permissions, rng.randint(0, 2))) for r in roles}
    subsets = [[], *([r] for r in roles), roles, *(rng.sample(roles, 2) for _ in range(2))]
    keys = []
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        for name in permissions:
            access.create_permission(session, tenant_id, PermissionCreate(name=name))
        for role, granted in grants.items():
            access.create_role(
                session, tenant_id, RoleCreate(name=role, permissions=sorted(granted))
            )
        for i, subset in enumerate(subsets):
            key = access.create_key(
                session,
                tenant_id,
                KeyCreate(name=f"agent-{i}", scope="agent", roles=subset),
                pepper=PEPPER,
            )
            keys.append(KeyFact(key.id, key.secret, frozenset(subset)))
    # Tools may only need permissions the tenant defines.
    catalog = [
        t if t.permission in (None, *permissions) else _replace(t, permission=permissions[0])
        for t in _catalog(rng, index, tools + 4)
    ]
    first, late = catalog[:tools], [_replace(t, embedded=False) for t in catalog[tools:]]
    _upsert(database, tenant_id, first, seed=index)
    _learn(database, tenant_id, first, rng)
    _call_together(database, tenant_id, first, rng)
    embed_pending(database, tenant_id)
    _upsert(database, tenant_id, late, seed=index + 100)
    doomed = {t.name for t in rng.sample(first, 3)}
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        rows = {
            r.name: r
            for r in session.execute(
                text(
                    "SELECT id, name, position, token_cost, openai_token_cost, mcp_token_cost,"
                    " openai_responses_token_cost FROM tools WHERE tenant_id = :t"
                ),
                {"t": tenant_id},
            )
        }
        for name in doomed:
            tool_service.delete(session, rows[name].id)
    facts = [
        _replace(
            t,
            deleted=t.name in doomed,
            position=rows[t.name].position,
            token_costs=(
                ("anthropic", rows[t.name].token_cost),
                ("openai", rows[t.name].openai_token_cost),
                ("mcp", rows[t.name].mcp_token_cost),
                ("openai_responses", rows[t.name].openai_responses_token_cost),
            ),
        )
        for t in first + late
    ]
    return TenantWorld(index, tenant_id, grants, keys, facts)


def _replace(tool: ToolFact, **changes: Any) -> ToolFact:
    return ToolFact(**{**tool.__dict__, **changes})


def build_world(database: Database, *, tenants: int, tools: int, seed: int) -> World:
    return World([build_tenant(database, i, seed=seed, tools=tools) for i in range(tenants)])


# --- what hypothesis draws -------------------------------------------------------------------


def _fits_a_name(name: str) -> bool:
    return len(name) <= MAX_TOOL_NAME


def requests(world: World, mode: str) -> st.SearchStrategy[dict[str, Any]]:
    """A select body: chat history naming tools of every tenant, hostile text, any k and budget."""
    names = st.sampled_from([*world.names, "", "x" * 65, "a b", "order_status'--", "ÿ"])
    words = st.sampled_from([*WORDS, *world.names, *world.markers, *HOSTILE])
    phrase = st.one_of(
        st.lists(words, max_size=12).map(" ".join),
        st.text(max_size=80),
        st.text(st.characters(codec="utf-8"), max_size=20),
    )
    content = st.one_of(
        phrase,
        st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": phrase}), max_size=3),
    )
    user = st.fixed_dictionaries({"role": st.just("user"), "content": content})
    assistant = st.fixed_dictionaries(
        {
            "role": st.just("assistant"),
            "content": st.lists(
                st.fixed_dictionaries(
                    {"type": st.just("tool_use"), "id": st.just("tu"), "name": names}
                ),
                max_size=3,
            ),
            "tool_calls": st.lists(
                st.builds(
                    lambda n: {"id": "c", "type": "function", "function": {"name": n}}, names
                ),
                max_size=2,
            ),
        }
    )
    # A Responses API item (a call by name, or its output), or a Gemini turn's call parts.
    item = st.one_of(
        st.builds(lambda n: {"type": "function_call", "call_id": "c", "name": n}, names),
        st.builds(lambda t: {"type": "function_call_output", "call_id": "c", "output": t}, phrase),
        st.builds(
            lambda calls: {
                "role": "model",
                "parts": [{"functionCall": {"name": n}} for n in calls],
            },
            st.lists(names, max_size=2),
        ),
    )
    return st.fixed_dictionaries(
        {
            "messages": st.lists(st.one_of(user, assistant, item), min_size=1, max_size=4),
            "task": st.fixed_dictionaries(
                # A recent tool longer than any name is a 422 (`selection.schemas.RecentTool`).
                {"plan": phrase, "recent_tools": st.lists(names.filter(_fits_a_name), max_size=4)}
            ),
            "k": st.integers(1, 50),
            "budget_tokens": st.one_of(st.integers(1, 400), st.integers(1, 200_000)),
            "mode": st.just(mode),
            "format": st.sampled_from(FORMATS),
            "debug": st.booleans(),
        }
    )


@dataclass(frozen=True)
class Caller:
    tenant: TenantWorld
    key: KeyFact
    roles: list[str] | None  # asserted; None: all the key's roles


def callers(world: World) -> st.SearchStrategy[Caller]:
    """Any key of any tenant, acting as all its roles, some of them, or roles it lacks."""

    def for_key(tenant: TenantWorld, key: KeyFact) -> st.SearchStrategy[Caller]:
        granted = sorted(key.roles)
        asserted = st.one_of(
            st.none(),
            st.lists(st.sampled_from(granted), max_size=3) if granted else st.just([]),
            st.lists(st.sampled_from([*world.role_names, "ghost"]), min_size=1, max_size=3),
        )
        return asserted.map(lambda roles: Caller(tenant, key, roles))

    pairs = [(t, k) for t in world.tenants for k in t.keys]
    return st.sampled_from(pairs).flatmap(lambda pair: for_key(*pair))


# --- what must hold --------------------------------------------------------------------------


def tool_name(definition: dict[str, Any]) -> str:
    if "function" in definition:
        return str(definition["function"]["name"])
    return str(definition.get("name") or definition["tool_name"])


def used_names(body: dict[str, Any]) -> set[str]:
    names = set(body["task"]["recent_tools"])
    for message in body["messages"]:
        if isinstance(message.get("content"), list):
            names |= {b["name"] for b in message["content"] if b.get("type") == "tool_use"}
        names |= {c["function"]["name"] for c in message.get("tool_calls", [])}
        if message.get("type") == "function_call":
            names.add(message["name"])
        names |= {p["functionCall"]["name"] for p in message.get("parts", [])}
    return names


def check_error(world: World, caller: Caller, status: int, error: dict[str, Any]) -> None:
    """The only refusal a well-formed select gets: a role the key was not granted (403)."""
    asserted = caller.roles or []
    lacking = [i for i, r in enumerate(asserted) if r not in caller.key.roles]
    assert lacking, f"refused although every asserted role is granted: {status} {error}"
    assert (status, error["code"], error["field"]) == (403, "forbidden", f"roles[{lacking[0]}]")
    shown = json.dumps(error, ensure_ascii=False)
    assert not [m for m in world.markers if m in shown], shown


def check_selection(
    world: World, caller: Caller, request: dict[str, Any], response: dict[str, Any]
) -> None:
    """Nothing foreign or forbidden anywhere in the answer, and the answer obeys its rules."""
    asserted = caller.roles
    lacking = [r for r in asserted or [] if r not in caller.key.roles]
    assert not lacking, f"acted in roles {lacking} the key was never granted"
    visible = caller.tenant.visible(caller.key.roles if asserted is None else asserted)
    by_name = {t.name: t for t in visible}
    hidden = set(world.markers) - {t.marker for t in visible}
    # The query is the caller's own text echoed back: it may name anything.
    shown = json.dumps({k: v for k, v in response.items() if k != "query"}, ensure_ascii=False)
    leaked = [m for m in hidden if m in shown]
    assert not leaked, f"hidden tools' markers {leaked} in the answer"

    names = [tool_name(t) for t in response["tools"]]
    assert len(names) == len(set(names)), f"a tool twice: {names}"
    assert set(names) <= set(by_name), f"not visible to this caller: {set(names) - set(by_name)}"
    chosen = [by_name[n] for n in names]
    core = [t for t in visible if t.core]
    assert [t for t in chosen if t.core] == sorted(core, key=lambda t: t.position)
    assert chosen == [
        *sorted(core, key=lambda t: t.position),
        *sorted((t for t in chosen if not t.core), key=lambda t: t.position),
    ], "not core first, then registry order"
    fmt = request["format"]
    assert response["tokens"] == sum(t.cost(fmt) for t in chosen)
    core_cost = sum(t.cost(fmt) for t in core)
    assert response["tokens"] <= max(request["budget_tokens"], core_cost)
    used = used_names(request) & set(by_name)
    assert len([t for t in chosen if not t.core and t.name not in used]) <= request["k"]

    if request["mode"] == "bm25":
        assert "missing_embeddings" not in response
    else:
        assert response["missing_embeddings"] == sum(not t.embedded for t in visible)
    if request["debug"]:
        candidates = [c["name"] for c in response["candidates"]]
        assert len(candidates) == len(set(candidates))
        assert set(candidates) <= set(by_name)
    else:
        assert "candidates" not in response
        assert "query" not in response
