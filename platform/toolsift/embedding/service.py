"""Keeping vectors in step with tools.

A tool write adds an outbox job in its own transaction; the relay publishes jobs; the embed
task computes vectors outside any transaction and writes them only if the tool is still at
the version it embedded. A vector therefore never claims a version its tool no longer has,
and a lost message or a killed worker only delays the work: the job stays in the outbox
until a task has finished it.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import CursorResult, Result, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.orm import Session

from ..db import ALL_PERMISSIONS, Database
from ..lexical import index as lexical_index
from ..lexical.analysis import split_identifier
from ..models import Tool
from ..security import audit
from . import learning
from .base import EmbeddingBackend, EmbeddingError, EmbeddingUnavailable, vector_literal

_log = logging.getLogger(__name__)

EMBED = "embed"
# Recompute even when a vector of the current version exists (`toolsift reindex --force`).
REEMBED = "reembed"

_UUIDS = ARRAY(PG_UUID(as_uuid=True))


def document_text(
    name: str, title: str | None, description: str, schema: dict[str, Any], examples: list[str]
) -> str:
    """What the model reads of a tool: `name (title): description. Parameters: ...`.

    Words first, since long inputs are truncated. The name and title head the text as a
    label of what follows (MiniLM ranked the tool's meaning better so: docs/quality.md).
    """
    parameters = schema.get("properties")
    head = split_identifier(name).strip()
    if title and title.strip():
        head += f" ({title.strip()})"
    parts = [description]
    if isinstance(parameters, dict) and parameters:
        parts.append("Parameters: " + ", ".join(split_identifier(str(p)) for p in parameters))
    if examples:
        parts.append("Examples: " + "; ".join(examples))
    body = ". ".join(p.strip().rstrip(".") for p in parts if p.strip())
    return f"{head}: {body}" if body else head


def text_hash(document: str) -> bytes:
    """The digest a vector keeps of its text: the same text under the same model is the same
    vector, whatever else of the tool changed."""
    return hashlib.sha256(document.encode()).digest()


# --- in the tool's transaction ---------------------------------------------------------------


def enqueue(session: Session, tenant_id: UUID, tools: Iterable[Tool], *, kind: str = EMBED) -> int:
    """One job per tool version; commits (or not) with the write that needs it."""
    rows = [
        {
            "tenant_id": tenant_id,
            "id": uuid.uuid4(),
            "kind": kind,
            "tool_id": t.id,
            "version": t.version,
        }
        for t in tools
    ]
    if rows:
        session.execute(
            text(
                "INSERT INTO outbox (tenant_id, id, kind, tool_id, version, attempts)"
                " VALUES (:tenant_id, :id, :kind, :tool_id, :version, 0)"
            ),
            rows,
        )
    return len(rows)


def follow(session: Session, tool_ids: Sequence[UUID]) -> None:
    """Vectors take their tool's new permission at once, before any re-embedding.

    Row-level security filters vectors by this copy: a tool made restricted must not stay
    public through its old vector for the seconds until the worker catches up.
    """
    if tool_ids:
        session.execute(
            text(
                """
                UPDATE tool_embeddings e SET required_permission_id = t.required_permission_id
                FROM tools t
                WHERE t.tenant_id = e.tenant_id AND t.id = e.tool_id
                  AND e.tenant_id = :tenant_id AND e.tool_id = ANY(:ids)
                  AND e.required_permission_id IS DISTINCT FROM t.required_permission_id
                """
            ).bindparams(bindparam("ids", type_=_UUIDS)),
            {"tenant_id": session.info["tenant_id"], "ids": list(tool_ids)},
        )
        session.execute(
            text(
                """
                UPDATE learned_queries q SET required_permission_id = t.required_permission_id
                FROM tools t
                WHERE t.tenant_id = q.tenant_id AND t.id = q.tool_id
                  AND q.tenant_id = :tenant_id AND q.tool_id = ANY(:ids)
                  AND q.required_permission_id IS DISTINCT FROM t.required_permission_id
                """
            ).bindparams(bindparam("ids", type_=_UUIDS)),
            {"tenant_id": session.info["tenant_id"], "ids": list(tool_ids)},
        )


_FORGET = tuple(
    text(statement).bindparams(bindparam("ids", type_=_UUIDS))
    for statement in (
        "DELETE FROM tool_embeddings WHERE tenant_id = :tenant_id AND tool_id = ANY(:ids)",
        "DELETE FROM learned_queries WHERE tenant_id = :tenant_id AND tool_id = ANY(:ids)",
    )
)


def forget(session: Session, tool_ids: Sequence[UUID]) -> None:
    """A deleted tool's vectors go with it, its learned queries too (a name deleted and
    created again may be another tool); a restored tool is a new version, embedded anew."""
    if tool_ids:
        for statement in _FORGET:
            session.execute(
                statement, {"tenant_id": session.info["tenant_id"], "ids": list(tool_ids)}
            )


# --- the relay -------------------------------------------------------------------------------

_CLAIM = text(
    """
    UPDATE outbox o SET published_at = now(), attempts = o.attempts + 1
    FROM (
        SELECT tenant_id, id FROM outbox
        WHERE published_at IS NULL
           OR published_at < now() - make_interval(secs => :lease)
        ORDER BY created_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ) due
    WHERE o.tenant_id = due.tenant_id AND o.id = due.id
    RETURNING o.tenant_id, o.id
    """
)

Publish = Callable[[UUID, list[UUID]], None]


def relay(
    database: Database,
    publish: Publish,
    *,
    lease_seconds: float,
    batch_tools: int,
    limit: int = 10_000,
) -> int:
    """Publish due jobs in batches per tenant; returns how many jobs were published.

    Claiming and publishing share one transaction: if the broker is down, publish raises,
    the claim rolls back and the jobs wait for the next run. A crash after publishing but
    before commit publishes them twice, which the idempotent task absorbs.
    """
    with database.unit_of_work(None) as session:
        session.execute(text("SELECT set_config('app.relay', 'on', true)"))
        claimed = session.execute(_CLAIM, {"lease": lease_seconds, "limit": limit}).all()
        by_tenant: dict[UUID, list[UUID]] = defaultdict(list)
        for tenant_id, job_id in claimed:
            by_tenant[tenant_id].append(job_id)
        for tenant_id, jobs in sorted(by_tenant.items()):
            start = 0
            for size in task_sizes(len(jobs), batch_tools):
                publish(tenant_id, jobs[start : start + size])
                start += size
    return len(claimed)


# A tenant's claim is cut into about _SPREAD even tasks, none larger than `batch_tools`,
# and a claim of up to _FEWEST_TASK_TOOLS jobs is not cut. A task stores its vectors when it
# ends, so under a steady stream (claims of a few dozen jobs) the first quarter lands after
# a quarter of the work instead of all of it; a backlog still goes in full-size tasks. A
# task costs about 5 ms besides the model (benchmarks/embed_task_overhead.py), against
# about 15 ms of model per tool on one core.
_SPREAD = 4
_FEWEST_TASK_TOOLS = 8


def task_sizes(count: int, batch_tools: int) -> list[int]:
    """How many jobs each published task gets, for `count` jobs of one tenant; as even as
    possible, in order."""
    if count <= 0:
        return []
    size = max(1, min(batch_tools, max(_FEWEST_TASK_TOOLS, -(-count // _SPREAD))))
    tasks = -(-count // size)
    base, extra = divmod(count, tasks)
    return [base + 1] * extra + [base] * (tasks - extra)


# --- the task --------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmbedResult:
    jobs: int
    embedded: int  # vectors computed and stored
    skipped: int
    model: str
    carried: int = 0  # vectors moved on to a new version whose text had not changed
    learned: int = 0  # vectors of queries the tools were called for (`learning`)


_PENDING = text(
    """
    SELECT t.id, t.version, t.name, t.title, t.description, t.input_schema, t.examples,
           bool_or(o.kind = :reembed) AS force, e.version AS embedded_version,
           e.text_hash AS embedded_text_hash
    FROM outbox o
    JOIN tools t ON t.tenant_id = o.tenant_id AND t.id = o.tool_id AND t.deleted_at IS NULL
    LEFT JOIN tool_embeddings e
           ON e.tenant_id = t.tenant_id AND e.tool_id = t.id AND e.model = :model
    WHERE o.tenant_id = :tenant_id AND o.id = ANY(:jobs) AND o.kind <> :learn
    GROUP BY t.tenant_id, t.id, e.version, e.text_hash
    ORDER BY t.position
    """
).bindparams(bindparam("jobs", type_=_UUIDS))

# Written only while the tool is still at the embedded version; FOR SHARE waits for a
# concurrent update of the tool, so its permission copy can never be overtaken by ours.
_STORE = text(
    """
    INSERT INTO tool_embeddings AS e
        (tenant_id, tool_id, model, version, dimension, embedding, required_permission_id,
         position, text_hash, embedded_at)
    SELECT t.tenant_id, t.id, :model, t.version, :dimension, CAST(v.embedding AS vector),
           t.required_permission_id, t.position, v.text_hash, now()
    FROM (SELECT * FROM tools WHERE tenant_id = :tenant_id AND id = ANY(:ids) FOR SHARE) t
    JOIN unnest(CAST(:ids AS uuid[]), CAST(:versions AS int[]), CAST(:vectors AS text[]),
                CAST(:hashes AS bytea[]))
         AS v(tool_id, version, embedding, text_hash)
      ON v.tool_id = t.id AND v.version = t.version
    WHERE t.deleted_at IS NULL
    ON CONFLICT (tenant_id, tool_id, model) DO UPDATE
    SET version = EXCLUDED.version, dimension = EXCLUDED.dimension,
        embedding = EXCLUDED.embedding,
        required_permission_id = EXCLUDED.required_permission_id,
        text_hash = EXCLUDED.text_hash,
        embedded_at = EXCLUDED.embedded_at
    WHERE e.version <= EXCLUDED.version
    """
).bindparams(bindparam("ids", type_=_UUIDS))

# A vector whose text the new version did not change is the new version's: moved on, not
# computed again. Only from the version it was read at (a vector stored meanwhile is left
# alone), and under the same FOR SHARE as `_STORE`. `embedded_at` stays when it was computed.
_CARRY = text(
    """
    UPDATE tool_embeddings e
    SET version = t.version, required_permission_id = t.required_permission_id
    FROM (SELECT * FROM tools WHERE tenant_id = :tenant_id AND id = ANY(:ids) FOR SHARE) t
    JOIN unnest(CAST(:ids AS uuid[]), CAST(:versions AS int[]), CAST(:from_versions AS int[]),
                CAST(:hashes AS bytea[]))
         AS v(tool_id, version, from_version, text_hash)
      ON v.tool_id = t.id AND v.version = t.version
    WHERE t.deleted_at IS NULL
      AND e.tenant_id = t.tenant_id AND e.tool_id = t.id AND e.model = :model
      AND e.version = v.from_version AND e.text_hash = v.text_hash
    """
).bindparams(bindparam("ids", type_=_UUIDS))

_DONE = text("DELETE FROM outbox WHERE tenant_id = :tenant_id AND id = ANY(:jobs)").bindparams(
    bindparam("jobs", type_=_UUIDS)
)

# A new model takes over once every live tool has a vector in it or was refused by it for
# good at its current version (`embedding_refusals`: it stays findable by BM25), and at least
# one vector exists, so a server that refuses everything never replaces a working model;
# until then the old one keeps serving. A tenant with no model yet takes the first one at
# once. The CASE fixes the order: with the OR of an AND list, PostgreSQL checked the catalog
# (an anti-join over every live tool, quadratic under a bad plan) before the cheap "already
# served" test, in every task; at 256 tools that was 14-57 ms of a task's 19-93 ms of
# statements.
_SWITCH = text(
    """
    UPDATE tenants SET embedding_model = :model
    WHERE id = :tenant_id
      AND CASE
            WHEN embedding_model IS NOT DISTINCT FROM :model THEN false
            WHEN embedding_model IS NULL THEN true
            ELSE NOT EXISTS (
              SELECT 1 FROM tools t
              WHERE t.tenant_id = :tenant_id AND t.deleted_at IS NULL
                AND NOT EXISTS (SELECT 1 FROM tool_embeddings e
                                WHERE e.tenant_id = t.tenant_id AND e.tool_id = t.id
                                  AND e.model = :model)
                AND NOT EXISTS (SELECT 1 FROM embedding_refusals r
                                WHERE r.tenant_id = t.tenant_id AND r.tool_id = t.id
                                  AND r.model = :model AND r.version = t.version))
              AND EXISTS (SELECT 1 FROM tool_embeddings e
                          WHERE e.tenant_id = :tenant_id AND e.model = :model)
          END
    RETURNING id
    """
)
_DROP_OTHER_MODELS = (
    text("DELETE FROM tool_embeddings WHERE tenant_id = :tenant_id AND model <> :model"),
    text("DELETE FROM embedding_refusals WHERE tenant_id = :tenant_id AND model <> :model"),
    # Learned queries are text too: embedded again under the model now served.
    text(
        "INSERT INTO outbox (tenant_id, id, kind, tool_id, attempts)"
        " SELECT :tenant_id, gen_random_uuid(), 'learn', q.tool_id, 0"
        " FROM learned_queries q WHERE q.tenant_id = :tenant_id AND q.model <> :model"
        " GROUP BY q.tool_id"
    ),
)
# Refusals by a model that neither serves nor is being embedded with (a model change given
# up): nothing will ever settle them.
_ABANDONED = text(
    "DELETE FROM embedding_refusals r USING tenants tn"
    " WHERE r.tenant_id = :tenant_id AND tn.id = r.tenant_id"
    " AND r.model <> :model AND r.model IS DISTINCT FROM tn.embedding_model"
)
# A vector stored settles an earlier refusal (a reindex, or a server that now takes the text).
_SETTLED = text(
    "DELETE FROM embedding_refusals"
    " WHERE tenant_id = :tenant_id AND model = :model AND tool_id = ANY(:ids)"
).bindparams(bindparam("ids", type_=_UUIDS))


def embed_jobs(
    database: Database, backend: EmbeddingBackend, tenant_id: UUID, job_ids: Sequence[UUID]
) -> EmbedResult:
    """Run embed jobs: idempotent, safe to repeat, never writes over a newer vector."""
    jobs = list(job_ids)
    model = backend.model
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        rows = session.execute(
            _PENDING,
            {
                "tenant_id": tenant_id,
                "jobs": jobs,
                "model": model,
                "reembed": REEMBED,
                "learn": learning.LEARN,
            },
        ).all()
        # The tools whose learned queries changed: their vectors and words are redone.
        learners = learning.learners(session, tenant_id, jobs)
        learned_rows = learning.pending(session, tenant_id, learners, model)
    # Each tool whose vector is not current either keeps it (same text: carried) or has it
    # computed; a forced job always computes.
    carried: list[tuple[Any, bytes]] = []
    todo: list[Any] = []
    texts: list[str] = []
    digests: list[bytes] = []
    for r in rows:
        document = document_text(r.name, r.title, r.description, r.input_schema, r.examples)
        digest = text_hash(document)
        same_text = not r.force and r.embedded_text_hash == digest
        # Current: the vector of this version and of this text (the text a version gives
        # changes when `document_text` does, and a reindex then recomputes it).
        if same_text and r.embedded_version == r.version:
            continue
        if same_text:  # a digest is only stored with a vector
            carried.append((r, digest))
        else:
            todo.append(r)
            texts.append(document)
            digests.append(digest)
    computed, refused = _embed_isolating(backend, texts)
    learned_vectors, _ = _embed_isolating(backend, learning.texts(learned_rows))
    failed = {todo[i].id: (todo[i].name, todo[i].version, reason) for i, reason in refused.items()}
    kept = [i for i in range(len(todo)) if i not in refused]
    todo, digests = [todo[i] for i in kept], [digests[i] for i in kept]
    vectors = [v for v in computed if v is not None]
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        # The learners' words are indexed again below, under the tenant's tool-writer lock.
        # A tool write takes that lock before it touches learned queries (a permission
        # moved, a tool deleted), so it is taken here before any row is written, never while
        # holding one: the two wait for each other, never deadlock.
        if learners:
            audit.lock_chain(session, tenant_id)
        stored = moved = 0
        done = _hold_refused(session, tenant_id, jobs, failed, model) if failed else jobs
        if carried:
            moved = _rowcount(
                session.execute(
                    _CARRY,
                    {
                        "tenant_id": tenant_id,
                        "model": model,
                        "ids": [r.id for r, _ in carried],
                        "versions": [r.version for r, _ in carried],
                        "from_versions": [r.embedded_version for r, _ in carried],
                        "hashes": [digest for _, digest in carried],
                    },
                )
            )
        if todo:
            stored_rows = session.execute(
                _STORE,
                {
                    "tenant_id": tenant_id,
                    "model": model,
                    "dimension": backend.dimension,
                    "ids": [r.id for r in todo],
                    "versions": [r.version for r in todo],
                    "vectors": [vector_literal(v) for v in vectors],
                    "hashes": digests,
                },
            )
            stored = _rowcount(stored_rows)
        if stored_ids := [r.id for r in todo] + [r.id for r, _ in carried]:
            session.execute(_SETTLED, {"tenant_id": tenant_id, "model": model, "ids": stored_ids})
        learned = learning.store(session, tenant_id, model, learned_rows, learned_vectors)
        # Their words too, whatever changed them (a query learned, trimmed or forgotten):
        # BM25 finds a tool by what it was called for (`lexical_index.analyse`).
        lexical_index.relearn(session, tenant_id, learners)
        session.execute(_DONE, {"tenant_id": tenant_id, "jobs": done})
        session.execute(_ABANDONED, {"tenant_id": tenant_id, "model": model})
        if session.execute(_SWITCH, {"tenant_id": tenant_id, "model": model}).first():
            for statement in _DROP_OTHER_MODELS:
                session.execute(statement, {"tenant_id": tenant_id, "model": model})
    return EmbedResult(
        jobs=len(jobs),
        embedded=stored,
        skipped=len(rows) - stored - moved,
        model=model,
        carried=moved,
        learned=learned,
    )


def _embed_isolating(
    backend: EmbeddingBackend, texts: list[str]
) -> tuple[list[list[float] | None], dict[int, str]]:
    """Vectors of `texts`, and why the backend refused those it refused, by index.

    An embedding server that refuses a batch (HTTP 400: one text too long for the model,
    say) is asked again text by text, so the one it cannot take does not keep its batch-mates
    from their vectors. A server that is down raises (the task retries the whole batch).
    """
    if not texts:
        return [], {}
    try:
        return list(backend.embed(texts)), {}
    except EmbeddingUnavailable:
        raise
    except EmbeddingError as error:
        if len(texts) == 1:
            return [None], {0: str(error)}
    vectors: list[list[float] | None] = []
    refused: dict[int, str] = {}
    for index, text_ in enumerate(texts):
        try:
            vectors.append(backend.embed([text_])[0])
        except EmbeddingUnavailable:
            raise
        except EmbeddingError as error:
            vectors.append(None)
            refused[index] = str(error)
    return vectors, refused


#: Refusals of one tool's text before its job is dropped (it stays findable by BM25).
MAX_EMBED_REFUSALS = 5
# A server's reason is kept for the status, not whole error pages.
_REASON_CHARS = 500

_REFUSED_JOBS = text(
    "UPDATE outbox SET refusals = refusals + 1 WHERE tenant_id = :tenant_id"
    " AND id = ANY(:jobs) AND tool_id = ANY(:tools) RETURNING id, tool_id, refusals"
).bindparams(bindparam("jobs", type_=_UUIDS), bindparam("tools", type_=_UUIDS))


_GIVEN_UP = text(
    """
    INSERT INTO embedding_refusals AS r (tenant_id, tool_id, model, version, reason)
    VALUES (:tenant_id, :tool_id, :model, :version, :reason)
    ON CONFLICT (tenant_id, tool_id, model) DO UPDATE
    SET version = EXCLUDED.version, reason = EXCLUDED.reason, refused_at = now()
    """
)


def _hold_refused(
    session: Session,
    tenant_id: UUID,
    jobs: list[UUID],
    failed: Mapping[UUID, tuple[str, int, str]],
    model: str,
) -> list[UUID]:
    """Count a refusal on the jobs of the `failed` tools (id: name, version and the server's
    reason) and keep them for a later try (the relay publishes them again after their lease),
    or drop them after MAX_EMBED_REFUSALS, recording the tool in `embedding_refusals` so a
    model change is not held up by it: returns the jobs this run is done with."""
    kept: set[UUID] = set()
    given_up: list[dict[str, object]] = []
    for job_id, tool_id, refusals in session.execute(
        _REFUSED_JOBS, {"tenant_id": tenant_id, "jobs": jobs, "tools": list(failed)}
    ):
        name, version, reason = failed[tool_id]
        if refusals < MAX_EMBED_REFUSALS:
            kept.add(job_id)
            _log.warning(
                "embedding: %s refused tool %s (%s), attempt %d of %d: %s",
                model, name, tool_id, refusals, MAX_EMBED_REFUSALS, reason,
            )  # fmt: skip
        else:
            _log.error(
                "embedding: %s refused tool %s (%s) %d times; giving up (it is found by BM25"
                " only until it changes or is reindexed): %s",
                model, name, tool_id, refusals, reason,
            )  # fmt: skip
            given_up.append(
                {"tenant_id": tenant_id, "tool_id": tool_id, "model": model,
                 "version": version, "reason": reason[:_REASON_CHARS]}
            )  # fmt: skip
    if given_up:
        session.execute(_GIVEN_UP, given_up)
    return [j for j in jobs if j not in kept]


# --- status ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RefusedTool:
    name: str
    model: str
    version: int
    reason: str
    refused_at: datetime


@dataclass(frozen=True)
class EmbeddingStatus:
    model: str | None
    tools: int
    embedded: int
    stale: int
    missing: int
    pending_jobs: int
    refused_jobs: int = 0
    other_models: dict[str, int] = field(default_factory=dict)
    refused_tools: int = 0
    refused: list[RefusedTool] = field(default_factory=list)
    learned_queries: int = 0
    learned_embedded: int = 0


_STATUS = text(
    """
    WITH m AS (SELECT embedding_model AS model FROM tenants WHERE id = :tenant_id)
    SELECT (SELECT model FROM m),
           count(*),
           count(*) FILTER (WHERE e.version = t.version),
           count(*) FILTER (WHERE e.version < t.version),
           count(*) FILTER (WHERE e.version IS NULL),
           (SELECT count(*) FROM outbox WHERE tenant_id = :tenant_id),
           (SELECT count(*) FROM outbox WHERE tenant_id = :tenant_id AND refusals > 0),
           (SELECT coalesce(jsonb_object_agg(x.model, x.n), '{}')
              FROM (SELECT model, count(*) AS n FROM tool_embeddings
                     WHERE tenant_id = :tenant_id AND model IS DISTINCT FROM (SELECT model FROM m)
                     GROUP BY model) x),
           (SELECT count(*) FROM learned_queries WHERE tenant_id = :tenant_id),
           (SELECT count(*) FROM learned_queries
             WHERE tenant_id = :tenant_id AND model = (SELECT model FROM m))
    FROM tools t
    LEFT JOIN tool_embeddings e
           ON e.tenant_id = t.tenant_id AND e.tool_id = t.id AND e.model = (SELECT model FROM m)
    WHERE t.tenant_id = :tenant_id AND t.deleted_at IS NULL
    """
)


# Tools given up at their current version, by any model (a model change in progress too).
_REFUSED = text(
    """
    WITH current AS (
        SELECT t.name, t.position, r.tool_id, r.model, r.version, r.reason, r.refused_at
        FROM embedding_refusals r
        JOIN tools t ON t.tenant_id = r.tenant_id AND t.id = r.tool_id
        WHERE r.tenant_id = :tenant_id AND t.deleted_at IS NULL AND r.version = t.version
    )
    SELECT name, model, version, reason, refused_at,
           (SELECT count(DISTINCT tool_id) FROM current)
    FROM current
    ORDER BY position, model
    LIMIT :limit
    """
)
#: Refused tools the status names; `refused_tools` counts them all.
REFUSED_LISTED = 100


def status(session: Session, tenant_id: UUID) -> EmbeddingStatus:
    """How far the served model's vectors are behind the live catalog the caller sees."""
    row = session.execute(_STATUS, {"tenant_id": tenant_id}).one()
    refused = session.execute(_REFUSED, {"tenant_id": tenant_id, "limit": REFUSED_LISTED}).all()
    model, tools, embedded, stale, missing, pending_jobs, refused_jobs, other_models = row[:8]
    return EmbeddingStatus(
        model,
        tools,
        embedded,
        stale,
        missing,
        pending_jobs,
        refused_jobs,
        other_models,
        refused_tools=refused[0][5] if refused else 0,
        refused=[RefusedTool(*r[:5]) for r in refused],
        learned_queries=row[8],
        learned_embedded=row[9],
    )


def reindex(
    session: Session, tenant_id: UUID, *, force: bool = False, missing_in: str | None = None
) -> int:
    """Queue every live tool; without `force` the task skips vectors already current.

    `missing_in` queues only the tools without a vector of that model at their version and
    without a job already queued, so that repeating a model change's reindex (every `up`
    until the change is done) does not queue the whole catalog again.
    """
    rows = session.execute(
        text(
            "INSERT INTO outbox (tenant_id, id, kind, tool_id, version, attempts)"
            " SELECT t.tenant_id, gen_random_uuid(), :kind, t.id, t.version, 0 FROM tools t"
            " WHERE t.tenant_id = :tenant_id AND t.deleted_at IS NULL"
            "   AND (CAST(:model AS text) IS NULL OR (NOT EXISTS ("
            "     SELECT 1 FROM tool_embeddings e WHERE e.tenant_id = t.tenant_id"
            "       AND e.tool_id = t.id AND e.model = :model AND e.version = t.version)"
            "   AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.tenant_id = t.tenant_id"
            "       AND o.tool_id = t.id AND o.version = t.version)))"
        ),
        {"tenant_id": tenant_id, "kind": REEMBED if force else EMBED, "model": missing_in},
    )
    queued = _rowcount(rows)
    # An admin's request to recompute (every vector, with `force`): audited like a change,
    # since the outbox rows it writes are not ORM rows the audit hook sees.
    audit.record(
        session,
        table="embedding_reindex",
        key={"force": force},
        action="insert",
        changed=["queued"],
        after={"force": force, "queued": queued},
    )
    return queued


def _rowcount(result: Result[Any]) -> int:
    assert isinstance(result, CursorResult)
    return result.rowcount
