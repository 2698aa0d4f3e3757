"""Manage tenants, keys and catalogs; the selection report."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated
from uuid import UUID

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from sqlalchemy.orm import Session

from .. import stack
from ..access.schemas import KeyCreate
from ..access.service import access
from ..db import ALL_PERMISSIONS, Database
from ..errors import AppError
from ..kit.commands import (
    DataDir,
    Tenant,
    err,
    fail,
    known_tenant,
    settings_for,
    tenant_session,
    valid,
)
from ..security import audit
from ..tenants.schemas import TenantCreate, TenantUpdate
from ..tenants.service import tenant as tenant_service
from ..tools.importer import CatalogError, Imported, read_catalog
from ..tools.service import tool as tool_service
from .base import app, console
from .run import every_tenant

tenant_app = typer.Typer(help="Tenants.", no_args_is_help=True)
key_app = typer.Typer(help="API keys.", no_args_is_help=True)
tools_app = typer.Typer(help="Tool catalogs.", no_args_is_help=True)


@tenant_app.command("create")
def tenant_create(name: str, data_dir: DataDir = None) -> None:
    """Create a tenant and print its first admin key (shown once)."""
    settings = settings_for(data_dir)
    data = valid(TenantCreate, name=name)
    with stack.database_url(settings) as url:
        database = Database(url, pool_size=1)
        with database.unit_of_work(None) as session:
            audit.track(session, audit.Actor("cli"))
            created = tenant_service.create(session, data, pepper=settings.key_pepper)
        database.dispose()
    console.print(f"tenant [bold]{created.tenant.id}[/bold] ({name})")
    # Plain echo: rich would wrap a long secret across lines.
    typer.echo(f"admin key (shown once): {created.admin_key.secret}")


@tenant_app.command("list")
def tenant_list(data_dir: DataDir = None) -> None:
    """Every tenant with its id and live tool count, oldest first."""
    settings = settings_for(data_dir)
    with stack.database_url(settings) as url:
        database = Database(url, pool_size=1)
        try:
            tenants = every_tenant(database)
        finally:
            database.dispose()
    table = Table("id", "name", "tools", "created (UTC)", box=None)
    for item in tenants:
        created = item.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
        table.add_row(str(item.id), item.name, str(item.tools), created)
    console.print(table)


@tenant_app.command("delete")
def tenant_delete(
    tenant: Annotated[UUID, typer.Argument(help="Tenant id.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Delete a tenant with its catalog, keys, roles, vectors and logs, for good."""
    settings = settings_for(data_dir)
    with stack.database_url(settings) as url:
        database = Database(url, pool_size=1)
        try:
            known_tenant(database, tenant)
            if not yes:
                with database.unit_of_work(tenant, permissions=ALL_PERMISSIONS) as session:
                    name = tenant_service.get(session).name
                typer.confirm(
                    f"Delete tenant {tenant} ({name}) and everything it owns? This cannot be undone.",
                    abort=True,
                )
            with database.unit_of_work(tenant, permissions=ALL_PERMISSIONS) as session:
                audit.track(session, audit.Actor("cli"))
                deleted = tenant_service.delete(session)
        finally:
            database.dispose()
    console.print(
        f"deleted tenant {tenant} ({deleted.name}): {_count_of(deleted.tools, 'tool')}, "
        f"{_count_of(deleted.keys, 'key')}"
        + (", its analyst login" if deleted.analyst_login else "")
    )


@tenant_app.command("settings")
def tenant_settings(
    tenant: Annotated[UUID, typer.Argument(help="Tenant id.")],
    merge: Annotated[
        str | None,
        typer.Option(
            "--set",
            help="Settings to merge first (JSON, as PATCH /admin/v1/tenant merges them; a null"
            """ removes its key), e.g. '{"text_search": "german"}'.""",
        ),
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Print the tenant's retrieval settings as JSON, after merging `--set` into them."""
    update = None
    if merge is not None:
        try:
            given = json.loads(merge)
        except json.JSONDecodeError as error:
            fail(f"--set: not JSON: {error}")
        update = valid(TenantUpdate, settings=given)
    with tenant_session(tenant, data_dir) as session:
        if update is None:
            row, reindexed_with = tenant_service.get(session), None
        else:
            updated = tenant_service.update(session, update)
            row, reindexed_with = updated.tenant, updated.reindexed_with
        settings = dict(row.settings)
    if reindexed_with is not None:
        err.print(f"the catalog was indexed again with text search {reindexed_with!r}")
    typer.echo(json.dumps(settings, indent=2, sort_keys=True))


def _count_of(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


@key_app.command("create")
def key_create(
    tenant: Annotated[UUID, typer.Option(help="Tenant id.")],
    name: Annotated[str, typer.Option(help="A label for the key.")],
    scope: Annotated[str, typer.Option(help="admin or agent.")] = "agent",
    role: Annotated[
        list[str] | None, typer.Option(help="Role the agent key may assert (repeat).")
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Create an API key and print it (shown once)."""
    data = valid(KeyCreate, name=name, scope=scope, roles=role or [])
    pepper = settings_for(data_dir).key_pepper
    with tenant_session(tenant, data_dir) as session:
        key = access.create_key(session, tenant, data, pepper=pepper)
    typer.echo(f"{scope} key (shown once): {key.secret}")


@key_app.command("list")
def key_list(tenant: Tenant, data_dir: DataDir = None) -> None:
    """The tenant's keys, oldest first (never a secret: the prefix tells them apart)."""
    with tenant_session(tenant, data_dir) as session:
        keys = access.list_keys(session)
    # A line a key, never cut: `key revoke` takes the id, and the prefix is how a holder
    # tells which key is theirs.
    for key in keys:
        state = f"revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else "active"
        roles = f"  roles: {', '.join(key.roles)}" if key.roles else ""
        console.print(
            f"{key.id}  {key.scope:<5}  {key.prefix}  {state}  created"
            f" {key.created_at:%Y-%m-%d}  {key.name!r}{roles}",
            soft_wrap=True,
            highlight=False,
        )


@key_app.command("revoke")
def key_revoke(
    key_id: Annotated[UUID, typer.Argument(help="The key's id (`toolsift key list`).")],
    tenant: Tenant,
    data_dir: DataDir = None,
) -> None:
    """Revoke a key: refused from its next request on."""
    with tenant_session(tenant, data_dir) as session:
        already = access.get_key(session, key_id).revoked_at is not None
        key = access.revoke_key(session, key_id)
    said = "was already revoked" if already else "revoked"
    console.print(f"{key.scope} key {key.name!r} ({key.prefix}) {said}")


@tools_app.command("import")
def tools_import(
    file: Annotated[Path, typer.Argument(help="tools.jsonl: {id, name, description, parameters}")],
    tenant: Annotated[UUID, typer.Option(help="Tenant id.")],
    batch: Annotated[int, typer.Option(min=1, max=1000, help="Tools per transaction.")] = 500,
    data_dir: DataDir = None,
) -> None:
    """Import (upsert by name) a catalog; each batch commits on its own.

    A tool already in the catalog keeps its permission, core flag and examples unless the
    file names them: re-importing a file never makes a restricted tool public."""
    settings = settings_for(data_dir)
    try:
        items = list(read_catalog(file))
    except CatalogError as error:
        # The whole file is read before the first write.
        fail(f"{error} (nothing was imported)")
    totals = {"created": 0, "updated": 0, "unchanged": 0}
    kept = 0
    with stack.database_url(settings) as url:
        database = Database(url, pool_size=1)
        known_tenant(database, tenant)
        try:
            with database.unit_of_work(tenant, permissions=ALL_PERMISSIONS) as session:
                _known_permissions(session, file, items)
            columns = (
                TextColumn("importing"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
            )
            with Progress(*columns, console=console) as progress:
                task = progress.add_task("import", total=len(items))
                for start in range(0, len(items), batch):
                    chunk = items[start : start + batch]
                    with database.unit_of_work(tenant, permissions=ALL_PERMISSIONS) as session:
                        audit.track(session, audit.Actor("cli"))
                        given = [i.given for i in chunk]
                        tools = tool_service.keeping_catalog_fields(
                            session, [i.tool for i in chunk], given
                        )
                        kept += sum(t is not i.tool for t, i in zip(tools, chunk, strict=True))
                        try:
                            result = tool_service.upsert(session, tenant, tools, named=given)
                        except AppError as error:
                            raise _ImportStopped(file, chunk, error, sum(totals.values())) from None
                    for status in totals:
                        totals[status] += getattr(result, status)
                    progress.advance(task, len(chunk))
        except _ImportStopped as stopped:
            fail(str(stopped))
        except AppError as error:
            fail(error.message)
        finally:
            database.dispose()
    console.print(", ".join(f"{n} {s}" for s, n in totals.items()))
    if kept:
        console.print(
            f"{kept} existing tool(s) kept the permission, core flag or examples"
            " the file does not name"
        )


class _ImportStopped(Exception):
    """A batch the service refused: where, why, and what the batches before it committed."""

    def __init__(self, file: Path, chunk: list[Imported], error: AppError, done: int) -> None:
        where = f"{file}:{chunk[0].line}-{chunk[-1].line}"
        if error.field and (found := re.match(r"tools\[(\d+)\]\.?(.*)", error.field)):
            item = chunk[int(found[1])]
            where = f"{file}:{item.line}: tool {item.source_id!r}"
            if found[2]:
                where += f": {found[2]}"
        done_words = (
            f"the {done} tool(s) before it were imported" if done else "nothing was imported"
        )
        super().__init__(
            f"{where}: {error.message} ({done_words}; this batch and the rest were not)"
        )


def _known_permissions(session: Session, file: Path, items: list[Imported]) -> None:
    """Every permission the file names exists, or nothing is written."""
    named = {i.tool.required_permission for i in items if i.tool.required_permission}
    found = access.find_permission_ids(session, named)
    for item in items:
        if item.tool.required_permission and item.tool.required_permission not in found:
            fail(
                f"{file}:{item.line}: tool {item.source_id!r}: required_permission: unknown"
                f" permission {item.tool.required_permission!r} (nothing was imported)"
            )


@app.command()
def report(
    tenant: Annotated[UUID, typer.Option(help="Tenant id.")],
    since: Annotated[
        datetime | None,
        typer.Option(formats=["%Y-%m-%d"], help="First day (UTC) of the day-based tables."),
    ] = None,
    until: Annotated[
        datetime | None, typer.Option(formats=["%Y-%m-%d"], help="First day (UTC) excluded.")
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Selection analytics of a tenant: recall of the called tool, tokens, latency, top
    tools, empty results, near-duplicates, unused tools, drift after new versions."""
    from ..analytics.report import render

    if since and until and until <= since:
        fail(f"--until ({until:%Y-%m-%d}) must be after --since ({since:%Y-%m-%d})")
    settings = settings_for(data_dir)
    with stack.database_url(settings) as url:
        database = Database(url, pool_size=1)
        known_tenant(database, tenant)
        try:
            with database.unit_of_work(tenant, permissions=ALL_PERMISSIONS) as session:
                render(
                    console,
                    session,
                    since=since.date() if since else None,
                    until=until.date() if until else None,
                )
        finally:
            database.dispose()
