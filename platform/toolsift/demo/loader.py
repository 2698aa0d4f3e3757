"""A demo tenant with a small support-desk catalog, so `toolsift up` has something to select."""

from __future__ import annotations

from pathlib import Path

from ..access.schemas import KeyCreate, PermissionCreate, RoleCreate
from ..access.service import access
from ..db import ALL_PERMISSIONS, Database
from ..tenants.schemas import TenantCreate
from ..tenants.service import tenant as tenant_service
from ..tools.importer import read_catalog
from ..tools.service import tool as tool_service

CATALOG = Path(__file__).with_name("catalog.jsonl")
ROLES = {
    "support": ["crm.read", "orders.read", "tickets.read", "tickets.write", "catalog.read"],
    "billing": ["billing.read", "billing.refund", "billing.write"],
    "supervisor": ["admin", "crm.write", "orders.write", "comms.send"],
}


def load_demo(database: Database, *, pepper: str) -> dict[str, str]:
    """Create the demo tenant; returns its id, admin key and an agent key (support, billing)."""
    tools = [item.tool for item in read_catalog(CATALOG)]
    with database.unit_of_work(None) as session:
        created = tenant_service.create(session, TenantCreate(name="demo"), pepper=pepper)
        tenant_id = created.tenant.id
    with database.unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        for name in sorted({p for ps in ROLES.values() for p in ps}):
            access.create_permission(session, tenant_id, PermissionCreate(name=name))
        for role, permissions in ROLES.items():
            access.create_role(session, tenant_id, RoleCreate(name=role, permissions=permissions))
        tool_service.upsert(session, tenant_id, tools)
        agent = access.create_key(
            session,
            tenant_id,
            KeyCreate(name="demo agent", scope="agent", roles=["support", "billing"]),
            pepper=pepper,
        )
    return {
        "tenant_id": str(tenant_id),
        "admin_key": created.admin_key.secret,
        "agent_key": agent.secret,
    }
