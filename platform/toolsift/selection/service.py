"""One agent turn: permissions, query, scores, budget, registry order, log."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.exceptions import Unresolvable
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ..auth.deps import AgentKey, Principal
from ..db import Database
from ..embedding.base import EmbeddingBackend, EmbeddingError
from ..errors import Forbidden, Unauthenticated
from ..lexical.analysis import TEXT_SEARCH_CONFIG
from ..models import Tool
from ..tools.definitions import Format, render
from ..tools.schemas import TOOL_NAME_PATTERN
from . import bm25, dense, statements
from .query import build_query, used_tools
from .schemas import (
    AuthorizeRequest,
    AuthorizeResponse,
    Candidate,
    SelectRequest,
    SelectResponse,
)

_TOOL_NAME = re.compile(TOOL_NAME_PATTERN)

# Ranked candidates considered for the budget: enough to skip big ones and try smaller ones.
CANDIDATE_POOL = 100

# Read the roles' grants and narrow this transaction to them, in one round trip.
_APPLY_ROLES = text(
    """
    SELECT set_config('app.permissions', coalesce(string_agg(DISTINCT rp.permission_id::text, ','), ''), true)
    FROM role_permissions rp JOIN roles r ON r.tenant_id = rp.tenant_id AND r.id = rp.role_id
    WHERE r.tenant_id = :tenant_id AND r.name = ANY(CAST(:roles AS text[]))
    """
)


class Entry(NamedTuple):
    """What the budget needs of a tool; full definitions are read for the winners only."""

    id: str
    name: str
    position: int
    token_cost: int
    core: bool


class Ranked(NamedTuple):
    """One candidate after fusion, with the ranks of each component (None: not ranked)."""

    tool_id: str
    score: float
    terms: list[str]
    bm25_rank: int | None
    dense_rank: int | None


@dataclass
class _Pick:
    tool: Entry
    reason: str  # core, used or ranked


def resolve_roles(principal: Principal, asserted: Sequence[str] | None) -> list[str]:
    """An agent key acts only in roles it was granted; default: all of them."""
    if asserted is None:
        return sorted(principal.roles)
    for index, role in enumerate(asserted):
        if role not in principal.roles:
            raise Forbidden(f"role {role!r} is not granted to this key", field=f"roles[{index}]")
    return sorted(set(asserted))


def apply_roles(session: Session, principal: Principal, roles: Sequence[str]) -> None:
    """From here on, RLS shows this transaction public tools and those the roles allow."""
    permissions = session.execute(
        _APPLY_ROLES, {"tenant_id": principal.tenant_id, "roles": list(roles)}
    ).scalar_one()
    session.info["permissions"] = permissions


@dataclass(frozen=True)
class _Scope:
    """How the first statement scopes the transaction, and who the caller turns out to be."""

    tenant_id: UUID
    statement: str
    params: dict[str, Any]
    principal: Principal | None  # known up front (a session path), else from the key check
    key: AgentKey | None


class SelectionService:
    def serve(
        self,
        database: Database,
        key: AgentKey,
        request: SelectRequest,
        embedder: EmbeddingBackend | None = None,
        admit: Callable[[Principal], None] | None = None,
    ) -> SelectResponse:
        """The HTTP hot path: key check, scope, scores and log in three round trips.

        `admit` runs once the key is known good and before anything is written (the rate
        limit); raising there rolls the select back.
        """
        scope = _Scope(
            key.tenant_id,
            statements.AGENT_SCOPE,
            {
                "tenant_id": key.tenant_id,
                "key_id": key.key_id,
                "key_hash": key.key_hash,
                "roles": request.roles,
            },
            None,
            key,
        )
        with database.pipelined() as conn:
            return self._select(conn, scope, request, embedder, admit)

    def select(
        self,
        session: Session,
        principal: Principal,
        request: SelectRequest,
        embedder: EmbeddingBackend | None = None,
    ) -> SelectResponse:
        """The same select in a caller's unit of work (MCP, in-process measurements)."""
        roles = resolve_roles(principal, request.roles)
        scope = _Scope(
            principal.tenant_id,
            statements.APPLY_ROLES,
            {"tenant_id": principal.tenant_id, "roles": roles},
            principal,
            None,
        )
        conn = session.connection().connection.driver_connection
        assert isinstance(conn, psycopg.Connection)
        return self._select(conn, scope, request, embedder, None)

    def _select(
        self,
        conn: statements.Connection,
        scope: _Scope,
        request: SelectRequest,
        embedder: EmbeddingBackend | None,
        admit: Callable[[Principal], None] | None,
    ) -> SelectResponse:
        started = time.perf_counter()
        tenant_id = scope.tenant_id
        query = build_query(request)
        used = used_tools(request)
        vector = self._embed(request.mode, query, embedder)
        params: dict[str, Any] = {
            "tenant_id": tenant_id,
            "query": query,
            "config": TEXT_SEARCH_CONFIG,
            "k1": bm25.K1,
            "b": bm25.B,
            "limit": CANDIDATE_POOL,
            "names": used,
        }
        try:
            with conn.pipeline():
                # All queued, one round trip: nothing below depends on another's result.
                scoped = conn.execute(scope.statement, scope.params)
                tenant = conn.execute(statements.TENANT, params) if request.mode != "bm25" else None
                lexical_rows = (
                    conn.execute(statements.BM25, params)
                    if request.mode != "dense" and query.strip()
                    else None
                )
                dense_rows = None
                if vector is not None and embedder is not None:
                    literal = "[" + ",".join(repr(float(x)) for x in vector) + "]"
                    dense_rows = conn.execute(
                        statements.DENSE, {**params, "query": literal, "model": embedder.model}
                    )
                missing_rows = (
                    conn.execute(statements.MISSING, params) if request.mode != "bm25" else None
                )
                entry_rows = conn.execute(statements.ENTRIES, params)
                row = scoped.fetchone()
        except psycopg.Error as error:
            # The scope statement's refusals; the statements behind it never ran.
            if error.sqlstate == statements.BAD_KEY:
                raise Unauthenticated("invalid or revoked API key") from None
            if error.sqlstate == statements.NOT_AGENT:
                raise Forbidden("this endpoint needs an agent key") from None
            raise
        principal, roles = self._principal(scope, row, request)
        if admit is not None:
            admit(principal)

        entries: dict[str, Entry] = {}
        # (tool id, score, matched terms), best first, as the statement ordered them.
        lexical: list[tuple[str, float, list[str]]] = []
        for tool_id, score, terms, *entry in lexical_rows.fetchall() if lexical_rows else ():
            lexical.append((tool_id, score, terms))
            entries[tool_id] = Entry(tool_id, *entry)
        fusion = dense.Fusion()
        near: list[tuple[str, float]] = []
        missing: int | None = None
        if tenant is not None and missing_rows is not None:
            model, tenant_settings = tenant.fetchone() or (None, {})
            fusion = dense.Fusion.from_settings(tenant_settings)
            # Counted against the served model, under RLS: hidden tools are not counted.
            missing = int(missing_rows.fetchone()[0])  # type: ignore[index]
            # Vectors of another model than the tenant serves never mix in (a switch is on).
            if dense_rows is not None and embedder is not None and model == embedder.model:
                for tool_id, distance, *entry in dense_rows.fetchall():
                    near.append((tool_id, float(distance)))
                    entries.setdefault(tool_id, Entry(tool_id, *entry))
        for entry_row in entry_rows.fetchall():
            entries.setdefault(entry_row[0], Entry(*entry_row))

        ranked = self._rank(request.mode, lexical, near, fusion, entries)
        picks, candidates = self._fill(request, entries, ranked, used, debug=request.debug)
        chosen = sorted(picks, key=lambda p: (p.reason != "core", p.tool.position))
        tokens = sum(p.tool.token_cost for p in chosen)
        selection_id = uuid.uuid4()
        ranks = {r.tool_id: r for r in ranked}
        ids = [p.tool.id for p in chosen]
        with conn.pipeline():
            statements.write_log(
                conn,
                statements.LogRow(
                    tenant_id=tenant_id,
                    id=selection_id,
                    key_id=principal.key_id,
                    roles=roles,
                    mode=request.mode,
                    format=request.format,
                    query=query,
                    k=request.k,
                    budget_tokens=request.budget_tokens,
                    tool_ids=ids,
                    tool_names=[p.tool.name for p in chosen],
                    details=[
                        {
                            "name": p.tool.name,
                            "reason": p.reason,
                            "bm25_rank": r.bm25_rank if (r := ranks.get(p.tool.id)) else None,
                            "dense_rank": r.dense_rank if r else None,
                        }
                        for p in chosen
                    ],
                    candidate_count=len(ranked),
                    tokens=tokens,
                    latency_ms=(time.perf_counter() - started) * 1000,
                ),
            )
            definitions = self._definitions(conn, tenant_id, ids, request.format)
        return SelectResponse(
            selection_id=selection_id,
            mode=request.mode,
            format=request.format,
            tools=[definitions[i] for i in ids],
            tokens=tokens,
            budget_tokens=request.budget_tokens,
            query=query if request.debug else None,
            candidates=candidates if request.debug else None,
            missing_embeddings=missing,
        )

    def _principal(
        self, scope: _Scope, row: tuple[Any, ...] | None, request: SelectRequest
    ) -> tuple[Principal, list[str]]:
        """Who is calling, and in which roles (asserted ones must have been granted)."""
        if scope.principal is not None:
            return scope.principal, list(scope.params["roles"])
        assert scope.key is not None
        assert row is not None
        principal = Principal(scope.key.tenant_id, scope.key.key_id, "agent", frozenset(row[0]))
        return principal, resolve_roles(principal, request.roles)

    def _embed(
        self, mode: str, query: str, embedder: EmbeddingBackend | None
    ) -> list[float] | None:
        """The query vector; None when it cannot be computed.

        A missing backend or an embedding failure leaves dense out (BM25 still serves in
        hybrid): a select never fails for want of vectors.
        """
        if mode == "bm25" or embedder is None or not query.strip():
            return None
        try:
            return embedder.embed([query])[0]
        except EmbeddingError:
            return None

    def _rank(
        self,
        mode: str,
        lexical: list[tuple[str, float, list[str]]],
        near: list[tuple[str, float]],
        fusion: dense.Fusion,
        entries: dict[str, Entry],
    ) -> list[Ranked]:
        """One ranked list for the mode; ties go to registry position, for determinism."""
        if mode == "bm25":
            # Already in this order (score descending, then position) from the statement.
            return [Ranked(i, s, t, rank, None) for rank, (i, s, t) in enumerate(lexical, 1)]
        bm25_ranks = {i: rank for rank, (i, _, _) in enumerate(lexical, start=1)}
        dense_ranks = {i: rank for rank, (i, _) in enumerate(near, start=1)}
        terms = {i: t for i, _, t in lexical}
        if mode == "dense":
            scores = {i: 1.0 - distance for i, distance in near}
        else:
            top = lexical[0][1] if lexical else 0.0
            scores = dense.fuse(list(bm25_ranks), list(dense_ranks), fusion, bm25_top=top)
        far = 2**63
        order = sorted(
            scores,
            key=lambda i: (-scores[i], entries[i].position if i in entries else far),
        )
        return [
            Ranked(i, scores[i], terms.get(i, []), bm25_ranks.get(i), dense_ranks.get(i))
            for i in order
        ]

    def _definitions(
        self, conn: statements.Connection, tenant_id: UUID, ids: list[str], fmt: Format
    ) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        rows = conn.execute(statements.DEFINITIONS, {"tenant_id": tenant_id, "ids": ids}).fetchall()
        return {
            row[0]: render(
                Tool(
                    name=row[1],
                    title=row[2],
                    description=row[3],
                    input_schema=row[4],
                    output_schema=row[5],
                    annotations=row[6],
                ),
                fmt,
            )
            for row in rows
        }

    def _fill(
        self,
        request: SelectRequest,
        tools: dict[str, Entry],
        ranked: list[Ranked],
        used: list[str],
        *,
        debug: bool,
    ) -> tuple[list[_Pick], list[Candidate]]:
        """Core tools always; then used tools, then ranked ones, while the budget holds.

        A tool that does not fit is skipped and smaller ones are still tried.
        """
        picks = [
            _Pick(t, "core") for t in sorted(tools.values(), key=lambda t: t.position) if t.core
        ]
        spent = sum(p.tool.token_cost for p in picks)
        taken = {p.tool.id for p in picks}
        by_name = {t.name: t for t in tools.values()}
        for name in used:
            tool = by_name.get(name)
            if tool and tool.id not in taken and spent + tool.token_cost <= request.budget_tokens:
                picks.append(_Pick(tool, "used"))
                spent += tool.token_cost
                taken.add(tool.id)
        candidates: list[Candidate] = []
        added = 0
        for rank, scored in enumerate(ranked, start=1):
            tool = tools.get(scored.tool_id)
            if tool is None:
                continue
            reason = "selected"
            if tool.id in taken:
                reason = "core" if tool.core else "used"
            elif added >= request.k:
                reason = "beyond_k"
            elif spent + tool.token_cost > request.budget_tokens:
                reason = "over_budget"
            else:
                picks.append(_Pick(tool, "ranked"))
                spent += tool.token_cost
                taken.add(tool.id)
                added += 1
            if not debug:
                if added >= request.k:
                    break
                continue
            candidates.append(
                Candidate(
                    name=tool.name,
                    rank=rank,
                    score=scored.score,
                    matched_terms=scored.terms,
                    bm25_rank=scored.bm25_rank,
                    dense_rank=scored.dense_rank,
                    selected=tool.id in taken,
                    reason=reason,
                )
            )
        return picks, candidates

    def authorize(
        self, session: Session, principal: Principal, request: AuthorizeRequest
    ) -> AuthorizeResponse:
        """Selection narrows the menu; this is the check at execution time."""
        roles = resolve_roles(principal, request.roles)
        apply_roles(session, principal, roles)
        tool = None
        if _TOOL_NAME.fullmatch(request.tool):
            tool = session.scalar(
                select(Tool).where(Tool.name == request.tool, Tool.deleted_at.is_(None))
            )
        if tool is None:
            # Unknown and forbidden read the same: the answer never confirms a hidden tool.
            return AuthorizeResponse(allowed=False, reason="no such tool for this caller")
        if request.arguments is not None:
            # An empty registry: a `$ref` is never fetched, whatever the schema says.
            validator = Draft202012Validator(tool.input_schema, registry=Registry())
            try:
                errors = sorted(
                    f"{'/'.join(str(p) for p in e.path) or '(root)'}: {e.message}"
                    for e in validator.iter_errors(request.arguments)
                )
            except Unresolvable:
                errors = ["(schema): the tool's input schema has an unresolvable $ref"]
            if errors:
                return AuthorizeResponse(
                    allowed=False, reason="arguments do not match the input schema", errors=errors
                )
        return AuthorizeResponse(allowed=True, reason="allowed")


selection = SelectionService()
