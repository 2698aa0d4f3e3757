"""Loading the synthetic tenants through the service layer, as PUT /admin/v1/tools would."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

import psycopg

from toolsift.access.schemas import KeyCreate, PermissionCreate, RoleCreate
from toolsift.access.service import access
from toolsift.config import libpq_url
from toolsift.db import ALL_PERMISSIONS, Database
from toolsift.tenants.schemas import TenantCreate
from toolsift.tenants.service import tenant as tenant_service
from toolsift.tools.schemas import ToolCreate
from toolsift.tools.service import tool as tool_service

from .synthetic import Catalog

#: The admin API's own limit per PUT.
BATCH = 1000


@dataclass(frozen=True)
class Tenant:
    """A loaded catalog and the agent key the load run calls with."""

    catalog: Catalog
    tenant_id: UUID
    key_id: UUID
    agent_key: str
    admin_key: str = ""  # the tenant's admin key, for the writes of `bench load`


@dataclass
class LoadStats:
    tenants: int = 0
    tools: int = 0
    setup_seconds: float = 0.0  # tenants, permissions, roles, keys
    upsert_seconds: float = 0.0  # tool.upsert + commit, batches of BATCH
    analyze_seconds: float = 0.0
    validate_ms_per_tool: float = 0.0
    #: (tenant name, tools, upsert seconds per batch), in load order.
    tenant_batches: list[tuple[str, int, list[float]]] = field(default_factory=list)

    @property
    def tools_per_second(self) -> float:
        return self.tools / self.upsert_seconds if self.upsert_seconds else 0.0

    def by_class(self) -> dict[str, dict[str, float]]:
        """Rate per kind of tenant (small ones together), with their slowest batch."""
        classes: dict[str, dict[str, float]] = {}
        for name, tools, batches in self.tenant_batches:
            key = "small" if name.startswith("small-") else name
            entry = classes.setdefault(key, {"tools": 0, "seconds": 0.0, "slowest_batch": 0.0})
            entry["tools"] += tools
            entry["seconds"] += sum(batches)
            entry["slowest_batch"] = max(entry["slowest_batch"], *batches)
        for entry in classes.values():
            entry["tools_per_second"] = entry["tools"] / entry["seconds"] if entry["seconds"] else 0
        return classes


def load_tenant(database: Database, catalog: Catalog, *, pepper: str, stats: LoadStats) -> Tenant:
    """Tenant, permissions, roles and agent key in one transaction; tools in batches."""
    started = time.perf_counter()
    with database.unit_of_work(None) as session:
        created = tenant_service.create(session, TenantCreate(name=catalog.name), pepper=pepper)
    tenant_id = created.tenant.id
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        for permission in catalog.permissions:
            access.create_permission(session, tenant_id, PermissionCreate(name=permission))
        for role, granted in catalog.roles.items():
            access.create_role(session, tenant_id, RoleCreate(name=role, permissions=granted))
        key = access.create_key(
            session,
            tenant_id,
            KeyCreate(name="bench-agent", scope="agent", roles=catalog.agent_roles),
            pepper=pepper,
        )
    stats.setup_seconds += time.perf_counter() - started
    batches: list[float] = []
    for first in range(0, len(catalog.tools), BATCH):
        batch = catalog.tools[first : first + BATCH]
        started = time.perf_counter()
        with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
            tool_service.upsert(session, tenant_id, batch)
        batches.append(time.perf_counter() - started)
    stats.tenant_batches.append((catalog.name, len(catalog.tools), batches))
    stats.upsert_seconds += sum(batches)
    stats.tenants += 1
    stats.tools += len(catalog.tools)
    return Tenant(catalog, tenant_id, key.id, key.secret, created.admin_key.secret)


def load_all(
    database: Database,
    catalogs: list[Catalog],
    *,
    pepper: str,
    progress: Callable[[Catalog], None] | None = None,
) -> tuple[list[Tenant], LoadStats]:
    stats = LoadStats()
    tenants = []
    for catalog in catalogs:
        tenants.append(load_tenant(database, catalog, pepper=pepper, stats=stats))
        if progress is not None:
            progress(catalog)
    return tenants, stats


# The tables a select reads by index only: their pages must be all-visible, or every
# posting on a page written last costs a heap fetch.
_INDEX_ONLY = ("tool_terms", "tool_embeddings", "tools")
_NOT_ALL_VISIBLE = (
    "SELECT coalesce(sum(relpages - relallvisible), 0) FROM pg_class"
    " WHERE oid = ANY(CAST(%s AS regclass[]))"
)


def analyze(owner_url: str, *, tries: int = 10) -> float:
    """VACUUM ANALYZE as the owner, until the postings' pages are all-visible: a server that
    has run a while has planner statistics and a visibility map autovacuum kept up.

    One pass is not always enough: while another transaction (an autovacuum's ANALYZE of
    another table, say) holds back the oldest snapshot, VACUUM cannot mark the pages written
    last all-visible. On the 10,000-tool tenant that left 20% of the postings behind heap
    fetches, 5-10% of the database's CPU per select.
    """
    started = time.perf_counter()
    with psycopg.connect(libpq_url(owner_url), autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
        for _ in range(tries):
            if not conn.execute(_NOT_ALL_VISIBLE, (list(_INDEX_ONLY),)).fetchone()[0]:  # type: ignore[index]
                break
            time.sleep(0.5)
            conn.execute(f"VACUUM {', '.join(_INDEX_ONLY)}")
    return time.perf_counter() - started


def validation_cost(catalogs: list[Catalog], sample: int = 300) -> float:
    """ms per tool of ToolCreate validation, which PUT pays and the service-layer load skips."""
    tools = [t for c in catalogs for t in c.tools][:sample]
    if not tools:
        return 0.0
    dumped = [t.model_dump() for t in tools]
    started = time.perf_counter()
    for body in dumped:
        ToolCreate.model_validate(body)
    return (time.perf_counter() - started) * 1000 / len(dumped)


def embed_all(
    database: Database, tenants: list[Tenant], chunk: int = 512, *, model: str | None = None
) -> tuple[float, int]:
    """Embed every tenant's pending outbox jobs in-process with a local model (default: the
    default one).

    What the workers would do, done before measuring so dense and hybrid see every vector
    (and the served model switched). Returns (seconds, tools embedded).
    """
    from sqlalchemy import text

    from toolsift.embedding import local
    from toolsift.embedding.service import embed_jobs

    backend = local.backend(model or local.DEFAULT_MODEL, threads=2)
    started = time.perf_counter()
    embedded = 0
    for tenant in tenants:
        with database.unit_of_work(tenant.tenant_id, permissions=ALL_PERMISSIONS) as session:
            jobs = list(
                session.scalars(
                    text("SELECT id FROM outbox WHERE tenant_id = :t ORDER BY created_at, id"),
                    {"t": tenant.tenant_id},
                )
            )
        for first in range(0, len(jobs), chunk):
            result = embed_jobs(database, backend, tenant.tenant_id, jobs[first : first + chunk])
            embedded += result.embedded
    return time.perf_counter() - started, embedded
