"""MCP sources: registration, applying a sync to the registry, and review of what they bring.

A sync (`sync.sync_source`) reads the server's whole catalog outside any transaction, then
`McpService.apply` applies it in one transaction through `ToolService.upsert` and
`ToolService.delete`, so versions, positions, the BM25 index and the embedding outbox stay
exactly as consistent as for any other write.
A server that fails, or a catalog the registry cannot take, changes nothing but the
source's health: the last good catalog keeps serving.

Review: every definition is screened (`screening.screen`). A flagged one is *held*: its
registry tool requires the reserved permission `mcp.review`, which no role may hold, so
row-level security hides it, with its postings, statistics and vectors, from every agent
before any scoring, just like a forbidden tool. Approving pins the definition's hash; any
later change to an approved (or rejected) tool puts it back on hold.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit
from uuid import UUID

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from ..access.service import REVIEW_PERMISSION, access
from ..config import Settings
from ..errors import AppError, Conflict, NotFound, Unprocessable
from ..models import McpSource, McpTool, Permission, Tool
from ..security import audit
from ..tools.schemas import ToolCreate
from ..tools.service import tool as tool_service
from . import screening
from .catalog import CatalogError, Imported, convert
from .fetch import (
    Catalog,
    HttpTarget,
    StdioTarget,
    Target,
    non_public,
)
from .schemas import (
    McpToolRead,
    McpToolUpdate,
    SourceCreate,
    SourceRead,
    SourceUpdate,
    SyncRead,
)
from .secrets import SourceSecrets, seal, unseal

_log = logging.getLogger(__name__)

# A claimed source is not claimed again for this long, whatever becomes of its sync task.
CLAIM_SECONDS = 300
# Who changed the catalog when no admin asked: the source's schedule or its server's notice.
SYNC_ACTOR = audit.Actor("sync")


class SourceDisabled(Conflict):
    """A disabled source is never fetched; enable it first."""


class McpServerError(AppError):
    """The MCP server gave no usable catalog; the source is marked unhealthy."""

    status_code = 502
    code = "mcp_server_error"


@dataclass(frozen=True)
class Materialized:
    ids: dict[str, UUID]
    # created, updated, unchanged (the upsert's) or removed (a rejected definition's tool)
    statuses: dict[str, str]


#: Review states an admin decided; a changed definition is held again.
PINNED = ("approved", "rejected")


def source_tag(source_id: UUID) -> str:
    """What `tools.source` holds for a source's tools."""
    return f"mcp:{source_id}"


def utc_now() -> datetime:
    return datetime.now(UTC)


class McpService:
    # --- sources -----------------------------------------------------------------------------
    def create(
        self, session: Session, tenant_id: UUID, data: SourceCreate, *, settings: Settings
    ) -> McpSource:
        if session.scalar(select(McpSource.id).where(McpSource.name == data.name)):
            raise Conflict(f"source {data.name!r} already exists", field="name")
        prefix = data.prefix if data.prefix is not None else _default_prefix(data.name)
        if session.scalar(select(McpSource.id).where(McpSource.prefix == prefix)):
            raise Conflict(f"another source already uses the prefix {prefix!r}", field="prefix")
        source = McpSource(
            tenant_id=tenant_id,
            id=uuid.uuid4(),
            name=data.name,
            prefix=prefix,
            transport=data.transport,
            args=[],
            header_names=[],
            env_names=[],
            has_bearer_token=False,
            enabled=data.enabled,
            listen=data.listen,
            sync_interval_seconds=data.sync_interval_seconds or settings.mcp_sync_interval,
            health="new",
            consecutive_failures=0,
            tool_count=0,
        )
        if data.transport == "http":
            for name in ("command", "env"):
                if getattr(data, name):
                    raise Unprocessable(f"{name} is for stdio sources", field=name)
            if data.args:
                raise Unprocessable("args is for stdio sources", field="args")
            source.url = _check_url(data.url, settings)
        else:
            for name in ("url", "headers", "bearer_token"):
                if getattr(data, name):
                    raise Unprocessable(f"{name} is for http sources", field=name)
            source.command = _check_command(data.command, settings)
            source.args = list(data.args)
        self._set_secrets(
            source,
            SourceSecrets(
                headers=dict(data.headers or {}),
                bearer_token=data.bearer_token,
                env=dict(data.env or {}),
            ),
            settings=settings,
        )
        source.default_permission_id = self._permission_id(
            session, data.default_permission, field="default_permission"
        )
        session.add(source)
        session.flush()
        return source

    def update(
        self, session: Session, source_id: UUID, data: SourceUpdate, *, settings: Settings
    ) -> McpSource:
        source = self.get(session, source_id)
        fields = data.model_fields_set
        is_http = source.transport == "http"
        wrong = {"command", "args", "env"} if is_http else {"url", "headers", "bearer_token"}
        if bad := sorted(wrong & fields):
            raise Unprocessable(
                f"{bad[0]} is for {'stdio' if is_http else 'http'} sources", field=bad[0]
            )
        if "url" in fields:
            source.url = _check_url(data.url, settings)
        if "command" in fields:
            source.command = _check_command(data.command, settings)
        if data.args is not None:
            source.args = list(data.args)
        secret_fields = {"headers", "bearer_token", "env"} & fields
        if secret_fields:
            current = unseal(settings.secret_key, source.secrets)
            self._set_secrets(
                source,
                SourceSecrets(
                    headers=dict(data.headers or {}) if "headers" in fields else current.headers,
                    bearer_token=(
                        data.bearer_token if "bearer_token" in fields else current.bearer_token
                    ),
                    env=dict(data.env or {}) if "env" in fields else current.env,
                ),
                settings=settings,
            )
        for name in ("sync_interval_seconds", "listen", "enabled"):
            if getattr(data, name) is not None:
                setattr(source, name, getattr(data, name))
        if "enabled" in fields and source.enabled:
            source.next_sync_at = None  # due at once
        source.updated_at = utc_now()
        session.flush()
        if "default_permission" in fields:
            permission_id = self._permission_id(
                session, data.default_permission, field="default_permission"
            )
            if permission_id != source.default_permission_id:
                source.default_permission_id = permission_id
                session.flush()
                # Only what the server still lists: a removed tool stays deleted.
                listed = [r for r in self._rows(session, source.id) if r.removed_at is None]
                self._materialize(session, source, listed)
        return source

    def delete(self, session: Session, source_id: UUID) -> None:
        """Remove the source; its tools are soft-deleted (their positions are never reused)."""
        source = self.get(session, source_id)
        for row in self._rows(session, source.id):
            tool_service.delete(session, row.tool_id)
        # Its tool rows through the ORM, so each is audited (the cascade would not be).
        session.execute(delete(McpTool).where(McpTool.source_id == source.id))
        session.delete(source)
        session.flush()

    def get(self, session: Session, source_id: UUID) -> McpSource:
        source = session.get(McpSource, (session.info["tenant_id"], source_id))
        if source is None:
            raise NotFound("source not found", field="source_id")
        return source

    def list_sources(self, session: Session) -> Sequence[McpSource]:
        return session.scalars(select(McpSource).order_by(McpSource.name)).all()

    def read(self, session: Session, sources: Sequence[McpSource]) -> list[SourceRead]:
        ids = {s.default_permission_id for s in sources if s.default_permission_id}
        names = self._permission_names(session, ids)
        held = dict(
            session.execute(
                select(McpTool.source_id, func.count())
                .where(McpTool.review_state == "held", McpTool.removed_at.is_(None))
                .group_by(McpTool.source_id)
            ).all()
        )
        return [
            SourceRead.model_validate(
                {
                    **{
                        c: getattr(s, c)
                        for c in SourceRead.model_fields
                        if c not in ("default_permission", "held_count")
                    },
                    "default_permission": names.get(s.default_permission_id)
                    if s.default_permission_id
                    else None,
                    "held_count": held.get(s.id, 0),
                }
            )
            for s in sources
        ]

    def target(self, source: McpSource, *, settings: Settings) -> tuple[Target, SourceSecrets]:
        """Where and how to reach the server, with the decrypted secrets (never stored)."""
        secrets = unseal(settings.secret_key, source.secrets)
        if source.transport == "stdio":
            command = _check_command(source.command, settings)
            _check_env(secrets.env, settings)  # again: the operator's list may be newer
            return StdioTarget(command, list(source.args), env=secrets.env or None), secrets
        headers = dict(secrets.headers)
        if secrets.bearer_token:
            headers["Authorization"] = f"Bearer {secrets.bearer_token}"
        url = _check_url(source.url, settings)  # again: the operator's policy may be newer
        return HttpTarget(url, headers, settings.mcp_private_networks_allowed), secrets

    def _set_secrets(
        self, source: McpSource, secrets: SourceSecrets, *, settings: Settings
    ) -> None:
        if secrets.bearer_token and any(h.lower() == "authorization" for h in secrets.headers):
            raise Unprocessable(
                "give either bearer_token or an Authorization header, not both", field="headers"
            )
        _check_env(secrets.env, settings)
        development_key = settings.secret_key.startswith("changethis")
        if settings.env == "production" and development_key and secrets.values():
            field = (
                "headers" if secrets.headers else "bearer_token" if secrets.bearer_token else "env"
            )
            raise Unprocessable(
                "this server cannot store secrets: its operator must set TOOLSIFT_SECRET_KEY",
                field=field,
            )
        source.secrets = seal(settings.secret_key, secrets)
        source.header_names = sorted(secrets.headers)
        source.env_names = sorted(secrets.env)
        source.has_bearer_token = bool(secrets.bearer_token)

    # --- the tools of a source ---------------------------------------------------------------
    def list_tools(
        self, session: Session, *, source_id: UUID | None, state: str | None
    ) -> Sequence[McpTool]:
        query = select(McpTool).order_by(McpTool.source_id, McpTool.remote_name)
        if source_id is not None:
            query = query.where(McpTool.source_id == source_id)
        if state is not None:
            query = query.where(McpTool.review_state == state, McpTool.removed_at.is_(None))
        return session.scalars(query).all()

    def get_tool(self, session: Session, tool_id: UUID) -> McpTool:
        row = session.scalar(select(McpTool).where(McpTool.tool_id == tool_id))
        if row is None:
            raise NotFound("MCP tool not found", field="tool_id")
        return row

    def read_tools(self, session: Session, rows: Sequence[McpTool]) -> list[McpToolRead]:
        tools = {
            t.id: t
            for t in session.scalars(select(Tool).where(Tool.id.in_([r.tool_id for r in rows])))
        }
        names = self._permission_names(
            session, {t.required_permission_id for t in tools.values() if t.required_permission_id}
        )
        out = []
        for row in rows:
            tool = tools[row.tool_id]
            out.append(
                McpToolRead(
                    source_id=row.source_id,
                    remote_name=row.remote_name,
                    tool_id=row.tool_id,
                    name=tool.name,
                    review_state=row.review_state,
                    findings=row.findings,
                    definition=row.definition,
                    definition_hash=row.definition_hash,
                    approved_hash=row.approved_hash,
                    reviewed_at=row.reviewed_at,
                    required_permission=names.get(tool.required_permission_id)
                    if tool.required_permission_id
                    else None,
                    permission_override=row.permission_override,
                    removed_at=row.removed_at,
                    annotations=row.definition.get("annotations"),
                )
            )
        return out

    def approve(self, session: Session, tool_id: UUID, definition_hash: str) -> McpTool:
        """Serve this exact definition; a later change to it goes back on hold."""
        return self._decide(session, tool_id, definition_hash, "approved")

    def reject(self, session: Session, tool_id: UUID, definition_hash: str) -> McpTool:
        """Keep this exact definition out of the registry (its tool is soft-deleted)."""
        return self._decide(session, tool_id, definition_hash, "rejected")

    def _decide(self, session: Session, tool_id: UUID, definition_hash: str, state: str) -> McpTool:
        row = self.get_tool(session, tool_id)
        if row.definition_hash != definition_hash:
            raise Conflict(
                "definition_hash is not the hash of the current definition: the server changed"
                " it since it was reviewed, or the hash is mistyped; review the current one",
                field="definition_hash",
            )
        row.review_state = state
        row.approved_hash = definition_hash
        row.reviewed_at = utc_now()
        row.updated_at = row.reviewed_at
        session.flush()
        if row.removed_at is None:
            self._materialize(session, self.get(session, row.source_id), [row])
        return row

    def set_permission(self, session: Session, tool_id: UUID, data: McpToolUpdate) -> McpTool:
        row = self.get_tool(session, tool_id)
        if data.inherit:
            if "required_permission" in data.model_fields_set:
                raise Unprocessable(
                    "give either inherit or required_permission", field="required_permission"
                )
            row.permission_override, row.permission_id = False, None
        elif "required_permission" not in data.model_fields_set:
            # `{}` or `{"inherit": false}` once made the tool public (no permission at all).
            raise Unprocessable(
                "give required_permission (null for a public tool) or inherit: true",
                field="required_permission",
            )
        else:
            row.permission_override = True
            row.permission_id = self._permission_id(
                session, data.required_permission, field="required_permission"
            )
        row.updated_at = utc_now()
        session.flush()
        if row.removed_at is None:
            self._materialize(session, self.get(session, row.source_id), [row])
        return row

    # --- sync --------------------------------------------------------------------------------
    def apply(
        self, session: Session, source: McpSource, catalog: Catalog, *, settings: Settings
    ) -> SyncRead:
        """Bring the registry in line with `catalog`, or raise `CatalogError` changing nothing."""
        rows = {r.remote_name: r for r in self._rows(session, source.id)}
        converted = convert(
            source.prefix,
            catalog.tools,
            permissions={},
            default_permission=None,
            trusted={r.definition_hash for r in rows.values()},
        )
        imported = {i.remote_name: i for i in converted}
        mine = source_tag(source.id)
        names = {i.tool.name: i for i in imported.values()}
        # A deleted tool's name is free unless another source still maps it: the registry
        # hands it over (`tools.service.upsert`).
        mapped = (
            select(McpTool.tool_id)
            .where(McpTool.tool_id == Tool.id, McpTool.source_id != source.id)
            .exists()
        )
        taken = session.execute(
            select(Tool.name, Tool.source)
            .where(Tool.name.in_(list(names)), Tool.source != mine)
            .where(Tool.deleted_at.is_(None) | mapped)
            .limit(1)
        ).first()
        if taken is not None:
            # A source's prefix is fixed (PATCH does not take it): say what can be done.
            remote = names[taken.name].remote_name
            holder, remedy = (
                ("a manual tool", "delete that tool")
                if taken.source == "manual"
                else (f"another source's tool ({taken.source})", "delete that source")
            )
            raise CatalogError(
                f"tool {remote[:80]!r} would be {taken.name!r}, the name of {holder}: {remedy},"
                " or delete this source and add it again with another prefix (a source's"
                " prefix cannot be changed)",
                field=f"tools[{remote[:80]}].name",
            )
        now = utc_now()
        new: list[McpTool] = []
        for remote, item in imported.items():
            row = rows.get(remote)
            findings = [f.as_dict() for f in screening.screen(item.definition)]
            if row is None:
                row = McpTool(
                    tenant_id=source.tenant_id,
                    source_id=source.id,
                    remote_name=remote,
                    review_state="held" if findings else "clean",
                    findings=findings,
                    permission_override=False,
                )
                new.append(row)
            elif row.definition_hash != item.definition_hash:
                pinned = row.review_state in PINNED
                row.review_state = "held" if (pinned or findings) else "clean"
                row.findings = findings
                row.updated_at = now
            if row.removed_at is not None:
                row.removed_at = None
                row.updated_at = now
            row.definition = item.definition
            row.definition_hash = item.definition_hash
        self._carry_reviews(session, rows, new, imported)
        current = [r for r in rows.values() if r.remote_name in imported]
        held = sum(r.review_state == "held" for r in [*current, *new])
        result = self._materialize(session, source, [*current, *new], imported=imported)
        for row in new:
            row.tool_id = result.ids[imported[row.remote_name].tool.name]
        claimed = {r.tool_id for r in current} | {r.tool_id for r in new}
        removed = 0
        # An entry of a tool its server removed keeps the tool's id. When a listed entry of
        # the same source takes that registry tool over (the name came back under another
        # remote name), the old entry goes: one entry per registry tool. (Another source
        # cannot: while an entry maps a tool, its name is its source's, `taken` above.)
        for stale in session.scalars(
            select(McpTool).where(McpTool.tool_id.in_(claimed), McpTool.removed_at.is_not(None))
        ):
            if stale.source_id != source.id or stale.remote_name not in imported:
                session.delete(stale)
        for row in rows.values():
            if row.remote_name in imported or row.removed_at is not None:
                continue
            if row.tool_id in claimed:
                # Another remote name now maps to the same registry tool (a rename that the
                # prefix folds to the same name): the old entry goes, the tool stays.
                session.delete(row)
                continue
            tool_service.delete(session, row.tool_id)
            row.removed_at = now
            row.updated_at = now
            removed += 1
        removed += sum(1 for status in result.statuses.values() if status == "removed")
        session.flush()  # deletes first: a new entry may take over a deleted one's tool
        session.add_all(new)
        source.health = "healthy"
        source.last_error = None
        source.last_attempt_at = now
        source.last_synced_at = now
        source.consecutive_failures = 0
        source.tool_count = len(imported)
        source.server_ttl_ms = catalog.ttl_ms
        source.next_sync_at = now + timedelta(seconds=self.interval(source, settings))
        session.flush()
        statuses = list(result.statuses.values())
        counts = {s: statuses.count(s) for s in ("created", "updated", "unchanged")}
        return SyncRead(
            source_id=source.id,
            status="synced",
            pages=catalog.pages,
            tools=len(imported),
            removed=removed,
            held=held,
            **counts,
        )

    def record_failure(
        self, session: Session, source: McpSource, message: str, *, settings: Settings
    ) -> None:
        """Unhealthy, with the error; the catalog stays as it was. Retries back off."""
        now = utc_now()
        source.health = "unhealthy"
        source.last_error = message[:2000]
        source.last_attempt_at = now
        source.consecutive_failures += 1
        backoff = settings.mcp_min_sync_interval * 2 ** min(source.consecutive_failures - 1, 10)
        source.next_sync_at = now + timedelta(seconds=min(backoff, self.interval(source, settings)))
        session.flush()

    def interval(self, source: McpSource, settings: Settings) -> int:
        """Seconds to the next scheduled sync: the server's list TTL when it gives one
        (never below the operator's minimum, never above a day), else the source's own."""
        if source.server_ttl_ms:
            return int(min(max(source.server_ttl_ms / 1000, settings.mcp_min_sync_interval), 86400))
        return source.sync_interval_seconds

    def claim(self, session: Session, source_id: UUID) -> bool:
        """Take a due source for one sync; false if another scheduler run already did."""
        now = utc_now()
        claimed = session.execute(
            update(McpSource)
            .where(
                McpSource.id == source_id,
                McpSource.enabled.is_(True),
                (McpSource.next_sync_at.is_(None)) | (McpSource.next_sync_at <= now),
            )
            .values(next_sync_at=now + timedelta(seconds=CLAIM_SECONDS))
            .returning(McpSource.id)
        ).first()
        return claimed is not None

    # --- internals ---------------------------------------------------------------------------
    def _carry_reviews(
        self,
        session: Session,
        rows: Mapping[str, McpTool],
        new: Sequence[McpTool],
        imported: Mapping[str, Imported],
    ) -> None:
        """A new remote name whose registry name is that of an entry the server no longer
        lists (a rename the prefix folds to the same name) is the same registry tool: an
        approval or rejection of the old entry does not carry over to a changed definition,
        so the tool is held again, as any changed pinned tool is."""
        gone = [
            r.tool_id
            for r in rows.values()
            if r.remote_name not in imported and r.removed_at is None and r.review_state in PINNED
        ]
        if not gone or not new:
            return
        names = set(session.scalars(select(Tool.name).where(Tool.id.in_(gone))))
        for row in new:
            if imported[row.remote_name].tool.name in names:
                row.review_state = "held"

    def _rows(self, session: Session, source_id: UUID) -> list[McpTool]:
        return list(
            session.scalars(
                select(McpTool).where(McpTool.source_id == source_id).order_by(McpTool.remote_name)
            )
        )

    def _materialize(
        self,
        session: Session,
        source: McpSource,
        rows: Sequence[McpTool],
        *,
        imported: Mapping[str, Imported] | None = None,
    ) -> Materialized:
        """Upsert the registry tools of `rows` with the permission their review state and
        the source's settings give; a rejected definition's tool is soft-deleted instead."""
        overrides = {r.permission_id for r in rows if r.permission_override}
        permission_names = self._permission_names(
            session, {source.default_permission_id, *overrides}
        )
        if any(r.review_state == "held" for r in rows):
            access.reserved_permission(session, source.tenant_id, REVIEW_PERMISSION)
        items: list[ToolCreate] = []
        rejected: list[str] = []
        for row in rows:
            item = (imported or {}).get(row.remote_name) or convert(
                source.prefix,
                [row.definition],
                permissions={},
                default_permission=None,
                trusted={row.definition_hash},
            )[0]
            if row.review_state == "rejected" and row.approved_hash == row.definition_hash:
                rejected.append(item.tool.name)
                continue
            if row.review_state == "held":
                permission: str | None = REVIEW_PERMISSION
            else:
                permission_id = (
                    row.permission_id if row.permission_override else source.default_permission_id
                )
                permission = permission_names.get(permission_id) if permission_id else None
            items.append(item.tool.model_copy(update={"required_permission": permission}))
        registry = {
            t.name: t
            for t in session.scalars(
                select(Tool).where(Tool.name.in_([*(i.name for i in items), *rejected]))
            )
        }
        # Examples and the core flag are the admin's, not the server's: keep them.
        items = [
            i.model_copy(
                update={"examples": registry[i.name].examples, "core": registry[i.name].core}
            )
            if i.name in registry
            else i
            for i in items
        ]
        done = Materialized(ids={}, statuses={})
        if items:
            result = tool_service.upsert(
                session, source.tenant_id, items, field="tools", source=source_tag(source.id)
            )
            for entry in result.tools:
                done.ids[entry.name] = entry.id
                done.statuses[entry.name] = entry.status
        for name in rejected:
            tool = registry.get(name)
            if tool is None:
                continue
            done.ids[name] = tool.id
            if tool.deleted_at is None:
                tool_service.delete(session, tool.id)
                done.statuses[name] = "removed"
        return done

    def _permission_id(self, session: Session, name: str | None, *, field: str) -> UUID | None:
        if name is None:
            return None
        if name == REVIEW_PERMISSION:
            raise Unprocessable(f"permission {name!r} is reserved", field=field)
        return access.permission_ids(session, [name], field=field)[name]

    def _permission_names(self, session: Session, ids: Iterable[UUID | None]) -> dict[UUID, str]:
        wanted = {i for i in ids if i is not None}
        if not wanted:
            return {}
        rows = session.execute(
            select(Permission.id, Permission.name).where(Permission.id.in_(wanted))
        ).all()
        return {row.id: row.name for row in rows}


mcp = McpService()


def secrets_field(source: McpSource) -> str:
    """The secrets to set again after the secret key changed."""
    if source.transport == "stdio":
        return "env"
    return "bearer_token" if source.has_bearer_token and not source.header_names else "headers"


def _default_prefix(name: str) -> str:
    """The source name, made valid inside a tool name (`github.com` -> `github_com`)."""
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:32]


def _check_url(url: str | None, settings: Settings) -> str:
    if not url:
        raise Unprocessable("an http source needs a url", field="url")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsed only to be checked (out of range raises)
    except ValueError as error:
        raise Unprocessable(f"url is not a valid URL: {error}", field="url") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Unprocessable("url must be an http(s) URL with a host", field="url")
    if parts.username or parts.password:
        raise Unprocessable(
            "url must not carry credentials; use headers or bearer_token (stored encrypted)",
            field="url",
        )
    if not settings.mcp_private_networks_allowed and (found := non_public(parts.hostname)):
        raise Unprocessable(
            f"url: {found} is not a public address; this deployment lets MCP sources reach"
            " public addresses only (TOOLSIFT_MCP_PRIVATE_NETWORKS)",
            field="url",
        )
    return url


def _check_env(env: dict[str, str], settings: Settings) -> None:
    """Only variables the operator lists: interpreters read too many (PYTHONWARNINGS,
    BROWSER, PATH, NODE_OPTIONS, JAVA_TOOL_OPTIONS, LD_PRELOAD, ...) that make an allowed
    program run other code for a list of refused names to be safe."""
    if refused := sorted(set(env) - set(settings.mcp_stdio_env)):
        raise Unprocessable(
            f"env: {refused[0]} may not be set here: the operator lists the variables a stdio"
            " source may set in TOOLSIFT_MCP_STDIO_ENV",
            field="env",
        )


def _check_command(command: str | None, settings: Settings) -> str:
    if not command:
        raise Unprocessable("a stdio source needs a command", field="command")
    if command not in settings.mcp_stdio_commands:
        raise Unprocessable(
            "this command may not run here: stdio sources run programs on the workers, so"
            " the operator lists the allowed ones in TOOLSIFT_MCP_STDIO_COMMANDS",
            field="command",
        )
    return command
