from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Path, Request

from ..auth.deps import AdminContext
from ..kit.errors import ERRORS
from ..kit.routing import StrictJSONRoute
from .schemas import (
    NAME_PATTERN,
    KeyCreate,
    KeyCreated,
    KeyRead,
    PermissionCreate,
    PermissionRead,
    RoleCreate,
    RoleRead,
    RoleUpdate,
)
from .service import KeyView, RoleView
from .service import access as access_service

permissions = APIRouter(
    route_class=StrictJSONRoute, prefix="/permissions", tags=["permissions"], responses=ERRORS
)
roles = APIRouter(route_class=StrictJSONRoute, prefix="/roles", tags=["roles"], responses=ERRORS)
keys = APIRouter(route_class=StrictJSONRoute, prefix="/keys", tags=["keys"], responses=ERRORS)

PermissionName = Annotated[str, Path(pattern=NAME_PATTERN, description="Permission name.")]


@permissions.post("", response_model=PermissionRead, status_code=201)
def create_permission(data: PermissionCreate, ctx: AdminContext) -> object:
    """Create a permission that tools can require and roles can grant."""
    return access_service.create_permission(ctx.session, ctx.principal.tenant_id, data)


@permissions.get("", response_model=list[PermissionRead])
def list_permissions(ctx: AdminContext) -> object:
    """The tenant's permissions, by name."""
    return access_service.list_permissions(ctx.session)


@permissions.get("/{permission_id}", response_model=PermissionRead)
def get_permission(permission_id: UUID, ctx: AdminContext) -> object:
    """One permission."""
    return access_service.get_permission(ctx.session, permission_id)


@permissions.delete("/{permission_id}", status_code=204)
def delete_permission(permission_id: UUID, ctx: AdminContext) -> None:
    """Delete a permission no tool requires; grants of it go with it."""
    access_service.delete_permission(ctx.session, permission_id)


@roles.post("", response_model=RoleRead, status_code=201)
def create_role(data: RoleCreate, ctx: AdminContext) -> RoleView:
    """Create a role, optionally granting permissions by name."""
    return access_service.create_role(ctx.session, ctx.principal.tenant_id, data)


@roles.get("", response_model=list[RoleRead])
def list_roles(ctx: AdminContext) -> list[RoleView]:
    """The tenant's roles, by name, with the permissions each grants."""
    return access_service.list_roles(ctx.session)


@roles.get("/{role_id}", response_model=RoleRead)
def get_role(role_id: UUID, ctx: AdminContext) -> RoleView:
    """One role and the permissions it grants."""
    return access_service.get_role(ctx.session, role_id)


@roles.patch("/{role_id}", response_model=RoleRead)
def update_role(role_id: UUID, data: RoleUpdate, ctx: AdminContext) -> RoleView:
    """Change the description, or replace the grants with `permissions`."""
    return access_service.update_role(ctx.session, role_id, data)


@roles.delete("/{role_id}", status_code=204)
def delete_role(role_id: UUID, ctx: AdminContext) -> None:
    """Delete a role; keys holding it lose it at their next request."""
    access_service.delete_role(ctx.session, role_id)


@roles.put("/{role_id}/permissions/{permission}", response_model=RoleRead)
def grant_permission(role_id: UUID, permission: PermissionName, ctx: AdminContext) -> RoleView:
    """Grant a permission (by name); takes effect at the callers' next select."""
    return access_service.grant(ctx.session, role_id, permission)


@roles.delete("/{role_id}/permissions/{permission}", response_model=RoleRead)
def revoke_permission(role_id: UUID, permission: PermissionName, ctx: AdminContext) -> RoleView:
    """Revoke a permission; it is gone at the callers' next select."""
    return access_service.revoke(ctx.session, role_id, permission)


@keys.post("", response_model=KeyCreated, status_code=201)
def create_key(data: KeyCreate, ctx: AdminContext, request: Request) -> KeyView:
    """Create an API key. The secret is in this response only; store it now."""
    pepper = request.app.state.settings.key_pepper
    return access_service.create_key(ctx.session, ctx.principal.tenant_id, data, pepper=pepper)


@keys.get("", response_model=list[KeyRead])
def list_keys(ctx: AdminContext) -> list[KeyView]:
    """The tenant's API keys, oldest first, revoked ones included; never their secrets."""
    return access_service.list_keys(ctx.session)


@keys.get("/{key_id}", response_model=KeyRead)
def get_key(key_id: UUID, ctx: AdminContext) -> KeyView:
    """One API key, without its secret."""
    return access_service.get_key(ctx.session, key_id)


@keys.delete("/{key_id}", response_model=KeyRead)
def revoke_key(key_id: UUID, ctx: AdminContext) -> KeyView:
    """Revoke a key; its next request is refused."""
    return access_service.revoke_key(ctx.session, key_id)
