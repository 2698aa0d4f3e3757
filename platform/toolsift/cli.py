"""`toolsift`: run the product, manage tenants and catalogs, select from the shell."""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, NoReturn
from uuid import UUID

import httpx
import psycopg
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markdown import Markdown
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text
from sqlalchemy import select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from . import stack
from .access.cli import permission_app, role_app
from .access.schemas import KeyCreate
from .access.service import access
from .config import Settings, get_settings, libpq_url
from .db import ALL_PERMISSIONS, Database
from .embedded import EmbeddedPostgres, EmbeddedRedis, EmbeddedServiceError
from .embedding.base import EmbeddingError, get_backend
from .embedding.onnx import OnnxBackend
from .errors import AppError
from .kit.commands import (
    DataDir,
    Tenant,
    err,
    fail,
    known_tenant,
    settings_for,
    tenant_session,
    unwritable,
    valid,
)
from .kit.interrupts import StickyInterrupt
from .mcp.cli import app as mcp_app
from .mcp.cli import start_listener
from .migrate import ensure_database, upgrade
from .models import Tenant as TenantRow
from .ops.logging import Redactor
from .security import audit
from .tenants.schemas import TenantCreate, TenantSummary
from .tenants.service import tenant as tenant_service
from .tools.importer import CatalogError, Imported, read_catalog
from .tools.service import tool as tool_service

app = typer.Typer(help="toolsift: the few tools each agent turn needs.", no_args_is_help=True)
tenant_app = typer.Typer(help="Tenants.", no_args_is_help=True)
key_app = typer.Typer(help="API keys.", no_args_is_help=True)
tools_app = typer.Typer(help="Tool catalogs.", no_args_is_help=True)
app.add_typer(tenant_app, name="tenant")
app.add_typer(key_app, name="key")
app.add_typer(tools_app, name="tools")
app.add_typer(permission_app, name="permission")
app.add_typer(role_app, name="role")
app.add_typer(mcp_app, name="mcp")
try:
    from .bench.cli import app as bench_app

    app.add_typer(bench_app, name="bench")
except ImportError:  # pragma: no cover - the bench extra is not installed
    pass

console = Console()


@app.command()
def migrate(data_dir: DataDir = None) -> None:
    """Apply the database migrations (Alembic) up to head."""
    settings = settings_for(data_dir)
    with stack.database_url(settings) as url:
        upgrade(url)
    console.print("[green]migrated to head[/green]")


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Interface to bind (default: TOOLSIFT_HOST, else 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(min=1, max=65535, help="TCP port (default: TOOLSIFT_PORT, else 8000)."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1, help="uvicorn worker processes (default: TOOLSIFT_API_WORKERS, else 1)."
        ),
    ] = None,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            help="Proxies whose X-Forwarded-For gives the client address, comma-separated"
            " (default: TOOLSIFT_FORWARDED_ALLOW_IPS, else 127.0.0.1,::1)."
        ),
    ] = None,
) -> None:
    """Serve the HTTP API against DATABASE_URL (no embedded services)."""
    import uvicorn

    from .ops.multiprocess import prepare_multiprocess_dir

    # Unset options come from the settings: the environment or `.env`, like every other one.
    settings = get_settings()
    if not settings.database_url:
        fail("DATABASE_URL is not set (use `toolsift up` for the embedded stack)")
    try:  # refused here in one line, not in each uvicorn worker's traceback
        settings.check_secrets()
    except ValueError as error:
        fail(str(error))
    prepare_multiprocess_dir()
    # The app logs each request itself, with its request id; uvicorn's access log is off
    # (`ops.logging.configure` keeps its logger without a handler).
    uvicorn.run(
        "toolsift.app:create_app",
        factory=True,
        host=host or settings.host,
        port=port or settings.port,
        workers=workers or settings.api_workers,
        log_level=settings.log_level.lower(),
        access_log=False,
        proxy_headers=True,
        forwarded_allow_ips=forwarded_allow_ips or settings.forwarded_allow_ips,
    )


def _worker_command(
    concurrency: int, *, beat_schedule: Path | None, loglevel: str | None = None
) -> list[str]:
    # The level of TOOLSIFT_LOG_LEVEL unless told otherwise (the worker logs through the
    # same handler as the API: `workers.celery_app` connects Celery's setup_logging).
    loglevel = loglevel or get_settings().log_level
    command = [sys.executable, "-m", "celery", "-A", "workers", "worker", "--loglevel", loglevel]
    command += ["--concurrency", str(concurrency)]
    if beat_schedule is not None:
        # The relay's schedule runs inside this worker: one process for a single machine.
        command += ["--beat", "--schedule", str(beat_schedule)]
    return command


def _become(command: list[str]) -> NoReturn:
    """Replace this process with `command`: a supervisor's SIGTERM then reaches Celery itself
    (a child left behind by a killed parent kept embedding and scheduling)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


@app.command()
def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1, help="Worker processes (default: TOOLSIFT_WORKER_CONCURRENCY, else 1)."
        ),
    ] = None,
    beat: Annotated[
        bool,
        typer.Option(
            "--beat/--no-beat",
            help="Also run the schedule (outbox relay) in this worker; run exactly one.",
        ),
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Start a Celery worker (needs DATABASE_URL and REDIS_URL)."""
    settings = settings_for(data_dir)
    # Celery would otherwise try redis://127.0.0.1:6379 and retry quietly for minutes.
    for name, value in (("DATABASE_URL", settings.database_url), ("REDIS_URL", settings.redis_url)):
        if not value:
            fail(f"{name} is not set (use `toolsift up` for the embedded stack)")
    try:  # a backend that cannot work fails here, not in every task, retried forever
        get_backend(settings)
    except ValueError as error:
        fail(f"embedding: {error}")
    schedule = settings.data_dir / "celerybeat-schedule" if beat else None
    _become(_worker_command(concurrency or settings.worker_concurrency, beat_schedule=schedule))


@app.command()
def reindex(
    tenant: Annotated[UUID | None, typer.Option(help="Tenant id.")] = None,
    all_tenants: Annotated[
        bool, typer.Option("--all-tenants", help="Every tenant (after a model change, say).")
    ] = False,
    force: Annotated[
        bool, typer.Option(help="Recompute vectors that are already current.")
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Queue every live tool of a tenant, or of every tenant, for embedding (after a model
    change, say).

    The old vectors keep serving until the new model covers the whole catalog.
    """
    from .embedding import service as embeddings

    if (tenant is None) == (not all_tenants):
        fail("give either --tenant ID or --all-tenants")
    settings = settings_for(data_dir)
    with stack.database_url(settings) as url:
        database = Database(url, pool_size=1)
        try:
            if tenant is not None:
                known_tenant(database, tenant)
                tenants = [tenant]
            else:
                tenants = [t.id for t in _all_tenants(database)]
            queued = 0
            for tenant_id in tenants:  # one transaction each: a big catalog holds no other
                with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
                    audit.track(session, audit.Actor("cli"))
                    queued += embeddings.reindex(session, tenant_id, force=force)
        finally:
            database.dispose()
    of = "" if tenant is not None else f" of {len(tenants)} tenants"
    # Without --force a worker skips the tools that already have a vector of its model at
    # their current version and text: queued is not the same as re-embedded.
    skipped = "" if force else " (tools whose vector is current, of their text, are skipped)"
    console.print(f"queued {queued} tools{of} for embedding{skipped}")


@app.command("prepare-model")
def prepare_model() -> None:
    """Build the local embedding model's file into its cache now (an image does this when
    it is built, so that its containers start without building it)."""
    settings = get_settings()
    if settings.embedding_backend != "onnx":
        fail(f"the {settings.embedding_backend} embedding backend has no local model to prepare")
    started = time.perf_counter()
    backend = OnnxBackend.configured(settings)
    try:
        path = backend.prepare(private_fallback=False)
        backend.warm_up()  # it loads and embeds
    except EmbeddingError as error:
        fail(str(error))
    console.print(f"{backend.model}: {path} ({time.perf_counter() - started:.1f} s)")


@app.command()
def beat(
    schedule: Annotated[
        Path, typer.Option(help="Where beat keeps its schedule state (a writable file).")
    ] = Path(tempfile.gettempdir()) / "toolsift-celerybeat-schedule",
) -> None:
    """Start Celery beat, the periodic scheduler (run exactly one)."""
    if not get_settings().redis_url:
        fail("REDIS_URL is not set (use `toolsift up` for the embedded stack)")
    command = [sys.executable, "-m", "celery", "-A", "workers", "beat"]
    command += ["--loglevel", get_settings().log_level]
    command += ["--schedule", str(schedule)]
    _become(command)


@app.command()
def ping(
    timeout: Annotated[float, typer.Option(help="Seconds to wait for an answer.")] = 5.0,
    this_host: Annotated[
        bool, typer.Option("--this-host", help="Only the worker on this host must answer.")
    ] = False,
    broker_only: Annotated[
        bool, typer.Option("--broker-only", help="Only check that the broker answers.")
    ] = False,
) -> None:
    """Health probe for workers and beat: exit 0 when the broker (and a worker) answers."""
    import socket

    from celery import Celery
    from kombu.utils.url import maybe_sanitize_url

    settings = get_settings()
    url = settings.redis_url
    if not url:  # the embedded stack of `toolsift up`, when it runs
        embedded = stack.redis(settings)
        if not embedded.is_running():
            fail(f"REDIS_URL is not set and no embedded Redis runs in {settings.data_dir}")
        url = embedded.url
    # A bare client on the broker: asking the workers needs none of their tasks (and
    # `toolsift` never imports `workers`).
    celery_app = Celery("toolsift", broker=url)
    try:
        with celery_app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=timeout)
    except Exception as error:
        fail(f"broker unreachable at {maybe_sanitize_url(url)}: {type(error).__name__}: {error}")
    if broker_only:
        console.print("broker ok")
        return
    destination = [f"celery@{socket.gethostname()}"] if this_host else None
    replies = celery_app.control.ping(destination=destination, timeout=timeout)
    if not replies:
        fail("no worker answered")
    console.print(f"{len(replies)} worker(s) answered")


@app.command()
def up(
    data_dir: DataDir = None,
    host: Annotated[
        str | None, typer.Option(help="Interface to bind (default: TOOLSIFT_HOST, else 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            min=1, max=65535, help="TCP port of the API (default: TOOLSIFT_PORT, else 8000)."
        ),
    ] = None,
    with_worker: Annotated[
        bool, typer.Option("--worker/--no-worker", help="Start a Celery worker.")
    ] = True,
    demo: Annotated[
        bool, typer.Option("--demo/--no-demo", help="Load the demo tenant once.")
    ] = True,
) -> None:
    """Run everything on this machine: PostgreSQL, Redis, migrations, a worker and the API."""
    import uvicorn

    from .app import create_app
    from .demo.loader import load_demo

    settings = settings_for(data_dir)
    host, port = host or settings.host, port or settings.port
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    # One `up` per data dir: a second would share the first's servers, stop them on its way
    # out and run a second beat on one schedule. The lock goes with this process.
    holder = (settings.data_dir / "up.lock").open("a+")
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder.seek(0)
        fail(
            f"another `toolsift up` (pid {holder.read().strip() or '?'}) is running on"
            f" {settings.data_dir.resolve()}; stop it first, or choose another --data-dir"
        )
    holder.truncate(0)
    holder.write(str(os.getpid()))
    holder.flush()
    if not _bindable(host, port):
        fail(f"port {port} on {host} is taken by another process; choose another with --port")
    # uvicorn re-raises SIGTERM once it has shut down; make that unwind through `finally`.
    signal.signal(signal.SIGTERM, _raise_exit)
    started: list[EmbeddedPostgres | EmbeddedRedis] = []
    worker_process: subprocess.Popen[bytes] | None = None
    try:
        # Ctrl-C before the API serves stops everything, even when a finalizer swallowed it.
        with StickyInterrupt() as interrupts:
            if settings.database_url:
                database_url = settings.database_url
            else:
                pg = stack.postgres(settings)
                # A server this process did not start (a `migrate` left it up) is left running.
                if not pg.is_running():
                    started.append(pg)
                database_url = ensure_database(pg.start(), stack.DATABASE_NAME)
            interrupts.check()
            if settings.redis_url:
                redis_url = settings.redis_url
            else:
                redis = stack.redis(settings)
                if not redis.is_running():
                    started.append(redis)
                redis_url = redis.start()
            interrupts.check()
            upgrade(database_url)
            interrupts.check()
            settings = settings.model_copy(
                update={"database_url": database_url, "redis_url": redis_url}
            )
            database = Database(database_url, pool_size=settings.db_pool_size)
            state = stack.state_file(settings)
            if demo and not _demo_loaded(database, state):
                stack.write_private(state, load_demo(database, pepper=settings.key_pepper))
            interrupts.check()
            if settings.embedding_backend == "onnx":
                local = OnnxBackend.configured(settings)
                # Built here once, or the worker and the API would both build it at start.
                local.prepare()
                tools, tenants = reembed_other_models(database, local.model)
                if tools:
                    console.print(
                        f"re-embedding {tools} tools of {tenants} tenants with {local.model}; "
                        "BM25 serves them alone until the new vectors cover their catalogs"
                    )
            interrupts.check()
            if with_worker:
                env = {
                    **os.environ,
                    "TOOLSIFT_DATABASE_URL": database_url,
                    "TOOLSIFT_REDIS_URL": redis_url,
                }
                schedule = settings.data_dir / "celerybeat-schedule"
                worker_process = subprocess.Popen(
                    _worker_command(1, beat_schedule=schedule, loglevel="WARNING"), env=env
                )
                # Syncs MCP sources on their servers' tools-list-changed events.
                start_listener(database, settings)
            interrupts.check()
        _banner(settings, host, port, database_url, redis_url, state if demo else None)
        uvicorn.run(
            create_app(settings, database),
            host=host,
            port=port,
            log_level="warning",
            proxy_headers=True,
            forwarded_allow_ips=settings.forwarded_allow_ips,
        )
    except EmbeddedServiceError as error:
        # A server that would not start (a taken port, a damaged data dir): its own words.
        fail(str(error))
    finally:
        try:
            if worker_process is not None:
                stop_process(worker_process, "the worker")
        finally:
            for service in reversed(started):
                service.stop()


def stop_process(process: subprocess.Popen[bytes], what: str, *, grace: float = 30.0) -> None:
    """SIGTERM (a Celery worker then finishes its task), and SIGKILL after `grace` seconds:
    a worker stuck in its warm shutdown must not keep `up` from stopping the servers."""
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        err.print(f"[yellow]{what} did not stop within {grace:g} s; killing it[/yellow]")
        process.kill()
        process.wait(timeout=10)


def _demo_loaded(database: Database, state: Path) -> bool:
    """Whether the demo tenant of `state` is still there (an operator may have deleted it)."""
    if not state.exists():
        return False
    return database.tenant_exists(UUID(json.loads(state.read_text())["tenant_id"]))


def _bindable(host: str, port: int) -> bool:
    """Whether the API could listen there (checked before any server starts)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def reembed_other_models(database: Database, model: str) -> tuple[int, int]:
    """Queue the catalogs of tenants that another model serves: (tools, tenants).

    `up` runs the API and the worker on one model, so after a change of model (a new
    default, a setting) those tenants would be served by BM25 alone until someone ran
    `toolsift reindex`. A deployment with separate API and workers changes models by hand
    (README, "Embeddings"), since the order matters there.
    """
    from .embedding import service as embeddings

    tools = tenants = 0
    for summary in _all_tenants(database):
        with database.unit_of_work(summary.id, permissions=ALL_PERMISSIONS) as session:
            served = session.scalar(
                select(TenantRow.embedding_model).where(TenantRow.id == summary.id)
            )
            if served is not None and served != model:
                queued = embeddings.reindex(session, summary.id, missing_in=model)
                tools, tenants = tools + queued, tenants + (queued > 0)
    return tools, tenants


def _all_tenants(database: Database) -> list[TenantSummary]:
    """Every tenant, oldest first, page by page (read as the observer role)."""
    tenants: list[TenantSummary] = []
    after = None
    while True:
        with database.unit_of_work(None) as session:
            page = tenant_service.list_all(session, limit=1000, after=after)
        tenants.extend(page.items)
        if page.next_cursor is None:
            return tenants
        after = page.next_cursor


def _raise_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def exposure(host: str, settings: Settings, *, demo: bool) -> str | None:
    """Why `up` on this interface deserves a warning, if it does: the development stack is
    for this machine, and since TOOLSIFT_HOST may come from a `.env` written for `serve`,
    another interface can be chosen without typing it."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        loopback = False
    if loopback:
        return None
    reasons = ["the demo tenant's keys are printed below"] if demo else []
    if settings.key_pepper.startswith("changethis"):
        reasons.append("API keys are hashed with the development pepper")
    if not settings.metrics_token:
        reasons.append("/metrics answers anyone")
    said = f"the API listens on {host}, reachable from other machines"
    return f"{said}: {'; '.join(reasons)}" if reasons else said


def _banner(
    settings: Settings, host: str, port: int, database_url: str, redis_url: str, state: Path | None
) -> None:
    url = f"http://{host}:{port}"
    table = Table(show_header=False, box=None)
    table.add_row("API", url)
    table.add_row("API docs", f"{url}/docs")
    # As psql takes it, without a password: stdout is the log under Docker or systemd.
    table.add_row("PostgreSQL", Text(Redactor()(libpq_url(database_url))))
    table.add_row("Redis", Text(Redactor()(redis_url)))
    table.add_row("data", str(settings.data_dir.resolve()))
    console.print(table)
    demo = json.loads(state.read_text()) if state is not None and state.exists() else None
    if (warning := exposure(host, settings, demo=demo is not None)) is not None:
        console.print(f"\n[bold yellow]warning:[/bold yellow] {warning}", highlight=False)
    if demo is not None:
        body = json.dumps(
            {
                "messages": [{"role": "user", "content": "where is my order? it has not shipped"}],
                "roles": ["support"],
                "k": 3,
                "budget_tokens": 2000,
            }
        )
        console.print(f"\ndemo tenant {demo['tenant_id']} (keys in {state})")
        console.print("select tools for a turn:\n")
        console.print(
            f"curl -s {url}/v1/select -H 'Authorization: Bearer {demo['agent_key']}' "
            f"-H 'Content-Type: application/json' -d {shlex.quote(body)}",
            soft_wrap=True,
            highlight=False,
        )
    console.print("\nCtrl-C stops everything.")


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
            tenants = _all_tenants(database)
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
    from .analytics.report import render

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


@app.command("select")
def select_command(
    query: Annotated[str, typer.Argument(help="The user's message.")],
    key: Annotated[str, typer.Option(envvar="TOOLSIFT_API_KEY", help="An agent key.")],
    url: Annotated[
        str, typer.Option(envvar="TOOLSIFT_URL", help="API base URL.")
    ] = "http://127.0.0.1:8000",
    role: Annotated[list[str] | None, typer.Option(help="Role to act as (repeat).")] = None,
    k: Annotated[int, typer.Option(help="Ranked tools to add.")] = 5,
    budget: Annotated[int, typer.Option(help="Token budget.")] = 4000,
    plan: Annotated[str, typer.Option(help="Task state: the plan in words.")] = "",
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="anthropic, openai (Chat Completions), openai_responses, mcp or"
            " anthropic_tool_reference.",
        ),
    ] = "anthropic",
    mode: Annotated[str, typer.Option(help="bm25, dense or hybrid.")] = "hybrid",
    debug: Annotated[bool, typer.Option(help="Show scores of the candidates.")] = False,
    raw: Annotated[bool, typer.Option(help="Print the JSON response.")] = False,
) -> None:
    """Select tools for one turn through the API, as an agent would."""
    body = {
        "messages": [{"role": "user", "content": query}],
        "task": {"plan": plan},
        "k": k,
        "budget_tokens": budget,
        "mode": mode,
        "format": output_format,
        "debug": debug,
    }
    if role:
        body["roles"] = role
    started = time.perf_counter()
    try:
        response = httpx.post(
            f"{url.rstrip('/')}/v1/select",
            json=body,
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
    except httpx.HTTPError as error:
        fail(f"cannot reach {url}: {error}")
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        fail(f"HTTP {response.status_code}: {_error_message(response)}")
    data = response.json()
    if raw:
        console.print_json(data=data)
        return
    table = Table(
        title=f"{len(data['tools'])} tools, {data['tokens']} tokens, {data['mode']},"
        f" {elapsed:.1f} ms"
    )
    table.add_column("tool")
    # A tool reference carries only the name (`anthropic_tool_reference`).
    described = output_format != "anthropic_tool_reference"
    if described:
        table.add_column("description")
    for definition in data["tools"]:
        inner = definition.get("function", definition)
        name = inner.get("name") or inner.get("tool_name", "")
        row = [name, inner.get("description", "")] if described else [name]
        table.add_row(*row)
    console.print(table)
    # What a tool call is reported against (POST /v1/tool-calls): on a line of its own, whole.
    console.print(f"selection {data['selection_id']}", highlight=False, soft_wrap=True)
    if debug:
        scores = Table(title="candidates")
        for column in ("rank", "tool", "score", "matched", "outcome"):
            scores.add_column(column)
        for c in data.get("candidates", []):
            scores.add_row(
                str(c["rank"]),
                c["name"],
                f"{c['score']:.3f}",
                " ".join(c["matched_terms"]),
                c["reason"],
            )
        console.print(scores)


def _csv(value: str, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise typer.BadParameter(f"give at least one {what}")
    return items


@app.command("eval")
def eval_command(
    dataset_dir: Annotated[
        Path, typer.Argument(help="A folder with tools.jsonl and queries.jsonl.")
    ],
    modes: Annotated[
        str, typer.Option(help="Select modes, comma-separated.")
    ] = "bm25,dense,hybrid",
    k: Annotated[
        str,
        typer.Option(
            "--k",
            help="Cut-offs of recall@k, comma-separated (selects ask for at least 10 ranks,"
            " for nDCG@10).",
        ),
    ] = "1,3,5,10",
    out: Annotated[
        Path | None, typer.Option(help="Output folder (default: eval-results/<dataset>).")
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            help="A running server (default: an embedded stack of its own). With"
            " TOOLSIFT_OPERATOR_KEY a tenant is created for the run and deleted after it;"
            " with an admin key the dataset stays in that tenant."
        ),
    ] = None,
    admin_key: Annotated[
        str | None,
        typer.Option(
            envvar="TOOLSIFT_ADMIN_KEY",
            help="With --url: admin key of an empty tenant (wins over TOOLSIFT_OPERATOR_KEY);"
            " the run's agent key is revoked at the end.",
        ),
    ] = None,
    baselines: Annotated[
        str, typer.Option(help="In-process baselines, comma-separated, or 'none'.")
    ] = "baseline_bm25s,baseline_dense",
    half: Annotated[
        str, typer.Option(help="Which queries: 'check' (the half tuning never sees), tune, all.")
    ] = "check",
    queries: Annotated[
        int | None,
        typer.Option(min=1, help="Evaluate a seeded sample of this many queries (of --half)."),
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Selects in flight.")] = 4,
    embed_timeout: Annotated[
        float,
        typer.Option(min=1, help="Give up after this many seconds without embedding progress."),
    ] = 300.0,
) -> None:
    """Retrieval quality of the served API on a labelled dataset, beside in-process baselines:
    recall@k, nDCG@10, MRR, tokens and latency; writes results.json, a table and a chart."""
    from .eval import dataset as eval_dataset
    from .eval.client import ApiError
    from .eval.report import write
    from .eval.runner import Options, check, evaluate

    try:
        ks = sorted({int(v) for v in _csv(k, "k")})
    except ValueError:
        raise typer.BadParameter(f"--k must be integers, got {k!r}") from None
    if ks[0] < 1 or ks[-1] > 50:
        raise typer.BadParameter("--k values must be between 1 and 50")
    # The report writes its own queries.jsonl: never into the dataset it reads.
    if out is not None and out.resolve() == dataset_dir.resolve():
        raise typer.BadParameter("--out must not be the dataset's folder (it would be overwritten)")
    if half not in (*eval_dataset.HALVES, "all"):
        raise typer.BadParameter(
            f"{half!r}: use one of {', '.join(eval_dataset.HALVES)} or all", param_hint="--half"
        )
    chosen = [] if baselines.strip() == "none" else _csv(baselines, "baseline")
    options = Options(
        modes=list(dict.fromkeys(_csv(modes, "mode"))),  # a mode named twice runs once
        ks=ks,
        baselines=chosen,
        url=url,
        admin_key=admin_key,
        operator_key=get_settings().operator_key,
        concurrency=concurrency,
        embed_timeout=embed_timeout,
    )
    try:
        check(options)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    try:
        data = eval_dataset.load(dataset_dir)
    except eval_dataset.NoQueries as skipped:
        console.print(f"[yellow]skipped:[/yellow] {skipped}")
        return
    except eval_dataset.DatasetError as error:
        fail(str(error))
    for repair in data.repairs:
        err.print(f"[yellow]warning:[/yellow] {repair} (not valid JSON Schema)", highlight=False)
    # The half first: a sample is then of the half's queries.
    data = data.half(half).sample(queries)
    if not data.queries:
        fail(f"{data.name}: no queries in the {half} half (--half all measures every query)")
    # Found now, not after an hour of selects.
    target = out or Path("eval-results") / data.name
    if problem := unwritable(target, folder=True):
        raise typer.BadParameter(problem, param_hint="--out")
    console.print(f"{data.name}: {len(data.tools)} tools, {len(data.queries)} queries ({half})")
    try:
        evaluation = evaluate(data, options, console)
    except httpx.HTTPError as error:
        fail(f"{url}: {error}" if url else str(error))
    except (ApiError, ValueError, RuntimeError) as error:
        fail(str(error))
    try:
        paths = write(evaluation, ks, target)
    except OSError as error:
        fail(f"--out {target}: {error}")
    console.print(Markdown(paths[1].read_text()))
    console.print("written: " + ", ".join(str(p) for p in paths))


def _error_message(response: httpx.Response) -> str:
    """The API's own message (and the field it names), not its JSON body."""
    try:
        error = response.json()["error"]
        message = str(error["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:300] or response.reason_phrase
    field = error.get("field")
    return f"{field}: {message}" if field and field not in message else message


def main() -> None:
    """The `toolsift` command: a database that does not answer is one line, not a traceback
    through SQLAlchemy and psycopg (any command may be the first to reach it)."""
    try:
        app()
    except ValidationError as error:
        if error.title != Settings.__name__:
            raise
        # A setting from the environment (or .env): name the variable, not a traceback.
        for problem in error.errors():
            variable = "TOOLSIFT_" + "_".join(str(p) for p in problem["loc"]).upper()
            err.print(f"[red]error:[/red] {variable}: {problem['msg']}", highlight=False)
        raise SystemExit(2) from None
    except (OperationalError, psycopg.OperationalError) as error:
        cause = error.orig if isinstance(error, OperationalError) else error
        lines = str(cause).strip().splitlines() or [type(cause).__name__]
        err.print(f"[red]error:[/red] the database did not answer: {lines[0]}", highlight=False)
        raise SystemExit(1) from None


if __name__ == "__main__":  # pragma: no cover
    main()
