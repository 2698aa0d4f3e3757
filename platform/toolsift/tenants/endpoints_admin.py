from __future__ import annotations

import hmac
import logging
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials

from ..auth import deps, keys
from ..auth.deps import AdminContext, bearer, get_database
from ..db import ALL_PERMISSIONS
from ..errors import Forbidden, NoCredentials, Unauthenticated
from ..kit.errors import ERRORS
from ..kit.routing import StrictJSONRoute
from ..models import Tenant
from ..security import audit
from .schemas import TenantCreate, TenantCreated, TenantPage, TenantRead, TenantUpdate
from .service import tenant as tenant_service

router = APIRouter(route_class=StrictJSONRoute, tags=["tenants"], responses=ERRORS)
_log = logging.getLogger(__name__)


def _require_operator(
    request: Request, credentials: HTTPAuthorizationCredentials | None, action: str
) -> None:
    """Tenants are made and removed by the deployment's operator, not by any tenant's key.

    Any other key, a tenant's included, is a wrong credential here: a 401, counted against
    the client's address like a wrong API key. The key has a rate limit of its own, by its
    HMAC like every key's, taken with the address's before the key is compared.
    """
    settings = request.app.state.settings
    if credentials is None:
        raise NoCredentials("missing operator key (Authorization: Bearer ...)")
    if not settings.operator_key:
        raise Forbidden(f"{action} needs the operator key, which this deployment does not set"
                        " (TOOLSIFT_OPERATOR_KEY)")  # fmt: skip
    key_hash = keys.hash_key(credentials.credentials, settings.key_pepper)
    deps.limit(request, key_hash, "operator")
    if not hmac.compare_digest(credentials.credentials.encode(), settings.operator_key.encode()):
        raise Unauthenticated(f"{action} needs the operator key")
    deps.confirm(request, key_hash)


@router.post("/tenants", response_model=TenantCreated, status_code=201)
def create_tenant(
    data: TenantCreate,
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
) -> TenantCreated:
    """Create a tenant and its first admin key. Needs the operator key
    (`TOOLSIFT_OPERATOR_KEY`); the CLI's `toolsift tenant create` needs none."""
    _require_operator(request, credentials, "creating tenants")
    with get_database(request).unit_of_work(None) as session:
        audit.track(session, audit.Actor("operator"))
        return tenant_service.create(session, data, pepper=request.app.state.settings.key_pepper)


@router.get("/tenants", response_model=TenantPage)
def list_tenants(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: Annotated[
        str | None, Query(max_length=100, description="`next_cursor` of the previous page.")
    ] = None,
) -> TenantPage:
    """Every tenant with its live tool count, oldest first. Needs the operator key."""
    _require_operator(request, credentials, "listing tenants")
    with get_database(request).unit_of_work(None) as session:
        return tenant_service.list_all(session, limit=limit, after=after)


@router.delete("/tenants/{tenant_id}", status_code=204)
def delete_tenant(
    tenant_id: UUID,
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
) -> Response:
    """Delete a tenant with its catalog, keys, roles, vectors, logs and analyst login, at
    once and for good. Needs the operator key; its keys stop working at the next request.
    The tenant's audit entries are kept, the last one recording this delete."""
    _require_operator(request, credentials, "deleting tenants")
    with get_database(request).unit_of_work(tenant_id, permissions=ALL_PERMISSIONS) as session:
        audit.track(session, audit.Actor("operator"))
        deleted = tenant_service.delete(session)
    _log.info(
        "tenant deleted",
        extra={"tenant_id": str(tenant_id), "tools": deleted.tools, "keys": deleted.keys},
    )
    return Response(status_code=204)


@router.get("/tenant", response_model=TenantRead)
def get_tenant(ctx: AdminContext) -> Tenant:
    """The tenant of the calling admin key."""
    return tenant_service.get(ctx.session)


@router.patch("/tenant", response_model=TenantRead)
def update_tenant(data: TenantUpdate, ctx: AdminContext) -> Tenant:
    """Rename the tenant, or merge `settings` into its current settings."""
    return tenant_service.update(ctx.session, data).tenant
