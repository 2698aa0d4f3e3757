"""Learning from usage: the queries a tool was called for become more vectors of the tool,
and more words of its BM25 document.

A reported call (`POST /v1/tool-calls`) of a live tool the caller may use stores its
selection's query once per tool and query, with an outbox job of kind `learn` in the same
transaction; the embed task computes the query's vector under the model it runs and indexes
the tool's words again; the select ranks a tool by the nearest of its own vector and these
(`toolsift_select`, `near`), and BM25 counts their words (`lexical.analysis.LEARNED_WEIGHT`).
Users' words for a tool thus reach it even where its description never says them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import Row, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.orm import Session

from .base import vector_literal

LEARN = "learn"
#: The most recent distinct queries kept per tool: enough to cover the ways a tool is asked
#: for, few enough that the select's scan over them stays a fraction of the catalog's.
KEPT_PER_TOOL = 32

_UUIDS = ARRAY(PG_UUID(as_uuid=True))

# The permissions the selection acted with, less any role the key has lost since: a tool
# the caller could not be offered then, or may not use now, is not learned (RLS hides it).
_ACT_AS_SELECTED = text(
    """
    SELECT toolsift_apply_roles(s.tenant_id, ARRAY(
               SELECT r.name FROM api_key_roles kr
                 JOIN roles r ON r.tenant_id = kr.tenant_id AND r.id = kr.role_id
                WHERE kr.tenant_id = s.tenant_id AND kr.key_id = s.key_id
                  AND r.name = ANY (s.roles)))
      FROM selection_logs s
     WHERE s.tenant_id = :tenant_id AND s.id = :selection_id AND s.created_at = :created_at
    """
)
# A repeat of a query counts and keeps its vector; a new one has none until the worker's job.
_RECORD = text(
    """
    INSERT INTO learned_queries AS q
        (tenant_id, tool_id, query_hash, query, required_permission_id, position)
    SELECT t.tenant_id, t.id, sha256(convert_to(s.query, 'UTF8')), s.query,
           t.required_permission_id, t.position
      FROM selection_logs s
      JOIN tools t ON t.tenant_id = s.tenant_id AND t.name = :tool AND t.deleted_at IS NULL
     WHERE s.tenant_id = :tenant_id AND s.id = :selection_id AND s.created_at = :created_at
       AND btrim(s.query) <> ''
    ON CONFLICT (tenant_id, tool_id, query_hash) DO UPDATE
    SET calls = q.calls + 1, last_called_at = now()
    RETURNING q.tool_id, q.embedding IS NULL AS unembedded
    """
)
_ENQUEUE = text(
    "INSERT INTO outbox (tenant_id, id, kind, tool_id, attempts)"
    " VALUES (:tenant_id, :id, :kind, :tool_id, 0)"
)


def record(
    session: Session, tenant_id: UUID, selection_id: UUID, created_at: datetime, tool: str
) -> bool:
    """Learn the selection's query for `tool`; whether a row was stored or counted.

    It narrows the transaction's permissions to the selection's: call it last.
    """
    selection = {"tenant_id": tenant_id, "selection_id": selection_id, "created_at": created_at}
    session.execute(_ACT_AS_SELECTED, selection)
    row = session.execute(_RECORD, {**selection, "tool": tool}).first()
    if row is None:
        return False
    if row.unembedded:
        session.execute(
            _ENQUEUE,
            {"tenant_id": tenant_id, "id": uuid.uuid4(), "kind": LEARN, "tool_id": row.tool_id},
        )
    return True


_PENDING = text(
    """
    SELECT q.tool_id, q.query_hash, q.query
      FROM learned_queries q
     WHERE q.tenant_id = :tenant_id AND q.tool_id = ANY(:tools)
       AND (q.embedding IS NULL OR q.model IS DISTINCT FROM :model)
     ORDER BY q.position, q.query_hash
    """
).bindparams(bindparam("tools", type_=_UUIDS))
# Only over the row as it was read: a query counted again meanwhile keeps its count.
_STORE = text(
    """
    UPDATE learned_queries q SET model = :model, embedding = CAST(v.embedding AS vector)
      FROM unnest(CAST(:tools AS uuid[]), CAST(:hashes AS bytea[]), CAST(:vectors AS text[]))
           AS v(tool_id, query_hash, embedding)
     WHERE q.tenant_id = :tenant_id AND q.tool_id = v.tool_id AND q.query_hash = v.query_hash
    """
)
_DROP = text(
    """
    DELETE FROM learned_queries q
     USING unnest(CAST(:tools AS uuid[]), CAST(:hashes AS bytea[])) AS v(tool_id, query_hash)
     WHERE q.tenant_id = :tenant_id AND q.tool_id = v.tool_id AND q.query_hash = v.query_hash
    """
)
# The oldest queries of the tools just learned beyond `KEPT_PER_TOOL`.
_TRIM = text(
    """
    DELETE FROM learned_queries q
     USING (SELECT tool_id, query_hash,
                   row_number() OVER (PARTITION BY tool_id
                                      ORDER BY last_called_at DESC, query_hash) AS n
              FROM learned_queries
             WHERE tenant_id = :tenant_id AND tool_id = ANY(:tools)) old
     WHERE q.tenant_id = :tenant_id AND q.tool_id = old.tool_id
       AND q.query_hash = old.query_hash AND old.n > :kept
    """
).bindparams(bindparam("tools", type_=_UUIDS))


_LEARNERS = text(
    "SELECT DISTINCT o.tool_id FROM outbox o"
    " WHERE o.tenant_id = :tenant_id AND o.id = ANY(:jobs) AND o.kind = :kind"
).bindparams(bindparam("jobs", type_=_UUIDS))


def learners(session: Session, tenant_id: UUID, jobs: Sequence[UUID]) -> list[UUID]:
    """The tools of the `learn` jobs among `jobs`: their learned queries changed (learned,
    trimmed or forgotten), so their BM25 words must follow (`lexical.index.relearn`)."""
    return list(
        session.scalars(_LEARNERS, {"tenant_id": tenant_id, "jobs": list(jobs), "kind": LEARN})
    )


def pending(
    session: Session, tenant_id: UUID, learners: Sequence[UUID], model: str
) -> list[Row[Any]]:
    """The learned queries of `learners` (the tools of `learn` jobs) that need a vector of
    `model`."""
    return list(
        session.execute(
            _PENDING, {"tenant_id": tenant_id, "tools": list(learners), "model": model}
        ).all()
    )


def store(
    session: Session,
    tenant_id: UUID,
    model: str,
    rows: Sequence[Row[Any]],
    vectors: Sequence[list[float] | None],
) -> int:
    """Write the vectors computed for `rows`; a query the model refused is forgotten (the
    tool keeps its own vector). Returns how many were stored."""
    kept = [(r, v) for r, v in zip(rows, vectors, strict=True) if v is not None]
    refused = [r for r, v in zip(rows, vectors, strict=True) if v is None]
    if kept:
        session.execute(
            _STORE,
            {
                "tenant_id": tenant_id,
                "model": model,
                "tools": [r.tool_id for r, _ in kept],
                "hashes": [r.query_hash for r, _ in kept],
                "vectors": [vector_literal(v) for _, v in kept],
            },
        )
    if refused:
        session.execute(
            _DROP,
            {
                "tenant_id": tenant_id,
                "tools": [r.tool_id for r in refused],
                "hashes": [r.query_hash for r in refused],
            },
        )
    if rows:
        session.execute(
            _TRIM,
            {
                "tenant_id": tenant_id,
                "tools": sorted({r.tool_id for r in rows}),
                "kept": KEPT_PER_TOOL,
            },
        )
    return len(kept)


def texts(rows: Sequence[Row[Any]]) -> list[str]:
    """What is embedded for each learned query: the query as the select saw it."""
    return [r.query for r in rows]
