from __future__ import annotations

import hmac

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials

from ..auth.deps import AdminContext, bearer, get_database
from ..errors import Forbidden, Unauthenticated
from ..kit.errors import ERRORS
from ..kit.routing import StrictJSONRoute
from ..models import Tenant
from ..security import audit
from .schemas import TenantCreate, TenantCreated, TenantRead, TenantUpdate
from .service import tenant as tenant_service

router = APIRouter(route_class=StrictJSONRoute, tags=["tenants"], responses=ERRORS)


@router.post("/tenants", response_model=TenantCreated, status_code=201)
def create_tenant(
    data: TenantCreate,
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
) -> TenantCreated:
    """Create a tenant and its first admin key. Needs the operator key
    (`TOOLSIFT_OPERATOR_KEY`); the CLI's `toolsift tenant create` needs none."""
    settings = request.app.state.settings
    if credentials is None:
        raise Unauthenticated("missing operator key (Authorization: Bearer ...)")
    if not settings.operator_key or not hmac.compare_digest(
        credentials.credentials.encode(), settings.operator_key.encode()
    ):
        raise Forbidden("creating tenants needs the operator key")
    with get_database(request).unit_of_work(None) as session:
        audit.track(session, audit.Actor("operator"))
        return tenant_service.create(session, data, pepper=settings.key_pepper)


@router.get("/tenant", response_model=TenantRead)
def get_tenant(ctx: AdminContext) -> Tenant:
    """The tenant of the calling admin key."""
    return tenant_service.get(ctx.session)


@router.patch("/tenant", response_model=TenantRead)
def update_tenant(data: TenantUpdate, ctx: AdminContext) -> Tenant:
    """Rename the tenant, or merge `settings` into its current settings."""
    return tenant_service.update(ctx.session, data)
