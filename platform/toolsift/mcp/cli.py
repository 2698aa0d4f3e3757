"""`toolsift mcp ...`: register, sync and review MCP sources from the shell.

Like the other management commands these talk to the database (embedded or DATABASE_URL).
Secrets are never taken as arguments (they would land in shell history): a bearer token or
a header value is read from an environment variable named on the command line.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated
from uuid import UUID

import anyio
import typer
from rich.console import Console
from rich.markup import escape
from sqlalchemy import select
from sqlalchemy.orm import Session

from .. import stack
from ..config import Settings
from ..db import ALL_PERMISSIONS, Database
from ..errors import AppError
from ..kit.commands import DataDir, err, fail, known_tenant, settings_for, valid
from ..models import McpSource, Tool
from ..security import audit
from .listener import OnChange
from .schemas import SourceCreate
from .service import SYNC_ACTOR, mcp
from .sync import Due, sync_source

app = typer.Typer(help="MCP sources: import tool catalogs from MCP servers.", no_args_is_help=True)
console = Console()

Tenant = Annotated[UUID, typer.Option(help="Tenant id.")]


@contextmanager
def _database(settings: Settings, tenant: UUID | None) -> Iterator[Database]:
    with stack.database_url(settings) as url:
        database = Database(url, pool_size=2)
        try:
            if tenant is not None:
                known_tenant(database, tenant)
            yield database
        except AppError as error:
            fail(f"{error.field}: {error.message}" if error.field else error.message)
        finally:
            database.dispose()


@contextmanager
def _session(database: Database, tenant: UUID) -> Iterator[Session]:
    with database.unit_of_work(tenant, permissions=ALL_PERMISSIONS) as session:
        audit.track(session, audit.Actor("cli"))
        yield session


def _source(session: Session, ref: str) -> McpSource:
    try:
        return mcp.get(session, UUID(ref))
    except ValueError:
        source = session.scalar(select(McpSource).where(McpSource.name == ref))
        if source is None:
            fail(f"no source named {ref!r}")
        return source


def _from_env(variable: str) -> str:
    value = os.environ.get(variable)
    if not value:
        fail(f"environment variable {variable} is not set")
    return value


@app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Source name (unique in the tenant).")],
    tenant: Tenant,
    url: Annotated[str | None, typer.Option(help="Streamable HTTP endpoint.")] = None,
    command: Annotated[str | None, typer.Option(help="stdio: the program to run.")] = None,
    arg: Annotated[list[str] | None, typer.Option(help="stdio: an argument (repeat).")] = None,
    header_env: Annotated[
        list[str] | None,
        typer.Option(help="NAME=VARIABLE: send header NAME with the value of $VARIABLE."),
    ] = None,
    bearer_token_env: Annotated[
        str | None, typer.Option(help="Variable holding the bearer token.")
    ] = None,
    prefix: Annotated[str | None, typer.Option(help="Tool name prefix (default: name).")] = None,
    permission: Annotated[
        str | None, typer.Option(help="Permission the source's tools require.")
    ] = None,
    sync: Annotated[bool, typer.Option("--sync/--no-sync", help="Sync right away.")] = True,
    data_dir: DataDir = None,
) -> None:
    """Register an MCP server as a source of tools."""
    headers = {}
    for entry in header_env or []:
        header, _, variable = entry.partition("=")
        if not header or not variable:
            fail(f"--header-env takes NAME=VARIABLE, not {entry!r}")
        headers[header] = _from_env(variable)
    data = valid(
        SourceCreate,
        name=name,
        transport="stdio" if command else "http",
        url=url,
        command=command,
        args=arg or [],
        headers=headers or None,
        bearer_token=_from_env(bearer_token_env) if bearer_token_env else None,
        prefix=prefix,
        default_permission=permission,
    )
    settings = settings_for(data_dir)
    with _database(settings, tenant) as database:
        with _session(database, tenant) as session:
            source = mcp.create(session, tenant, data, settings=settings)
        console.print(f"source [bold]{source.id}[/bold] ({source.name}), prefix {source.prefix!r}")
        if sync:
            result = sync_source(
                database, tenant, source.id, settings=settings, actor=audit.Actor("cli")
            )
            _print_sync(result)
            if result.status == "failed":  # the source stays; `mcp sync` tries again
                raise typer.Exit(1)


@app.command("list")
def list_sources(tenant: Tenant, data_dir: DataDir = None) -> None:
    """Sources with their health, last error and tools held for review."""
    with (
        _database(settings_for(data_dir), tenant) as database,
        _session(database, tenant) as session,
    ):
        sources = mcp.read(session, mcp.list_sources(session))
    # A block per source, not a table: eight columns do not fit a terminal, and rich cut
    # the id (which `sync` and the API take) and the error to a few characters.
    for s in sources:
        synced = s.last_synced_at.isoformat(timespec="seconds") if s.last_synced_at else "never"
        console.print(
            f"[bold]{escape(s.name)}[/bold] {s.health}, {s.tool_count} tools,"
            f" {s.held_count} held, {s.transport}, last synced {synced}",
            highlight=False,
        )
        console.print(f"  id {s.id}", highlight=False)
        if s.last_error:
            console.print(f"  error: {escape(s.last_error)}", highlight=False)
    if not sources:
        console.print("no sources")


@app.command("sync")
def sync(
    source: Annotated[str, typer.Argument(help="Source name or id.")],
    tenant: Tenant,
    data_dir: DataDir = None,
) -> None:
    """Sync a source now."""
    settings = settings_for(data_dir)
    with _database(settings, tenant) as database:
        with _session(database, tenant) as session:
            found = _source(session, source)
            source_id, enabled = found.id, found.enabled
        if not enabled:  # as the API answers it (409), not a quiet "skipped"
            err.print(f"source {source} is disabled; enable it first")
            raise typer.Exit(2)
        result = sync_source(
            database, tenant, source_id, settings=settings, actor=audit.Actor("cli")
        )
    _print_sync(result)
    if result.status == "failed":
        raise typer.Exit(1)


def _print_sync(result: object) -> None:
    data = result.model_dump() if hasattr(result, "model_dump") else {}
    if data.get("status") == "failed":
        err.print(f"[red]sync failed:[/red] {data['error']}", highlight=False)
        return
    counts = ", ".join(
        f"{data[k]} {k}" for k in ("created", "updated", "unchanged", "removed", "held")
    )
    console.print(f"{data['status']}: {data['tools']} tools in {data['pages']} pages ({counts})")


@app.command("review")
def review(tenant: Tenant, data_dir: DataDir = None) -> None:
    """Tools held for review, with why they were flagged and the hash to approve."""
    with (
        _database(settings_for(data_dir), tenant) as database,
        _session(database, tenant) as session,
    ):
        rows = mcp.read_tools(session, mcp.list_tools(session, source_id=None, state="held"))
    if not rows:
        console.print("nothing to review")
    for row in rows:
        console.print(f"[bold]{row.name}[/bold] ({row.tool_id})  hash {row.definition_hash}")
        for finding in row.findings:
            console.print(f"  {finding['rule']} in {finding['field']}: {finding['excerpt']!r}")
        if not row.findings:
            console.print("  changed since it was approved or rejected")
        console.print(json.dumps(row.definition, indent=2, ensure_ascii=True)[:4000])


def _decide(
    tool: str, tenant: UUID, definition_hash: str, approve: bool, data_dir: Path | None
) -> None:
    with (
        _database(settings_for(data_dir), tenant) as database,
        _session(database, tenant) as session,
    ):
        try:
            tool_id = UUID(tool)
        except ValueError:
            found = session.scalar(select(Tool.id).where(Tool.name == tool))
            if found is None:
                fail(f"no tool named {tool!r}")
            tool_id = found
        decide = mcp.approve if approve else mcp.reject
        row = decide(session, tool_id, definition_hash)
    console.print(f"{row.remote_name}: {row.review_state}")


def _sha256_hex(value: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise typer.BadParameter("a definition hash is 64 lowercase hex digits (sha256)")
    return value


Hash = Annotated[
    str,
    typer.Option("--hash", help="The definition hash you reviewed.", callback=_sha256_hex),
]


@app.command("approve")
def approve(
    tool: Annotated[str, typer.Argument(help="Registry tool name or id.")],
    tenant: Tenant,
    definition_hash: Hash,
    data_dir: DataDir = None,
) -> None:
    """Serve a held tool; its hash is pinned, so a later change holds it again."""
    _decide(tool, tenant, definition_hash, approve=True, data_dir=data_dir)


@app.command("reject")
def reject(
    tool: Annotated[str, typer.Argument(help="Registry tool name or id.")],
    tenant: Tenant,
    definition_hash: Hash,
    data_dir: DataDir = None,
) -> None:
    """Keep a held tool out of the registry until the server changes it."""
    _decide(tool, tenant, definition_hash, approve=False, data_dir=data_dir)


def change_handler(database: Database, settings: Settings, *, inline: bool) -> OnChange:
    """What a tools-list-changed event does: queue `mcp.sync` (or sync here, without Redis)."""
    if inline or not settings.redis_url:

        def sync_here(due: Due) -> None:
            sync_source(database, due.tenant_id, due.source_id, settings=settings, actor=SYNC_ACTOR)

        return sync_here
    from celery import Celery

    client = Celery("toolsift", broker=settings.redis_url)

    def enqueue(due: Due) -> None:
        client.send_task(
            "mcp.sync", kwargs={"tenant_id": str(due.tenant_id), "source_id": str(due.source_id)}
        )

    return enqueue


def start_listener(database: Database, settings: Settings) -> threading.Thread:
    """The listener in a daemon thread of this process (`toolsift up`: one machine)."""
    from .listener import supervise

    on_change = change_handler(database, settings, inline=False)
    thread = threading.Thread(
        target=anyio.run,
        args=(lambda: supervise(database, on_change, settings=settings),),
        name="mcp-listener",
        daemon=True,
    )
    thread.start()
    return thread


@app.command("listen")
def listen(
    inline: Annotated[
        bool, typer.Option(help="Sync in this process instead of queueing mcp.sync tasks.")
    ] = False,
    refresh: Annotated[float, typer.Option(help="Seconds between source list reads.")] = 30.0,
    data_dir: DataDir = None,
) -> None:
    """Hold sessions to the sources' servers and sync on tools-list-changed (run one;
    `toolsift up` runs it already)."""
    from .listener import supervise

    settings = settings_for(data_dir)
    with _database(settings, None) as database:
        on_change = change_handler(database, settings, inline=inline)
        console.print("listening for tools-list-changed (Ctrl-C stops)")
        anyio.run(lambda: supervise(database, on_change, settings=settings, refresh=refresh))
