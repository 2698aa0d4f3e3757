"""`toolsift bench load`: mixed traffic against the served API, optionally through a fault.

A private stack in a temporary directory: embedded PostgreSQL and Redis, the API under
uvicorn, one Celery worker with the outbox relay inside (as `toolsift up` runs it). The small
synthetic tenants of `bench select`, each with an agent and an admin key. Then `clients`
threads for `duration` seconds: BM25 selects across every tenant and, with probability
`write_share`, an admin write that creates a tool. A fault, when asked for, strikes at
`fault_at` seconds. Afterwards the database is checked for partial writes, and the outbox must
drain: every live tool gets its vector (no job lost).

The figures come back as one JSON-ready dict; checks are decided on what this run measured.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from toolsift.config import libpq_url
from toolsift.db import Database

from . import httpload
from .httpload import Sample, Writer
from .load import analyze, load_all
from .run import PEPPER, machine
from .stack import ApiServer, Worker, sigterm_as_interrupt, start_database, start_redis
from .stats import Latency
from .synthetic import Sizes, generate

FAULTS = ("none", "postgres-restart", "redis-restart", "worker-kill")
#: The goal the figures are read against (BM25 selects, this machine).
P99_GOAL_MS = 50.0
#: After the faulted service is back, requests may fail this long while pools reconnect.
RECOVERY_GRACE_S = 5.0


@dataclass(frozen=True)
class LoadOptions:
    clients: int = 50
    duration: float = 60.0
    tenants: int = 100
    write_share: float = 0.1
    fault: str = "none"
    fault_at: float | None = None  # seconds into the run; default: a third of it
    outage: float = 2.0  # seconds the faulted service stays down
    workers: int = 2  # uvicorn worker processes
    seed: int = 7
    settle: bool = True  # embed the initial catalogs before measuring
    drain_timeout: float = 900.0  # seconds the settle and the final drain may each take
    rate: float | None = None  # requests/s on a fixed schedule (open loop); None: closed loop


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """For a child started meanwhile (the API server copies this process's environment)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# --- what the database says afterwards -------------------------------------------------------

_BACKLOG = """
    SELECT (SELECT count(*) FROM outbox),
           (SELECT count(*) FROM tools t JOIN tenants n ON n.id = t.tenant_id
            WHERE t.deleted_at IS NULL AND NOT EXISTS (
                SELECT 1 FROM tool_embeddings e
                WHERE e.tenant_id = t.tenant_id AND e.tool_id = t.id
                  AND e.model = n.embedding_model AND e.version = t.version))
"""
# A tool without postings, or a tenant whose statistics disagree with its live tools, is a
# write that committed in part: tools, postings and statistics are written in one transaction.
_PARTIAL = """
    SELECT (SELECT count(*) FROM tools t WHERE t.deleted_at IS NULL AND NOT EXISTS (
                SELECT 1 FROM tool_terms p WHERE p.tenant_id = t.tenant_id AND p.tool_id = t.id)),
           (SELECT count(*) FROM tenants n WHERE
                (SELECT count(*) FROM tools t WHERE t.tenant_id = n.id AND t.deleted_at IS NULL)
                <> (SELECT coalesce(sum(c.doc_count), 0) FROM corpus_stats c
                    WHERE c.tenant_id = n.id)),
           (SELECT count(*) FROM tools t WHERE t.deleted_at IS NULL
                AND NOT EXISTS (SELECT 1 FROM outbox o
                                WHERE o.tenant_id = t.tenant_id AND o.tool_id = t.id)
                AND NOT EXISTS (SELECT 1 FROM tool_embeddings e
                                WHERE e.tenant_id = t.tenant_id AND e.tool_id = t.id))
"""
_LOAD_TOOLS = (
    "SELECT tenant_id::text, name FROM tools WHERE name LIKE 'load\\_%' AND deleted_at IS NULL"
)


def _owner(url: str) -> psycopg.Connection[tuple[Any, ...]]:
    return psycopg.connect(libpq_url(url), autocommit=True)


def backlog(owner_url: str) -> tuple[int, int]:
    """Outbox jobs left, and live tools without a vector of their current version."""
    with _owner(owner_url) as conn:
        row = conn.execute(_BACKLOG).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def drain(owner_url: str, timeout: float) -> float | None:
    """Seconds until the outbox is empty and every live tool has its vector; None: not in time."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if backlog(owner_url) == (0, 0):
            return time.monotonic() - started
        time.sleep(0.5)
    return None


def consistency(owner_url: str, samples: list[Sample]) -> dict[str, Any]:
    """Partial writes, and whether each write's answer matches what the database holds."""
    with _owner(owner_url) as conn:
        partial = conn.execute(_PARTIAL).fetchone()
        stored = {(str(t), str(n)) for t, n in conn.execute(_LOAD_TOOLS)}
    assert partial is not None
    writes = [s for s in samples if s.kind == "write"]
    acknowledged = {(s.tenant, s.tool) for s in writes if s.status == 200}
    refused = {(s.tenant, s.tool) for s in writes if s.status != 200}
    return {
        "tools_without_postings": int(partial[0]),
        "tenants_with_wrong_statistics": int(partial[1]),
        "tools_without_job_or_vector": int(partial[2]),
        "acknowledged_writes_missing": len(acknowledged - stored),
        # Committed although the answer was an error: the commit's reply was lost with the
        # server. Whole, not partial, and a retry by name is a no-op; counted, not hidden.
        "refused_writes_stored": len(refused & stored),
        "stray_tools": len(stored - acknowledged - refused),
    }


# --- figures ---------------------------------------------------------------------------------


def _summary(samples: list[Sample], seconds: float) -> dict[str, Any]:
    ok = [s.ms for s in samples if s.status == 200]
    statuses = Counter("none" if s.status is None else str(s.status) for s in samples)
    failures = [s.failure for s in samples if s.status != 200 and s.failure]
    return {
        "requests": len(samples),
        "ok": len(ok),
        "errors": len(samples) - len(ok),
        "statuses": dict(sorted(statuses.items())),
        "per_second": len(ok) / seconds if seconds > 0 else 0.0,
        "latency_ms": Latency.of(ok).as_dict(),
        "first_error": failures[0] if failures else None,
    }


def _fault_figures(samples: list[Sample], down: float, up: float) -> dict[str, Any]:
    """How requests fared from the fault on (those in flight when it struck included): how
    they failed, and when answers came back."""
    after = [s for s in samples if s.at + s.ms / 1000 >= down]
    failed = [s for s in after if s.status != 200]
    recovered = next((s.at for s in after if s.at >= up and s.status == 200), None)
    late = [s for s in failed if s.at >= up + RECOVERY_GRACE_S]
    return {
        "down_at_s": down,
        "up_at_s": up,
        # What each check had to go on: a window without requests measured nothing.
        "requests_from_fault": len(after),
        "requests_after_up": sum(s.at >= up for s in after),
        "requests_after_grace": sum(s.at >= up + RECOVERY_GRACE_S for s in after),
        "failed_before": sum(s.status != 200 for s in samples if s.at + s.ms / 1000 < down),
        "in_flight_at_fault": sum(s.at < down for s in after),
        "failed": len(failed),
        "failed_statuses": dict(
            Counter("none" if s.status is None else str(s.status) for s in failed)
        ),
        "first_ok_after_up_s": None if recovered is None else recovered - up,
        "failed_after_grace": len(late),
    }


def _s(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.2f} s"


def _check(ok: bool, detail: str, measured: bool = True) -> dict[str, Any]:
    """A check that had nothing to measure is not a pass: it fails the run, marked as such."""
    return {"ok": ok and measured, "measured": measured, "detail": detail}


def _verdict(check: dict[str, Any]) -> str:
    if not check.get("measured", True):
        return "[yellow]NOT MEASURED[/]"
    return "[green]PASS[/]" if check["ok"] else "[red]FAIL[/]"


def judge(result: dict[str, Any], fault: str) -> dict[str, dict[str, Any]]:
    """PASS/FAIL per property this run was meant to show."""
    selects, writes = result["selects"], result["writes"]
    db = result["consistency"]
    checks = {
        "no partial write": _check(
            db["tools_without_postings"] == 0
            and db["tenants_with_wrong_statistics"] == 0
            and db["tools_without_job_or_vector"] == 0
            and db["acknowledged_writes_missing"] == 0
            and db["stray_tools"] == 0,
            ", ".join(f"{k} {v}" for k, v in db.items()),
        ),
        "no job lost": _check(
            result["drain_seconds"] is not None,
            f"outbox drained in {result['drain_seconds']:.1f} s"
            if result["drain_seconds"] is not None
            else f"backlog left (jobs, tools without vector): {result['backlog_left']}",
        ),
    }
    window = result.get("fault")
    if fault in ("none", "redis-restart", "worker-kill"):
        errors = selects["errors"] + writes["errors"]
        met = window is None or window["requests_from_fault"] > 0
        checks["0 errors"] = _check(
            errors == 0,
            f"select errors {selects['errors']}, write errors {writes['errors']}"
            + (f"; first: {selects['first_error'] or writes['first_error']}" if errors else "")
            + ("" if met else "; no request met the fault"),
            measured=met,
        )
    if fault == "postgres-restart":
        assert window is not None
        statuses = set(window["failed_statuses"])
        met = window["requests_from_fault"] > 0
        checks["in-flight requests fail with 503"] = _check(
            statuses <= {"503"} and window["failed_before"] == 0,
            f"failed from the fault on: {window['failed_statuses']}"
            f" ({window['in_flight_at_fault']} requests were in flight),"
            f" {window['failed_before']} before it" + ("" if met else "; no request met the fault"),
            measured=met or window["failed_before"] > 0,
        )
        # A part that measured a failure fails the check; else an empty window leaves it
        # not measured: no request after PostgreSQL was back, or none after the grace.
        failed = (
            (window["requests_after_up"] > 0 and window["first_ok_after_up_s"] is None)
            or window["failed_after_grace"] > 0
            or result["api_restarted"] is not False
        )
        met = window["requests_after_grace"] > 0
        checks["recovers without an API restart"] = _check(
            not failed,
            f"first answer {_s(window['first_ok_after_up_s'])} after PostgreSQL was back, "
            f"{window['failed_after_grace']} failures after {RECOVERY_GRACE_S:.0f} s"
            + ("" if met else " (no request was sent then: the run ended)")
            + f", API process {'restarted' if result['api_restarted'] else 'the same'}",
            measured=met or failed,
        )
    if fault == "none":
        p99 = selects["latency_ms"]["p99"]
        rate = result["options"].get("rate")
        checks[f"select p99 < {P99_GOAL_MS:.0f} ms"] = _check(
            p99 < P99_GOAL_MS,
            f"p99 {p99:.1f} ms"
            + (f", open loop at {rate:g} requests/s" if rate else ", closed loop"),
        )
    return checks


# --- the run ---------------------------------------------------------------------------------


def benchmark(options: LoadOptions, log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    if options.fault not in FAULTS:
        raise ValueError(f"fault must be one of {', '.join(FAULTS)}")
    fault_at = options.fault_at if options.fault_at is not None else options.duration / 3
    if options.fault != "none" and fault_at >= options.duration:
        raise ValueError("fault_at must be less than the duration: no traffic would meet it")
    result: dict[str, Any] = {"options": asdict(options), "machine": machine()}
    with (
        sigterm_as_interrupt(),
        tempfile.TemporaryDirectory(prefix="toolsift-load-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        work = Path(tmp)
        log("starting PostgreSQL and Redis")
        pg, url = start_database(work / "pg", stack)
        redis, redis_url = start_redis(work / "redis", stack)
        database = Database(url, pool_size=2)
        stack.callback(database.dispose)
        sizes = Sizes(small_tenants=options.tenants, big=0, huge=0)
        catalogs = generate(sizes, seed=options.seed)
        log(f"loading {len(catalogs)} tenants, {sum(len(c.tools) for c in catalogs)} tools")
        tenants, _ = load_all(database, catalogs, pepper=PEPPER)
        analyze(url)
        worker = Worker(
            url,
            redis_url,
            work,
            settings={
                "key_pepper": PEPPER,
                "outbox_relay_interval": "0.5",
                # Short, so jobs a killed worker held are published again within the run.
                "outbox_lease_seconds": "10",
            },
        )
        stack.callback(worker.stop)
        worker.start()
        if options.settle:
            log("embedding the catalogs before measuring")
            settled = drain(url, options.drain_timeout)
            if settled is None:
                raise RuntimeError(f"catalogs not embedded in {options.drain_timeout:.0f} s")
            result["settle_seconds"] = settled
        api = ApiServer(url, workers=options.workers, pepper=PEPPER, work_dir=work)
        stack.callback(api.stop)
        with _environ(REDIS_URL=redis_url):  # rate limits on, failing open while Redis is down
            api.start()
        api_pids = api.pids()
        rounds = max(len(t.catalog.queries) for t in tenants)
        selects = [
            httpload.job(t.agent_key, t.catalog.queries[i])
            for i in range(rounds)
            for t in tenants
            if i < len(t.catalog.queries)
        ]
        writers = [Writer(str(t.tenant_id), f"Bearer {t.admin_key}") for t in tenants]
        window: dict[str, float] = {}
        pending: list[tuple[int, int]] = []
        started = time.perf_counter()

        def strike() -> None:
            time.sleep(max(0.0, started + fault_at - time.perf_counter()))
            pending.append(backlog(url))  # jobs in flight: what "no job lost" is about
            window["down"] = time.perf_counter() - started
            if options.fault == "postgres-restart":
                pg.stop()
                time.sleep(options.outage)
                pg.start()
            elif options.fault == "redis-restart":
                redis.stop()
                time.sleep(options.outage)
                redis.start()
            elif options.fault == "worker-kill":
                worker.kill()
                time.sleep(options.outage)
                worker.start()
            window["up"] = time.perf_counter() - started

        striker = threading.Thread(target=strike, name="fault", daemon=True)
        if options.fault != "none":
            striker.start()
        log(
            f"{options.clients} clients for {options.duration:.0f} s"
            + (f", {options.fault} at {fault_at:.0f} s" if options.fault != "none" else "")
        )
        samples = httpload.run_mixed(
            api.url,
            selects,
            writers,
            clients=options.clients,
            duration=options.duration,
            write_share=options.write_share,
            seed=options.seed,
            started=started,
            rate=options.rate,
        )
        if striker.is_alive():
            striker.join()
        seconds = max((s.at + s.ms / 1000 for s in samples), default=options.duration)
        result["seconds"] = seconds
        result["selects"] = _summary([s for s in samples if s.kind == "select"], seconds)
        result["writes"] = _summary([s for s in samples if s.kind == "write"], seconds)
        result["all"] = _summary(samples, seconds)
        if options.fault != "none":
            result["fault"] = _fault_figures(samples, window["down"], window["up"])
            result["fault"]["backlog_at_fault"] = pending[0]
        result["api_restarted"] = api.pids() != api_pids
        log("checking the database and waiting for the outbox to drain")
        result["consistency"] = consistency(url, samples)
        result["drain_seconds"] = drain(url, options.drain_timeout)
        result["backlog_left"] = backlog(url)
        result["checks"] = judge(result, options.fault)
        result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def _ms(value: float) -> str:
    return "-" if value != value else f"{value:.1f}"  # NaN: no sample


def render(result: dict[str, Any], console: Console) -> None:
    o, m = result["options"], result["machine"]
    fault = o["fault"]
    console.print(
        f"[bold]toolsift bench load[/]  {m['date']}  {o['clients']} clients, "
        + (
            f"open loop at {o['rate']:g} requests/s, "
            if o.get("rate")
            else "closed loop (each client sends when answered), "
        )
        + f"{o['duration']:.0f} s, {o['tenants']} tenants, {o['write_share']:.0%} writes, "
        f"fault: {fault}\nmachine: {m['nproc']} cores ({m['cpu_model']}); the clients, "
        f"{o['workers']} uvicorn workers, the Celery worker and PostgreSQL share them. "
        f"Load average (1/5/15 min) at start {m['loadavg_start']}, at end "
        f"{result.get('loadavg_end')}."
    )
    table = Table(title="requests (latency of answered ones)")
    for column in (
        "kind",
        "requests",
        "ok/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "errors",
        "statuses",
    ):
        table.add_column(column, justify="left" if column in ("kind", "statuses") else "right")
    for kind in ("selects", "writes", "all"):
        row = result[kind]
        lat = row["latency_ms"]
        table.add_row(
            kind, str(row["requests"]), f"{row['per_second']:.0f}", _ms(lat["p50"]),
            _ms(lat["p95"]), _ms(lat["p99"]), _ms(lat["max"]), str(row["errors"]),
            " ".join(f"{k}:{v}" for k, v in row["statuses"].items()),
        )  # fmt: skip
    console.print(table)
    if "fault" in result:
        f = result["fault"]
        console.print(
            f"{fault}: down at {f['down_at_s']:.1f} s, back at {f['up_at_s']:.1f} s; "
            f"{f['failed']} requests failed from then on {f['failed_statuses']}"
            f" ({f['in_flight_at_fault']} were in flight); first answer "
            f"{_s(f['first_ok_after_up_s'])} after it was back; {f['failed_after_grace']} failures after {RECOVERY_GRACE_S:.0f} s."
        )
    checks = Table(title="checks")
    checks.add_column("check")
    checks.add_column("result")
    checks.add_column("measured")
    for name, check in result["checks"].items():
        checks.add_row(name, _verdict(check), check["detail"])
    console.print(checks)
