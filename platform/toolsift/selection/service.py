"""One agent turn: permissions, query, scores, budget, registry order, log."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from uuid import UUID

from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.exceptions import Unresolvable
from sqlalchemy import any_, bindparam, func, insert, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.orm import Session

from ..auth.deps import Principal
from ..embedding.base import EmbeddingBackend, EmbeddingError
from ..errors import Forbidden
from ..models import CorpusStat, SelectionLog, Tool
from ..tools.definitions import Format, render
from ..tools.schemas import TOOL_NAME_PATTERN
from . import bm25, dense
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

    id: UUID
    name: str
    position: int
    token_cost: int
    core: bool


@dataclass(frozen=True)
class Ranked:
    """One candidate after fusion, with the ranks of each component (None: not ranked)."""

    tool_id: UUID
    score: float
    terms: list[str]
    bm25_rank: int | None
    dense_rank: int | None


@dataclass
class _Pick:
    tool: Entry
    reason: str  # core, used or ranked


_ENTRY = "SELECT id, name, position, token_cost, core FROM tools"
_LIVE = "tenant_id = :tenant_id AND deleted_at IS NULL"
_ENTRIES = text(
    f"{_ENTRY} WHERE {_LIVE} AND core"
    f" UNION {_ENTRY} WHERE {_LIVE} AND id = ANY(CAST(:ids AS uuid[]))"
    f" UNION {_ENTRY} WHERE {_LIVE} AND name = ANY(CAST(:names AS text[]))"
)
_UUIDS = ARRAY(PG_UUID(as_uuid=True))


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


class SelectionService:
    def select(
        self,
        session: Session,
        principal: Principal,
        request: SelectRequest,
        embedder: EmbeddingBackend | None = None,
    ) -> SelectResponse:
        started = time.perf_counter()
        roles = resolve_roles(principal, request.roles)
        apply_roles(session, principal, roles)

        query = build_query(request)
        lexical: list[bm25.Scored] = []
        if request.mode != "dense":
            lexical = bm25.score(session, principal.tenant_id, query, limit=CANDIDATE_POOL)
        near: list[dense.Near] = []
        missing: int | None = None
        fusion = dense.Fusion()
        if request.mode != "bm25":
            model, tenant_settings = dense.tenant_embedding(session, principal.tenant_id)
            fusion = dense.Fusion.from_settings(tenant_settings)
            near = self._dense(session, principal.tenant_id, model, query, embedder)
            # Counted against the served model, under RLS: hidden tools are not counted.
            missing = dense.missing(session, principal.tenant_id, model)
        used = used_tools(request)
        ids = list(dict.fromkeys([r.tool_id for r in lexical] + [n.tool_id for n in near]))
        entries = self._entries(session, ids, used)
        ranked = self._rank(request.mode, lexical, near, fusion, entries)
        picks, candidates = self._fill(request, entries, ranked, used, debug=request.debug)
        chosen = sorted(picks, key=lambda p: (p.reason != "core", p.tool.position))
        definitions = self._definitions(session, [p.tool.id for p in chosen], request.format)
        tokens = sum(p.tool.token_cost for p in chosen)
        selection_id = uuid.uuid4()
        ranks = {r.tool_id: r for r in ranked}
        session.execute(
            insert(SelectionLog).values(
                tenant_id=principal.tenant_id,
                id=selection_id,
                key_id=principal.key_id,
                roles=roles,
                mode=request.mode,
                format=request.format,
                query=query,
                k=request.k,
                budget_tokens=request.budget_tokens,
                tool_ids=[p.tool.id for p in chosen],
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
                # The allowed catalog's tokens, from the RLS-filtered statistics buckets.
                catalog_tokens=select(func.coalesce(func.sum(CorpusStat.total_tokens), 0))
                .where(CorpusStat.tenant_id == principal.tenant_id)
                .scalar_subquery(),
                latency_ms=(time.perf_counter() - started) * 1000,
            )
        )
        return SelectResponse(
            selection_id=selection_id,
            mode=request.mode,
            format=request.format,
            tools=[definitions[p.tool.id] for p in chosen],
            tokens=tokens,
            budget_tokens=request.budget_tokens,
            query=query if request.debug else None,
            candidates=candidates if request.debug else None,
            missing_embeddings=missing,
        )

    def _dense(
        self,
        session: Session,
        tenant_id: UUID,
        model: str | None,
        query: str,
        embedder: EmbeddingBackend | None,
    ) -> list[dense.Near]:
        """Nearest vectors of the served model; nothing when it cannot be computed.

        A missing backend, a model other than the tenant's or an embedding failure leaves
        dense out (BM25 still serves in hybrid): a select never fails for want of vectors.
        """
        if embedder is None or model is None or model != embedder.model or not query.strip():
            return []
        try:
            vector = embedder.embed([query])[0]
        except EmbeddingError:
            return []
        return dense.score(session, tenant_id, model, vector, limit=CANDIDATE_POOL)

    def _rank(
        self,
        mode: str,
        lexical: list[bm25.Scored],
        near: list[dense.Near],
        fusion: dense.Fusion,
        entries: dict[UUID, Entry],
    ) -> list[Ranked]:
        """One ranked list for the mode; ties go to registry position, for determinism."""
        bm25_ranks = {s.tool_id: rank for rank, s in enumerate(lexical, start=1)}
        dense_ranks = {n.tool_id: rank for rank, n in enumerate(near, start=1)}
        terms = {s.tool_id: s.terms for s in lexical}
        if mode == "bm25":
            scores = {s.tool_id: s.score for s in lexical}
        elif mode == "dense":
            scores = {n.tool_id: 1.0 - n.distance for n in near}
        else:
            top = lexical[0].score if lexical else 0.0
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

    def _entries(self, session: Session, ids: list[UUID], used: list[str]) -> dict[UUID, Entry]:
        """Core, ranked and used tools, each by its own index (an OR would scan the catalog).

        Arrays, not IN lists: the statement text never changes, so psycopg prepares it once.
        """
        params = {"tenant_id": session.info["tenant_id"], "ids": ids, "names": used}
        return {row.id: Entry(*row) for row in session.execute(_ENTRIES, params)}

    def _definitions(
        self, session: Session, ids: list[UUID], fmt: Format
    ) -> dict[UUID, dict[str, Any]]:
        if not ids:
            return {}
        tools = session.scalars(select(Tool).where(Tool.id == any_(bindparam("ids", ids, _UUIDS))))
        return {t.id: render(t, fmt) for t in tools}

    def _fill(
        self,
        request: SelectRequest,
        tools: dict[UUID, Entry],
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
