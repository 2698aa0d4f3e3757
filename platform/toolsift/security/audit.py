"""The audit log: every row an admin unit of work inserts, changes or deletes.

One `before_flush` hook on all sessions, active only in sessions marked with `track()` (admin
requests, the operator, the CLI), records each new, changed and deleted ORM row, plus rows
removed by ORM bulk deletes: its table, primary key, changed columns and a SHA-256 of the
row before and after. Endpoints need no code of their own, and a new admin table is audited
the day it gets a model. Derived rows (postings, statistics) and agent traffic are not audit
events and are skipped.

Entries are chained per tenant (see `AuditEntry`): the flush that writes them takes a
transaction-scoped advisory lock on the tenant's chain, reads its head, and links each new
entry to it, so concurrent admin transactions of one tenant append one after the other.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event, inspect, select, text
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction
from sqlalchemy.orm.state import InstanceState

from ..errors import TenantDeleted, Unauthenticated
from ..models import AuditEntry, Base
from ..ops.logging import request_id

GENESIS = "0" * 64
_LOCK_CHAIN = text("SELECT pg_advisory_xact_lock(hashtextextended(:chain, 0))")
# Rows written as a consequence of an audited change, not as a change of their own.
NOT_AUDITED = frozenset({"audit_log", "tool_terms", "term_stats", "corpus_stats"})
_ACTOR = "audit_actor"
_KEY_RECHECKED = "audit_key_rechecked"
_KEY_LIVE = text("SELECT revoked_at IS NULL FROM api_keys WHERE id = :key_id")


@dataclass(frozen=True)
class Actor:
    kind: str  # key, operator, cli, or sync (a source synced on its schedule or notice)
    key_id: uuid.UUID | None = None


def track(session: Session, actor: Actor) -> None:
    """Record this session's admin changes, attributed to `actor`."""
    session.info[_ACTOR] = actor


def record(
    session: Session,
    *,
    table: str,
    key: dict[str, Any],
    action: str,
    changed: list[str],
    after: dict[str, Any] | None = None,
) -> None:
    """An entry for a change no ORM row shows (a database login) in the session's tenant,
    chained like the others; nothing when the session is not tracked. `after` is hashed,
    never stored: leave secrets out of it."""
    actor: Actor | None = session.info.get(_ACTOR)
    if actor is None:
        return
    tenant_id = session.info["tenant_id"]
    session.add(_new_entry(actor, tenant_id, table, key, action, changed, None, after))
    session.flush()


def _table(mapper: Any) -> str:
    return str(mapper.local_table.name)


def row_hash(values: dict[str, Any]) -> str:
    canonical = json.dumps(values, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def entry_hash(entry: AuditEntry) -> str:
    """SHA-256 of every column of the entry, `prev_hash` included (the link)."""
    return row_hash(
        {
            "tenant_id": str(entry.tenant_id),
            "seq": entry.seq,
            "id": str(entry.id),
            # One instant, one text, whatever time zone the value was read back in.
            "created_at": entry.created_at.astimezone(UTC).isoformat(),
            "actor": entry.actor,
            "actor_key_id": str(entry.actor_key_id) if entry.actor_key_id else None,
            "request_id": entry.request_id,
            "action": entry.action,
            "table_name": entry.table_name,
            "row_key": entry.row_key,
            "changed": list(entry.changed),
            "before_hash": entry.before_hash,
            "after_hash": entry.after_hash,
            "prev_hash": entry.prev_hash,
        }
    )


def lock_chain(session: Session, tenant_id: uuid.UUID | None = None) -> None:
    """Wait until the tenant's other admin transactions that have written commit.

    Held to the end of the transaction, and re-entrant in it. Tool and access writes take it
    before they read what they check (a version, a free name, a role that exists): they run
    one at a time per tenant, what they checked still holds when they write, and they never
    hold a row lock while they wait for it. `tenant_id`: the session's tenant by default.
    """
    tenant = tenant_id or session.info["tenant_id"]
    with session.no_autoflush:
        session.execute(_LOCK_CHAIN, {"chain": f"audit:{tenant}"})
        actor = session.info.get(_ACTOR)
        if (
            isinstance(actor, Actor)
            and actor.key_id is not None
            and tenant == session.info.get("tenant_id")
            and not session.info.get(_KEY_RECHECKED)
        ):
            # The key was checked when the request began; a revoke that committed while this
            # write waited for the lock must stop it (the revoke took the lock first). Held
            # from here to commit, the lock keeps any later revoke behind this write.
            live = session.scalar(_KEY_LIVE, {"key_id": actor.key_id})
            if live is None:  # keys are revoked, never deleted, but with their tenant
                raise TenantDeleted()
            if not live:
                raise Unauthenticated("invalid or revoked API key")
            session.info[_KEY_RECHECKED] = True


def _chain(session: Session, entries: list[AuditEntry]) -> None:
    """Give each unchained entry its place: after the tenant's head, in creation order."""
    tenants = sorted({e.tenant_id for e in entries}, key=str)  # one lock order: no deadlock
    with session.no_autoflush:
        for tenant_id in tenants:
            lock_chain(session, tenant_id)
            head = session.execute(
                select(AuditEntry.seq, AuditEntry.entry_hash)
                .where(AuditEntry.tenant_id == tenant_id, AuditEntry.seq.is_not(None))
                .order_by(AuditEntry.seq.desc())
                .limit(1)
            ).first()
            seq, prev = (head.seq, head.entry_hash) if head else (0, GENESIS)
            for entry in sorted(
                (e for e in entries if e.tenant_id == tenant_id), key=lambda e: e.created_at
            ):
                seq += 1
                entry.seq, entry.prev_hash = seq, prev
                entry.entry_hash = prev = entry_hash(entry)


def _hashed_columns(state: InstanceState[Any]) -> list[Any]:
    # Server-side timestamps are not known before the INSERT, so they are not hashed.
    return [c for c in state.mapper.column_attrs if c.columns[0].server_default is None]


def _current(state: InstanceState[Any], *, new: bool) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attr in _hashed_columns(state):
        if attr.key in state.dict:
            values[attr.key] = state.dict[attr.key]
        elif new:
            default = attr.columns[0].default
            if default is None:
                values[attr.key] = None
            elif default.is_scalar:
                values[attr.key] = default.arg
            elif default.is_callable:
                values[attr.key] = default.arg(None)
    return values


def _before(state: InstanceState[Any]) -> tuple[dict[str, Any], list[str]]:
    values = _current(state, new=False)
    changed: list[str] = []
    for attr in _hashed_columns(state):
        history = state.attrs[attr.key].history
        if history.has_changes():
            changed.append(attr.key)
            values[attr.key] = history.deleted[0] if history.deleted else None
    return values, changed


def _key(state: InstanceState[Any]) -> dict[str, Any]:
    return {str(c.key): str(state.dict.get(str(c.key))) for c in state.mapper.primary_key}


def _tenant(state: InstanceState[Any]) -> Any:
    return state.dict.get("tenant_id") or state.dict.get("id")


def _entry(
    actor: Actor,
    state: InstanceState[Any],
    action: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    changed: list[str],
) -> AuditEntry:
    table, key = _table(state.mapper), _key(state)
    return _new_entry(actor, _tenant(state), table, key, action, changed, before, after)


def _new_entry(
    actor: Actor,
    tenant_id: Any,
    table: str,
    key: dict[str, Any],
    action: str,
    changed: list[str],
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> AuditEntry:
    return AuditEntry(
        tenant_id=tenant_id,
        id=uuid.uuid4(),
        # The clock, not now(): entries of one transaction keep their order.
        created_at=datetime.now(UTC),
        actor=actor.kind,
        actor_key_id=actor.key_id,
        request_id=request_id.get(),
        action=action,
        table_name=table,
        row_key=key,
        changed=changed,
        before_hash=row_hash(before) if before is not None else None,
        after_hash=row_hash(after) if after is not None else None,
    )


def _audited(state: InstanceState[Any]) -> bool:
    return _table(state.mapper) not in NOT_AUDITED


@event.listens_for(Session, "before_flush")
def _record(session: Session, _flush: UOWTransaction, _instances: object) -> None:
    actor: Actor | None = session.info.get(_ACTOR)
    if actor is None:
        return
    entries: list[AuditEntry] = []
    for obj in list(session.new):
        state = inspect(obj)
        if _audited(state):
            after = _current(state, new=True)
            entries.append(_entry(actor, state, "insert", None, after, sorted(after)))
    for obj in list(session.dirty):
        state = inspect(obj)
        if not _audited(state) or not session.is_modified(obj, include_collections=False):
            continue
        before, changed = _before(state)
        if changed:
            after = _current(state, new=False)
            entries.append(_entry(actor, state, "update", before, after, changed))
    for obj in list(session.deleted):
        state = inspect(obj)
        if _audited(state):
            entries.append(_entry(actor, state, "delete", _current(state, new=False), None, []))
    # With those a bulk delete queued (see below), still unchained.
    queued = [o for o in session.new if isinstance(o, AuditEntry) and o.seq is None]
    if entries or queued:
        _chain(session, [*queued, *entries])
    session.add_all(entries)


@event.listens_for(Session, "do_orm_execute")
def _record_bulk_delete(state: ORMExecuteState) -> None:
    """`session.execute(delete(Model).where(...))` bypasses the flush: load and mark the rows
    first, so they are audited (and deleted) like any other."""
    actor: Actor | None = state.session.info.get(_ACTOR)
    if actor is None or not state.is_delete or state.bind_mapper is None:
        return
    mapper = state.bind_mapper
    if _table(mapper) in NOT_AUDITED or not issubclass(mapper.class_, Base):
        return
    where = state.statement.whereclause  # type: ignore[attr-defined]
    query = select(mapper.class_)
    if where is not None:
        query = query.where(where)
    rows = state.session.execute(query, execution_options={"_audit_probe": True}).scalars()
    entries = []
    for obj in rows:
        row = inspect(obj)
        entries.append(_entry(actor, row, "delete", _current(row, new=False), None, []))
    state.session.add_all(entries)
