"""`toolsift bench embed`: what the embedding pipeline delivers, end to end.

Two figures the dense/hybrid modes depend on, measured through the real outbox, Redis broker
and Celery worker:

* throughput: a catalog is imported while no worker runs, so its jobs wait in the outbox;
  then a worker (one process, solo pool, one ONNX thread: one worker core) starts and we
  time the embeddings landing, first to last. The same texts
  embedded in-process by the same backend, in the same run, are the baseline: the ratio is
  what the relay, broker and database cost on top of the model;
* freshness: a steady stream of description updates at a fixed rate, each its own
  transaction, served by `stream_workers` worker processes (one per core, as deployed);
  a poller records when each written version (or a newer one) has its vector,
  i.e. when the write became dense-searchable.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from rich.console import Console
from rich.table import Table

from toolsift.config import get_settings, libpq_url
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.embedding import local
from toolsift.embedding.service import document_text
from toolsift.tools.schemas import ToolUpdate
from toolsift.tools.service import tool as tool_service

from .load import LoadStats, load_tenant
from .run import machine
from .stack import Worker, postmaster_pid, start_database, start_redis
from .stats import CpuMeter, percentile
from .synthetic import generate_catalog

_POLL_SECONDS = 0.01
# The backlog's poll counts every current vector, a join over the catalog (0.96 ms at 512
# tools, more at 2,000): every 10 ms it took a good share of a core from the worker it
# measures. Every 100 ms it costs far less and moves a 10 s-long figure by at most 1%.
_BACKLOG_POLL_SECONDS = 0.1
_SETTLE_TIMEOUT = 120.0


@dataclass(frozen=True)
class EmbedOptions:
    tools: int = 2000
    rate: float = 50.0  # updates per second in the freshness stream
    duration: float = 30.0  # seconds of the stream
    seed: int = 7
    relay_interval: float | None = None  # seconds between relay runs; None: the product's
    writers: int = 4  # threads issuing the updates, so one slow commit does not stall the rate
    # Worker processes (one ONNX thread each) serving the stream, one per core of this
    # machine; the backlog is always timed on one.
    stream_workers: int = 2


def _current_embedded(conn: psycopg.Connection[Any], tenant_id: UUID) -> int:
    """Tools whose current version has its vector."""
    row = conn.execute(
        """
        SELECT count(*) FROM tools t
        JOIN tool_embeddings e ON e.tenant_id = t.tenant_id AND e.tool_id = t.id
                              AND e.version = t.version
        WHERE t.tenant_id = %s AND t.deleted_at IS NULL
        """,
        (tenant_id,),
    ).fetchone()
    return int(row[0]) if row else 0


def _throughput(
    conn: psycopg.Connection[Any], tenant_id: UUID, total: int, worker: Worker, meter: CpuMeter
) -> dict[str, float]:
    """Seconds from the first poll that saw a vector to the last vector; the model load is
    not counted. The rate counts the tools that landed in that window, not the ones that
    first poll found, whose time is not in it: "tools_timed" of "tools".

    Also the CPU seconds the worker (and PostgreSQL) spent in that window: on a shared
    machine the worker gets less than a core, and tools per worker CPU-second is the figure
    that does not depend on what else runs.
    """
    first: tuple[float, int] | None = None  # (when, how many) at the first landed vector
    deadline = time.monotonic() + _SETTLE_TIMEOUT + total / 20
    while True:
        done = _current_embedded(conn, tenant_id)
        now = time.perf_counter()
        if first is None and done:
            first = (now, done)
            meter.start()
        if done >= total:
            break
        if worker.exited():
            raise RuntimeError(f"the worker exited; see {worker.log_file}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {done} of {total} tools embedded; see {worker.log_file}")
        time.sleep(_BACKLOG_POLL_SECONDS)
    cpu = meter.stop()
    first_at, first_count = first if first is not None else (now, 0)
    seconds = max(now - first_at, 1e-9)
    timed = total - first_count
    return {
        "tools": float(total),
        "tools_timed": float(timed),
        "seconds": seconds,
        "tools_per_s": timed / seconds,
        "worker_cpu_s": cpu["worker"],
        "postgres_cpu_s": cpu["postgres"],
        "tools_per_worker_cpu_s": timed / max(cpu["worker"], 1e-9),
    }


def _in_process_rate(texts: list[str], task_tools: int) -> tuple[float, float]:
    """The same texts through the backend as the worker configures it (its settings, one
    thread), in calls of the worker's task size, no pipeline: the baseline of the ratio.
    Returns tools per wall second and per CPU second."""
    settings = get_settings()
    backend = local.configured(settings, threads=1)
    backend.embed(texts[: settings.embedding_batch_size])
    started, started_cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(texts), task_tools):
        backend.embed(texts[i : i + task_tools])
    wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    return len(texts) / wall, len(texts) / cpu


class _Freshness:
    """Written versions waiting for their vector, and how long each waited."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[UUID, list[tuple[int, float]]] = {}
        self.delays: list[float] = []
        self.written = 0

    def wrote(self, tool_id: UUID, version: int, at: float) -> None:
        with self._lock:
            self._pending.setdefault(tool_id, []).append((version, at))
            self.written += 1

    def waiting(self) -> list[UUID]:
        with self._lock:
            return list(self._pending)

    def landed(self, tool_id: UUID, version: int, at: float) -> None:
        """A vector of `version` serves every write of that version or an older one."""
        with self._lock:
            still = []
            for written, when in self._pending.get(tool_id, []):
                if written <= version:
                    self.delays.append(at - when)
                else:
                    still.append((written, when))
            if still:
                self._pending[tool_id] = still
            else:
                self._pending.pop(tool_id, None)

    def unresolved(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._pending.values())


def _poll(conn: psycopg.Connection[Any], tenant_id: UUID, fresh: _Freshness) -> None:
    waiting = fresh.waiting()
    if not waiting:
        return
    rows = conn.execute(
        "SELECT tool_id, version FROM tool_embeddings WHERE tenant_id = %s AND tool_id = ANY(%s)",
        (tenant_id, waiting),
    ).fetchall()
    now = time.perf_counter()
    for tool_id, version in rows:
        fresh.landed(tool_id, version, now)


def _stream(
    database: Database,
    conn: psycopg.Connection[Any],
    tenant_id: UUID,
    tool_ids: list[UUID],
    options: EmbedOptions,
) -> dict[str, float]:
    """Updates at `rate`/s for `duration` s, then waits for the last vectors."""
    rng = random.Random(f"toolsift-bench-embed:{options.seed}")
    fresh = _Freshness()
    errors: list[Exception] = []

    def update(tool_id: UUID, revision: int) -> None:
        try:
            with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
                base = tool_service.get(session, tool_id).description.split(" [rev ")[0]
                change = ToolUpdate(description=f"{base} [rev {revision}]")
                version = tool_service.update(session, tool_id, change).version
            fresh.wrote(tool_id, version, time.perf_counter())
        except Exception as error:  # reported after the run
            errors.append(error)

    count = int(options.rate * options.duration)
    started = time.perf_counter()
    with ThreadPoolExecutor(options.writers) as pool:
        for i in range(count):
            due = started + i / options.rate
            while (now := time.perf_counter()) < due:
                _poll(conn, tenant_id, fresh)
                time.sleep(min(_POLL_SECONDS, max(0.0, due - now)))
            pool.submit(update, rng.choice(tool_ids), i)
    stream_seconds = time.perf_counter() - started
    deadline = time.monotonic() + _SETTLE_TIMEOUT
    while fresh.unresolved() and time.monotonic() < deadline:
        _poll(conn, tenant_id, fresh)
        time.sleep(_POLL_SECONDS)
    if errors:
        raise RuntimeError(f"{len(errors)} updates failed, first: {errors[0]!r}")
    delays = sorted(fresh.delays)
    return {
        "updates": float(fresh.written),
        "achieved_rate": fresh.written / stream_seconds,
        "p50_s": percentile(delays, 50),
        "p95_s": percentile(delays, 95),
        "max_s": delays[-1] if delays else float("nan"),
        "unresolved": float(fresh.unresolved()),
    }


def benchmark(options: EmbedOptions, log: Callable[[str], None]) -> dict[str, Any]:
    """Runs both measurements on a private stack that is stopped on exit, error or Ctrl-C."""
    with contextlib.ExitStack() as stack:
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolsift-bench-")))
        log("starting PostgreSQL and Redis")
        server, database_url = start_database(work_dir / "pg", stack)
        _redis, redis_url = start_redis(work_dir / "redis", stack)
        database = Database(database_url, pool_size=options.writers)
        stack.callback(database.dispose)
        conn = stack.enter_context(psycopg.connect(libpq_url(database_url), autocommit=True))

        catalog = generate_catalog("embed", options.tools, seed=options.seed, queries=0)
        log(f"importing {len(catalog.tools)} tools with no worker running")
        tenant = load_tenant(database, catalog, pepper=secrets.token_hex(16), stats=LoadStats())
        with database.unit_of_work(tenant.tenant_id, permissions=ALL_PERMISSIONS) as session:
            tools, _ = tool_service.list_page(session, after=None, limit=len(catalog.tools))
            tool_ids = [t.id for t in tools]
            texts = [
                document_text(t.name, t.title, t.description, t.input_schema, t.examples)
                for t in tools
            ]

        log("starting a worker (solo pool, one ONNX thread) and timing the backlog")
        worker_settings = {
            "outbox_relay_interval": str(
                options.relay_interval or get_settings().outbox_relay_interval
            ),
            "embedding_threads": "1",
        }
        worker = Worker(database_url, redis_url, work_dir, settings=worker_settings, pool="solo")
        stack.callback(worker.stop)
        worker.start()
        assert worker.process is not None
        postgres = postmaster_pid(server)
        meter = CpuMeter(
            {"worker": ([worker.process.pid], True), "postgres": ([postgres or -1], True)}
        )
        throughput = _throughput(conn, tenant.tenant_id, len(tool_ids), worker, meter)
        if options.stream_workers > 1:
            worker.stop()
            log(f"starting {options.stream_workers} worker processes for the stream")
            worker = Worker(
                database_url,
                redis_url,
                work_dir,
                settings=worker_settings,
                concurrency=options.stream_workers,
            )
            stack.callback(worker.stop)
            worker.start()
            # Each child loads the model on its first task: a short stream, not measured,
            # loads them all before the measured one.
            warm = replace(options, duration=3.0, seed=options.seed + 1)
            _stream(database, conn, tenant.tenant_id, tool_ids, warm)
        log(f"streaming {options.rate:g} updates/s for {options.duration:g} s")
        freshness = _stream(database, conn, tenant.tenant_id, tool_ids, options)
        worker.stop()

        log("the same texts in-process (baseline)")
        baseline, baseline_cpu = _in_process_rate(texts, get_settings().embed_batch_tools)
    throughput["in_process_tools_per_s"] = baseline
    throughput["in_process_tools_per_cpu_s"] = baseline_cpu
    throughput["pipeline_over_in_process"] = throughput["tools_per_s"] / baseline
    throughput["pipeline_over_in_process_cpu"] = throughput["tools_per_worker_cpu_s"] / baseline_cpu
    return {
        "machine": machine(),
        "options": options.__dict__,
        "model": get_settings().embedding_onnx_model,
        "throughput": throughput,
        "freshness": freshness,
        "targets": [
            {
                "name": "embedding throughput per worker core >= 200 tools/s",
                "value": throughput["tools_per_s"],
                "pass": throughput["tools_per_s"] >= 200,
            },
            {
                "name": f"freshness p95 < 2 s at {options.rate:g} updates/s"
                f" ({options.stream_workers} worker processes)",
                "value": freshness["p95_s"],
                "pass": freshness["p95_s"] < 2.0 and not freshness["unresolved"],
            },
        ],
    }


def render_embed(result: dict[str, Any], console: Console) -> None:
    """The two measurements and the verdicts, as printed by `toolsift bench embed`."""
    t, f = result["throughput"], result["freshness"]
    workers = result["options"]["stream_workers"]
    table = Table(title=f"Embedding pipeline ({result['model']})", title_justify="left")
    for column in ("figure", "value"):
        table.add_column(column)
    timed = t.get("tools_timed", t["tools"])  # figures written before it was recorded
    table.add_row(
        "backlog on one worker core",
        f"{t['tools']:.0f} tools; {t['tools'] - timed:.0f} had landed by the first poll",
    )
    table.add_row(
        "pipeline tools/s, first poll to last vector",
        f"{t['tools_per_s']:.0f} ({timed:.0f} tools in {t['seconds']:.1f} s)",
    )
    table.add_row("in-process backend tools/s (baseline)", f"{t['in_process_tools_per_s']:.0f}")
    table.add_row("pipeline / in-process", f"{t['pipeline_over_in_process']:.2f}x")
    table.add_row(
        "worker CPU s (PostgreSQL CPU s) in that window",
        f"{t['worker_cpu_s']:.1f} ({t['postgres_cpu_s']:.1f})",
    )
    table.add_row(
        "tools per worker CPU-second (in-process per CPU-second)",
        f"{t['tools_per_worker_cpu_s']:.0f} ({t['in_process_tools_per_cpu_s']:.0f})",
    )
    table.add_row("updates (achieved rate)", f"{f['updates']:.0f} ({f['achieved_rate']:.1f}/s)")
    table.add_row(
        f"freshness p50 / p95 / max s ({workers} worker processes)",
        f"{f['p50_s']:.2f} / {f['p95_s']:.2f} / {f['max_s']:.2f}",
    )
    table.add_row("writes never embedded", f"{f['unresolved']:.0f}")
    console.print(table)
    for target in result["targets"]:
        verdict = "[green]PASS[/]" if target["pass"] else "[red]FAIL[/]"
        console.print(f"{verdict} {target['name']}: {target['value']:.2f}")
