"""Run the product: migrate, serve, worker, beat, reindex, prepare-model, ping, up."""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, NoReturn
from uuid import UUID

import typer
from rich.table import Table
from rich.text import Text
from sqlalchemy import select

from .. import stack
from ..config import Settings, get_settings, libpq_url
from ..db import ALL_PERMISSIONS, Database
from ..embedded import EmbeddedPostgres, EmbeddedRedis, EmbeddedServiceError
from ..embedding import local as local_models
from ..embedding.base import EmbeddingError, get_backend
from ..kit.commands import (
    DataDir,
    fail,
    known_tenant,
    settings_for,
)
from ..kit.interrupts import StickyInterrupt
from ..kit.processes import start_process, stop_process
from ..mcp.cli import start_listener
from ..migrate import ensure_database, upgrade
from ..models import Tenant as TenantRow
from ..ops.logging import Redactor
from ..security import audit
from ..tenants.schemas import TenantSummary
from ..tenants.service import tenant as tenant_service
from .base import app, console


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

    from ..ops.multiprocess import prepare_multiprocess_dir

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
    from ..embedding import service as embeddings

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
                tenants = [t.id for t in every_tenant(database)]
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
    backend = local_models.configured(settings)
    try:
        paths = backend.files(private_fallback=False)
        backend.warm_up()  # it loads and embeds
    except EmbeddingError as error:
        fail(str(error))
    files = ", ".join(str(path) for path in paths)
    console.print(f"{backend.model}: {files} ({time.perf_counter() - started:.1f} s)")


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

    from ..app import create_app
    from ..demo.loader import load_demo

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
    # A closed terminal's SIGHUP too: the worker, in a group of its own, does not get it.
    signal.signal(signal.SIGTERM, _raise_exit)
    signal.signal(signal.SIGHUP, _raise_exit)
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
                local = local_models.configured(settings)
                # Built here once, or the worker and the API would both build it at start.
                local.files()
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
                worker_process = start_process(
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
    from ..embedding import service as embeddings

    tools = tenants = 0
    for summary in every_tenant(database):
        with database.unit_of_work(summary.id, permissions=ALL_PERMISSIONS) as session:
            served = session.scalar(
                select(TenantRow.embedding_model).where(TenantRow.id == summary.id)
            )
            if served is not None and served != model:
                queued = embeddings.reindex(session, summary.id, missing_in=model)
                tools, tenants = tools + queued, tenants + (queued > 0)
    return tools, tenants


def every_tenant(database: Database) -> list[TenantSummary]:
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
