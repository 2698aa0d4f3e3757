from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from ..access.schemas import KeyCreate, KeyCreated
from ..access.service import access
from ..db import ALL_PERMISSIONS, set_permissions, set_tenant
from ..errors import NotFound
from ..models import Tenant
from .schemas import TenantCreate, TenantCreated, TenantRead, TenantUpdate


class TenantService:
    def create(self, session: Session, data: TenantCreate, *, pepper: str) -> TenantCreated:
        """A new tenant with its first admin key; RLS checks the insert against the new id."""
        tenant_id = uuid.uuid4()
        set_tenant(session, tenant_id)
        set_permissions(session, ALL_PERMISSIONS)
        tenant = Tenant(id=tenant_id, name=data.name, settings={}, next_position=0)
        session.add(tenant)
        session.flush()
        key = access.create_key(
            session, tenant_id, KeyCreate(name="bootstrap admin", scope="admin"), pepper=pepper
        )
        return TenantCreated(
            tenant=TenantRead.model_validate(tenant),
            admin_key=KeyCreated.model_validate(key, from_attributes=True),
        )

    def get(self, session: Session) -> Tenant:
        tenant = session.get(Tenant, session.info["tenant_id"])
        if tenant is None:
            raise NotFound("tenant not found")
        return tenant

    def update(self, session: Session, data: TenantUpdate) -> Tenant:
        tenant = self.get(session)
        if data.name is not None:
            tenant.name = data.name
        if data.settings is not None:
            given = data.settings.model_dump(exclude_unset=True)
            tenant.settings = merged(tenant.settings, given)
        session.flush()
        return tenant


def merged(current: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """Key by key, at every depth: `{"fusion": {"k": 30}}` keeps the other fusion settings."""
    result = dict(current)
    for key, value in given.items():
        old = result.get(key)
        result[key] = (
            merged(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
        )
    return result


tenant = TenantService()
