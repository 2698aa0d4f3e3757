"""The tool registry: append-only positions, versioned definitions, an index kept in step."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from uuid import UUID

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ..access.service import RESERVED_PERMISSIONS, access
from ..embedding import service as embeddings
from ..errors import Conflict, NotFound, TenantDeleted, Unprocessable
from ..lexical.index import Previous, analyse, reindex
from ..models import McpSource, McpTool, Permission, Tool
from ..security.audit import lock_chain
from .definitions import content_hash, token_costs
from .schemas import CATALOG_FIELDS, ToolCreate, ToolRead, ToolUpdate, UpsertItem, UpsertResult

_ALLOCATE = text(
    "UPDATE tenants SET next_position = next_position + :n WHERE id = :tenant_id"
    " RETURNING next_position - :n"
)


# What an imported tool's MCP server (its definition) and source (its permission) decide.
SERVER_OWNED = frozenset(
    {"title", "description", "input_schema", "output_schema", "annotations", "required_permission"}
)


class ToolService:
    def create(self, session: Session, tenant_id: UUID, data: ToolCreate) -> Tool:
        lock_chain(session)  # before the name check: a concurrent create is then seen
        existing = session.scalar(select(Tool).where(Tool.name == data.name))
        if existing is not None and existing.deleted_at is None:
            raise Conflict(f"tool {data.name!r} already exists", field="name")
        self.upsert(session, tenant_id, [data], field="")
        tool = session.scalar(select(Tool).where(Tool.name == data.name))
        assert tool is not None
        return tool

    def upsert(
        self,
        session: Session,
        tenant_id: UUID,
        items: Sequence[ToolCreate],
        *,
        field: str = "tools",
        source: str = "manual",
        named: Sequence[frozenset[str]] | None = None,
    ) -> UpsertResult:
        """Create or update by name. Unchanged tools keep version and position; a deleted
        tool with the same name comes back at its old position with a new version.

        `named[i]`: the fields item i was given. A live tool keeps its values of the
        `CATALOG_FIELDS` its item was not given, read under the writer lock, so that a
        permission another admin set meanwhile is not written back as none."""
        if named is not None:
            items = self.keeping_catalog_fields(session, items, named)  # the answer if unchanged
        seen: dict[str, int] = {}
        for index, item in enumerate(items):
            if item.name in seen:
                raise Unprocessable(
                    f"duplicate name {item.name!r} (also {field}[{seen[item.name]}])",
                    field=f"{field}[{index}].name" if field else "name",
                )
            seen[item.name] = index
        if (
            nothing := self._nothing_to_write(session, items, field=field, source=source)
        ) is not None:
            return nothing
        # One tool writer per tenant at a time, so that a version and the statistics move
        # from the last committed write; rows loaded before the lock are read again.
        lock_chain(session, tenant_id)
        existing = {
            t.name: t
            for t in session.scalars(
                select(Tool)
                .where(Tool.name.in_([i.name for i in items]))
                .execution_options(populate_existing=True)
            )
        }
        if named is not None:  # again, as committed before this write
            items = self.keeping_catalog_fields(session, items, named)
        permission_ids = self._permission_ids(session, items, field=field, source=source)
        previous = {t.id: Previous.of(t) for t in existing.values() if t.deleted_at is None}
        now = datetime.now(UTC)
        created: list[Tool] = []
        changed: list[Tool] = []
        statuses: dict[str, str] = {}
        for index, item in enumerate(items):
            permission_id = permission_ids.get(item.required_permission or "")
            tool = existing.get(item.name)
            if tool is not None and tool.source != source:
                path = f"{field}[{index}].name" if field else "name"
                # An imported tool's definition is its server's; a manual write must not
                # overwrite it (nor a sync a manual tool).
                if tool.deleted_at is None:
                    raise Conflict(
                        f"tool {item.name!r} comes from {tool.source}, not {source}", field=path
                    )
                # A tool its MCP source removed, rejected or had deleted by hand is still
                # that source's: it comes back at the next listing or approval, which a
                # writer that took the name over would break for the whole source.
                if (claim := self._claimed(session, tool.id)) is not None:
                    raise Conflict(
                        f"tool {item.name!r} belongs to MCP source {claim!r} (not live there"
                        " now); its name is free once the source is deleted",
                        field=path,
                    )
                # A deleted tool no source claims has a free name: the new writer takes it
                # over, at the old position, with a new version.
                tool.source = source
            if tool is None:
                tool = Tool(tenant_id=tenant_id, id=uuid.uuid4(), name=item.name, version=1)
                tool.source = source
                created.append(tool)
                statuses[item.name] = "created"
            _assign(tool, item, permission_id)
            digest = content_hash(tool, item.required_permission)
            if tool not in created:
                if digest == tool.content_hash and tool.deleted_at is None:
                    statuses[item.name] = "unchanged"
                    continue
                tool.version += 1
                tool.deleted_at = None
                tool.updated_at = now
                changed.append(tool)
                statuses[item.name] = "updated"
            tool.content_hash = digest
            (
                tool.token_cost,
                tool.openai_token_cost,
                tool.mcp_token_cost,
                tool.openai_responses_token_cost,
            ) = token_costs(tool)
        if created:
            first = session.execute(
                _ALLOCATE, {"n": len(created), "tenant_id": tenant_id}
            ).scalar_one_or_none()
            if first is None:
                raise TenantDeleted()
            for offset, tool in enumerate(created):
                tool.position = first + offset
                tool.updated_at = now
            session.add_all(created)
        indexed = [*created, *changed]
        postings = analyse(session, indexed)
        session.flush()
        reindex(session, tenant_id, indexed=indexed, postings=postings, previous=previous)
        # Vectors follow in the background; the job commits with this write or not at all.
        embeddings.follow(session, [t.id for t in changed])
        embeddings.enqueue(session, tenant_id, indexed)
        session.flush()
        by_name = {t.name: t for t in (*existing.values(), *created)}
        result = [
            UpsertItem(
                id=by_name[i.name].id,
                name=i.name,
                position=by_name[i.name].position,
                version=by_name[i.name].version,
                status=statuses[i.name],
            )
            for i in items
        ]
        counts = {
            s: sum(1 for r in result if r.status == s) for s in ("created", "updated", "unchanged")
        }
        return UpsertResult(tools=result, **counts)

    def update(self, session: Session, tool_id: UUID, data: ToolUpdate) -> Tool:
        tool = self.get(session, tool_id, for_write=True)
        if tool.deleted_at is not None:
            raise NotFound("tool not found", field="tool_id")
        fields = data.model_fields_set
        if tool.source != "manual" and (changed := sorted(fields & SERVER_OWNED)):
            raise Conflict(
                f"{changed[0]}: this tool comes from {tool.source}, whose server owns its"
                " definition; set its permission with PATCH /admin/v1/mcp/tools/{id}",
                field=changed[0],
            )
        merged = ToolCreate(
            name=tool.name,
            title=data.title if "title" in fields else tool.title,
            description=data.description if "description" in fields else tool.description,
            input_schema=data.input_schema if "input_schema" in fields else tool.input_schema,
            examples=data.examples if "examples" in fields else tool.examples,
            required_permission=(
                data.required_permission
                if "required_permission" in fields
                else self.permission_name(session, tool.required_permission_id)
            ),
            core=data.core if "core" in fields else tool.core,
            output_schema=data.output_schema if "output_schema" in fields else tool.output_schema,
            annotations=data.annotations if "annotations" in fields else tool.annotations,
        )
        self.upsert(session, tool.tenant_id, [merged], field="", source=tool.source)
        return tool

    def delete(self, session: Session, tool_id: UUID) -> None:
        tool = self.get(session, tool_id, for_write=True)
        if tool.deleted_at is not None:
            return
        previous = {tool.id: Previous.of(tool)}
        tool.deleted_at = datetime.now(UTC)
        tool.updated_at = tool.deleted_at
        session.flush()
        reindex(session, tool.tenant_id, indexed=[], postings={}, removed=[tool], previous=previous)
        embeddings.forget(session, [tool.id])

    def _claimed(self, session: Session, tool_id: UUID) -> str | None:
        """The name of the MCP source that still maps a tool, if any."""
        return session.scalar(
            select(McpSource.name)
            .join(McpTool, McpTool.source_id == McpSource.id)
            .where(McpTool.tool_id == tool_id)
        )

    def catalog_fields(
        self, session: Session, names: Sequence[str]
    ) -> dict[str, dict[str, object]]:
        """The permission, core flag and examples of the live tools of these names, by
        `ToolCreate` field: what an import keeps where its file names none."""
        rows = session.execute(
            select(Tool.name, Permission.name, Tool.core, Tool.examples)
            .outerjoin(Permission, Permission.id == Tool.required_permission_id)
            .where(Tool.name.in_(names), Tool.deleted_at.is_(None))
        ).all()
        return {
            name: {"required_permission": permission, "core": core, "examples": list(examples)}
            for name, permission, core, examples in rows
        }

    def keeping_catalog_fields(
        self, session: Session, items: Sequence[ToolCreate], named: Sequence[frozenset[str]]
    ) -> list[ToolCreate]:
        """Each item with the catalog's values of the `CATALOG_FIELDS` it does not name
        (`named[i]`): writing a tool again from a source that knows nothing of permissions
        never makes a restricted tool public. `upsert(..., named=...)` applies it before
        taking the writer lock (for the answer to an unchanged catalog) and again under it."""
        current = self.catalog_fields(session, [i.name for i in items])
        kept = []
        for item, given in zip(items, named, strict=True):
            now = current.get(item.name, {})
            keep = {f: now[f] for f in CATALOG_FIELDS if f in now and f not in given}
            changed = {f: v for f, v in keep.items() if v != getattr(item, f)}
            kept.append(item.model_copy(update=changed) if changed else item)
        return kept

    def get(self, session: Session, tool_id: UUID, *, for_write: bool = False) -> Tool:
        """`for_write`: after the tenant's tool writers before it (see `upsert`)."""
        if for_write:
            lock_chain(session)
        tool = session.get(Tool, (session.info["tenant_id"], tool_id), populate_existing=for_write)
        if tool is None:
            raise NotFound("tool not found", field="tool_id")
        return tool

    def list_page(
        self, session: Session, *, after: int | None, limit: int, include_deleted: bool = False
    ) -> tuple[Sequence[Tool], int | None]:
        query = select(Tool).order_by(Tool.position).limit(limit + 1)
        if after is not None:
            query = query.where(Tool.position > after)
        if not include_deleted:
            query = query.where(Tool.deleted_at.is_(None))
        tools = session.scalars(query).all()
        if len(tools) > limit:
            return tools[:limit], tools[limit - 1].position
        return tools, None

    def read(self, session: Session, tools: Sequence[Tool]) -> list[ToolRead]:
        ids = {t.required_permission_id for t in tools if t.required_permission_id}
        names = (
            dict(
                session.execute(
                    select(Permission.id, Permission.name).where(Permission.id.in_(ids))
                ).all()
            )
            if ids
            else {}
        )
        return [
            ToolRead.model_validate(
                {
                    **{
                        c: getattr(t, c)
                        for c in ToolRead.model_fields
                        if c != "required_permission"
                    },
                    "required_permission": names.get(t.required_permission_id)
                    if t.required_permission_id
                    else None,
                }
            )
            for t in tools
        ]

    def permission_name(self, session: Session, permission_id: UUID | None) -> str | None:
        if permission_id is None:
            return None
        return session.scalar(select(Permission.name).where(Permission.id == permission_id))

    def _nothing_to_write(
        self, session: Session, items: Sequence[ToolCreate], *, field: str, source: str
    ) -> UpsertResult | None:
        """The answer to an upsert that would change no tool, read without the tenant's writer
        lock; None when any tool would change (the write then takes the lock and reads again).

        Re-importing an unchanged catalog is the common case (an idempotent deploy step, a
        resync) and wrote nothing already, but it held the lock while it loaded and hashed
        every tool: two such loops of 1,000 tools let a delete through every few seconds. An
        answer read here is one the locked path would have given at that moment."""
        self._permission_ids(session, items, field=field, source=source)  # the same refusals
        rows = session.execute(
            select(
                Tool.name, Tool.id, Tool.position, Tool.version, Tool.content_hash, Tool.source,
                Tool.deleted_at,
            ).where(Tool.name.in_([i.name for i in items]))
        ).all()  # fmt: skip
        current = {row.name: row for row in rows}
        answer: list[UpsertItem] = []
        for item in items:
            row = current.get(item.name)
            if (
                row is None
                or row.deleted_at is not None
                or row.source != source
                or row.content_hash != content_hash(item, item.required_permission)
            ):
                return None
            answer.append(
                UpsertItem(
                    id=row.id, name=item.name, position=row.position, version=row.version,
                    status="unchanged",
                )
            )  # fmt: skip
        return UpsertResult(tools=answer, created=0, updated=0, unchanged=len(answer))

    def _permission_ids(
        self, session: Session, items: Sequence[ToolCreate], *, field: str, source: str
    ) -> dict[str, UUID]:
        """Permission ids by name; an unknown one is refused naming the item that asked for it.

        A reserved permission (`mcp.review`) marks an imported tool held for review: a manual
        tool that required it would be hidden from every agent and in no review queue.
        """
        found = access.find_permission_ids(
            session, (i.required_permission for i in items if i.required_permission)
        )
        for index, item in enumerate(items):
            path = f"{field}[{index}].required_permission" if field else "required_permission"
            if source == "manual" and item.required_permission in RESERVED_PERMISSIONS:
                raise Unprocessable(
                    f"{item.required_permission!r} is reserved for MCP tools held for review",
                    field=path,
                )
            if item.required_permission and item.required_permission not in found:
                raise Unprocessable(f"unknown permission {item.required_permission!r}", field=path)
        return found


def _assign(tool: Tool, item: ToolCreate, permission_id: UUID | None) -> None:
    tool.title = item.title
    tool.description = item.description
    tool.input_schema = item.input_schema
    tool.examples = item.examples
    tool.required_permission_id = permission_id
    tool.core = item.core
    tool.output_schema = item.output_schema
    tool.annotations = item.annotations


tool = ToolService()
