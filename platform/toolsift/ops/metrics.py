"""Prometheus metrics: request counters and latency in-process, queue and lag gauges from SQL.

Counters and histograms live in this process (or, with `PROMETHEUS_MULTIPROC_DIR` set, in
files shared by the uvicorn workers). Gauges of work the workers do (outbox depth, embedding
lag, sync failures) are read from the database at scrape time as `toolsift_observer`, a role
that may count rows across tenants and nothing else; a gauge whose table does not exist (yet)
is left out.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import text

from ..db import ALL_PERMISSIONS, OBSERVER_ROLE, Database, as_observer
from .bounded import SingleFlight

_log = logging.getLogger(__name__)

# The counters below open their files in this folder as they are made: a process that did
# not come through `toolsift serve` (uvicorn run directly) must not fail on a missing one.
if _FOLDER := os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(_FOLDER, exist_ok=True)

REGISTRY = CollectorRegistry(auto_describe=True)
_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)

REQUESTS = Counter(
    "toolsift_http_requests",
    "HTTP requests by route template, method and status.",
    ["method", "route", "status"],
    registry=REGISTRY,
)
REQUEST_SECONDS = Histogram(
    "toolsift_http_request_duration_seconds",
    "HTTP request latency by route template.",
    ["route"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
SELECT_SECONDS = Histogram(
    "toolsift_select_duration_seconds",
    "POST /v1/select latency (whole request) by select mode.",
    ["mode", "status"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
RATE_LIMITED = Counter(
    "toolsift_rate_limited",
    "Requests refused with 429, by key scope (agent, admin, operator), or failed_auth for a"
    " client address past its failed authentications.",
    ["scope"],
    registry=REGISTRY,
)
RATE_LIMIT_FAIL_OPEN = Counter(
    "toolsift_rate_limit_fail_open",
    "Requests let through unchecked because Redis was unreachable.",
    registry=REGISTRY,
)


@dataclass(frozen=True)
class SqlGauge:
    """A gauge computed by one SQL statement returning one number.

    `needs` lists (table, column) pairs the observer role must be able to read; until they
    exist (a later migration) the gauge is skipped rather than failing the scrape.
    """

    name: str
    help: str
    sql: str
    needs: tuple[tuple[str, str], ...]


GAUGES: list[SqlGauge] = [
    SqlGauge(
        "toolsift_tenants",
        "Tenants.",
        "SELECT count(*) FROM tenants",
        (("tenants", "id"),),
    ),
    SqlGauge(
        "toolsift_tools_live",
        "Live (not deleted) tools across tenants.",
        "SELECT count(*) FROM tools WHERE deleted_at IS NULL",
        (("tools", "deleted_at"),),
    ),
    SqlGauge(
        "toolsift_outbox_depth",
        "Outbox jobs not yet done (a job stays until its task has finished it).",
        "SELECT count(*) FROM outbox",
        (("outbox", "created_at"),),
    ),
    SqlGauge(
        "toolsift_outbox_oldest_seconds",
        "Age of the oldest outbox job not yet done (0 when empty).",
        "SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0) FROM outbox",
        (("outbox", "created_at"),),
    ),
    SqlGauge(
        "toolsift_embeddings_pending",
        # A tenant serves no model until its first vectors land: all its tools are pending.
        "Live tools without a vector of their current version in the model their tenant serves.",
        """SELECT count(*) FROM tools t JOIN tenants n ON n.id = t.tenant_id
           WHERE t.deleted_at IS NULL AND NOT EXISTS (
             SELECT 1 FROM tool_embeddings e WHERE e.tenant_id = t.tenant_id
             AND e.tool_id = t.id AND e.model = n.embedding_model AND e.version = t.version)""",
        (("tenants", "embedding_model"), ("tool_embeddings", "version"), ("tools", "version")),
    ),
    SqlGauge(
        "toolsift_embedding_lag_seconds",
        "Age of the oldest tool change not yet embedded (0 when none).",
        """SELECT coalesce(extract(epoch FROM now() - min(t.updated_at)), 0)
           FROM tools t JOIN tenants n ON n.id = t.tenant_id
           WHERE t.deleted_at IS NULL AND NOT EXISTS (
             SELECT 1 FROM tool_embeddings e WHERE e.tenant_id = t.tenant_id
             AND e.tool_id = t.id AND e.model = n.embedding_model AND e.version = t.version)""",
        (("tenants", "embedding_model"), ("tool_embeddings", "version"), ("tools", "updated_at")),
    ),
    SqlGauge(
        "toolsift_sync_failures",
        "MCP sources whose last sync failed.",
        "SELECT count(*) FROM mcp_sources WHERE last_error IS NOT NULL",
        (("mcp_sources", "last_error"),),
    ),
]

_READABLE = text(
    "SELECT to_regclass(:table) IS NOT NULL AND EXISTS (SELECT 1 FROM pg_attribute"
    " WHERE attrelid = to_regclass(:table) AND attname = :column AND NOT attisdropped)"
    " AND has_column_privilege(:role, :table, :column, 'SELECT')"
)


class DatabaseGauges(Collector):
    """Reads GAUGES in one short read-only transaction as the observer role."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        values: list[tuple[SqlGauge, float]] = []
        up = 1.0
        try:  # bounded: a database that stops answering must not hang the scrape with it
            values = _gauge_reads.result(self._read, GAUGES_TIMEOUT)
        except TimeoutError:  # concurrent.futures' own, since Python 3.11
            _log.warning("metrics: database gauges not read within %s s", GAUGES_TIMEOUT)
            up = 0.0
        except Exception:  # a scrape must not fail because the database is down
            _log.warning("metrics: database gauges unavailable", exc_info=True)
            up = 0.0
        yield GaugeMetricFamily("toolsift_database_up", "1 if the gauges could be read.", up)
        for gauge, value in values:
            yield GaugeMetricFamily(gauge.name, gauge.help, value=value)

    def _read(self) -> list[tuple[SqlGauge, float]]:
        values: list[tuple[SqlGauge, float]] = []
        with self.database.unit_of_work(None, permissions=ALL_PERMISSIONS) as session:
            session.execute(text("SELECT set_config('statement_timeout', '2000', true)"))
            as_observer(session)
            for gauge in GAUGES:
                readable = all(
                    session.execute(
                        _READABLE, {"table": t, "column": c, "role": OBSERVER_ROLE}
                    ).scalar_one()
                    for t, c in gauge.needs
                )
                if readable:
                    values.append((gauge, float(session.execute(text(gauge.sql)).scalar_one())))
        return values


# Seconds a scrape waits for the gauges before it answers with `toolsift_database_up 0`.
GAUGES_TIMEOUT = 3.0
_gauge_reads: SingleFlight[list[tuple[SqlGauge, float]]] = SingleFlight("metrics-gauges")


def exposition(database: Database | None) -> bytes:
    """The /metrics body: this process's (or all workers') metrics, then the SQL gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        body = generate_latest(registry)
    else:
        body = generate_latest(REGISTRY)
    if database is not None:
        gauges = CollectorRegistry()
        gauges.register(DatabaseGauges(database))
        body += generate_latest(gauges)
    return body
