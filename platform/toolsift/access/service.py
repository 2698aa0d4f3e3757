"""Permissions, roles, grants and API keys of one tenant."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ..auth import keys
from ..errors import Conflict, NotFound, Unprocessable
from ..models import (
    ApiKey,
    ApiKeyRole,
    McpSource,
    McpTool,
    Permission,
    Role,
    RolePermission,
    Tool,
)
from ..security.audit import lock_chain
from .schemas import KeyCreate, PermissionCreate, RoleCreate, RoleUpdate

# Permissions the platform itself requires and no role may hold. `mcp.review` is required by
# MCP tools held for review: RLS then hides them from every agent before any scoring, exactly
# like a forbidden tool. A database trigger refuses the grant as well.
REVIEW_PERMISSION = "mcp.review"
RESERVED_PERMISSIONS = frozenset({REVIEW_PERMISSION})


@dataclass(frozen=True)
class RoleView:
    id: UUID
    name: str
    description: str
    permissions: list[str]
    created_at: datetime


@dataclass(frozen=True)
class KeyView:
    id: UUID
    name: str
    scope: str
    prefix: str
    roles: list[str]
    created_at: datetime
    revoked_at: datetime | None
    secret: str = ""


class AccessService:
    # --- permissions -------------------------------------------------------------------------
    def create_permission(
        self, session: Session, tenant_id: UUID, data: PermissionCreate
    ) -> Permission:
        lock_chain(session, tenant_id)
        if data.name in RESERVED_PERMISSIONS:
            raise Unprocessable(f"permission {data.name!r} is reserved", field="name")
        if session.scalar(select(Permission.id).where(Permission.name == data.name)):
            raise Conflict(f"permission {data.name!r} already exists", field="name")
        permission = Permission(
            tenant_id=tenant_id, id=uuid.uuid4(), name=data.name, description=data.description
        )
        session.add(permission)
        session.flush()
        return permission

    def reserved_permission(self, session: Session, tenant_id: UUID, name: str) -> Permission:
        """The tenant's reserved permission `name`, created on first use."""
        assert name in RESERVED_PERMISSIONS
        lock_chain(session, tenant_id)
        permission = session.scalar(select(Permission).where(Permission.name == name))
        if permission is None:
            permission = Permission(
                tenant_id=tenant_id,
                id=uuid.uuid4(),
                name=name,
                description="Reserved: required by tools held for review; no role may hold it.",
            )
            session.add(permission)
            session.flush()
        return permission

    def list_permissions(self, session: Session) -> Sequence[Permission]:
        return session.scalars(select(Permission).order_by(Permission.name)).all()

    def get_permission(self, session: Session, permission_id: UUID) -> Permission:
        permission = session.get(Permission, (session.info["tenant_id"], permission_id))
        if permission is None:
            raise NotFound("permission not found", field="permission_id")
        return permission

    def delete_permission(self, session: Session, permission_id: UUID) -> None:
        # After the tenant's tool writes too (they take the same lock first): a tool that one
        # of them is giving this permission is counted below.
        lock_chain(session)
        permission = self.get_permission(session, permission_id)
        requiring = session.scalars(
            select(Tool).where(Tool.required_permission_id == permission.id)
        ).all()
        if in_use := sorted(tool.name for tool in requiring if tool.deleted_at is None):
            named = ", ".join(in_use[:10]) + (
                f" and {len(in_use) - 10} more" if in_use[10:] else ""
            )
            raise Conflict(
                f"permission {permission.name!r} is required by {len(in_use)} tool(s): {named}",
                field="permission_id",
            )
        # MCP sources give it to the tools they import (and will give it at the next sync).
        sources = session.scalars(
            select(McpSource.name)
            .where(
                (McpSource.default_permission_id == permission.id)
                | McpSource.id.in_(
                    select(McpTool.source_id).where(McpTool.permission_id == permission.id)
                )
            )
            .order_by(McpSource.name)
        ).all()
        if sources:
            raise Conflict(
                f"permission {permission.name!r} is used by MCP source(s) {', '.join(sources)}"
            )
        # Deleted tools keep the permission they last had, and would hold it forever; a tool
        # brought back by a write gets the permission that write names.
        for tool in requiring:
            tool.required_permission_id = None
        session.flush()
        # The grants go first, through the ORM, so the audit log records each of them: the
        # foreign key's cascade would remove them unseen.
        session.execute(delete(RolePermission).where(RolePermission.permission_id == permission.id))
        session.delete(permission)
        session.flush()

    def find_permission_ids(self, session: Session, names: Iterable[str]) -> dict[str, UUID]:
        """Ids of those of `names` that exist; unknown names are simply absent."""
        wanted = set(names)
        if not wanted:
            return {}
        return dict(
            session.execute(
                select(Permission.name, Permission.id).where(Permission.name.in_(wanted))
            ).all()
        )

    def permission_ids(
        self, session: Session, names: Iterable[str], *, field: str
    ) -> dict[str, UUID]:
        wanted = set(names)
        found = self.find_permission_ids(session, wanted)
        if missing := sorted(wanted - found.keys()):
            raise Unprocessable(f"unknown permission(s): {', '.join(missing)}", field=field)
        return found

    # --- roles -------------------------------------------------------------------------------
    def create_role(self, session: Session, tenant_id: UUID, data: RoleCreate) -> RoleView:
        lock_chain(session, tenant_id)
        if session.scalar(select(Role.id).where(Role.name == data.name)):
            raise Conflict(f"role {data.name!r} already exists", field="name")
        role = Role(
            tenant_id=tenant_id, id=uuid.uuid4(), name=data.name, description=data.description
        )
        session.add(role)
        session.flush()
        self._grant(session, role, data.permissions)
        return self._role_view(session, role)

    def update_role(self, session: Session, role_id: UUID, data: RoleUpdate) -> RoleView:
        lock_chain(session)
        role = self._role(session, role_id)
        if data.description is not None:
            role.description = data.description
        if data.permissions is not None:
            session.execute(delete(RolePermission).where(RolePermission.role_id == role.id))
            self._grant(session, role, data.permissions)
        session.flush()
        return self._role_view(session, role)

    def grant(self, session: Session, role_id: UUID, permission: str) -> RoleView:
        lock_chain(session)
        role = self._role(session, role_id)
        self._grant(session, role, [permission], field="permission")
        return self._role_view(session, role)

    def revoke(self, session: Session, role_id: UUID, permission: str) -> RoleView:
        lock_chain(session)
        role = self._role(session, role_id)
        ids = self.permission_ids(session, [permission], field="permission")
        session.execute(
            delete(RolePermission).where(
                RolePermission.role_id == role.id, RolePermission.permission_id == ids[permission]
            )
        )
        return self._role_view(session, role)

    def get_role(self, session: Session, role_id: UUID) -> RoleView:
        return self._role_view(session, self._role(session, role_id))

    def list_roles(self, session: Session) -> list[RoleView]:
        return [
            self._role_view(session, r) for r in session.scalars(select(Role).order_by(Role.name))
        ]

    def delete_role(self, session: Session, role_id: UUID) -> None:
        lock_chain(session)
        role = self._role(session, role_id)
        # Its grants and the keys' right to assert it, audited one by one (see
        # `delete_permission`).
        session.execute(delete(RolePermission).where(RolePermission.role_id == role.id))
        session.execute(delete(ApiKeyRole).where(ApiKeyRole.role_id == role.id))
        session.delete(role)
        session.flush()

    def role_ids(self, session: Session, names: Iterable[str], *, field: str) -> dict[str, UUID]:
        wanted = set(names)
        found = dict(session.execute(select(Role.name, Role.id).where(Role.name.in_(wanted))).all())
        if missing := sorted(wanted - found.keys()):
            raise Unprocessable(f"unknown role(s): {', '.join(missing)}", field=field)
        return found

    def _role(self, session: Session, role_id: UUID) -> Role:
        role = session.get(Role, (session.info["tenant_id"], role_id))
        if role is None:
            raise NotFound("role not found", field="role_id")
        return role

    def _grant(
        self,
        session: Session,
        role: Role,
        permissions: Iterable[str],
        *,
        field: str = "permissions",
    ) -> None:
        permissions = list(permissions)
        if reserved := sorted(RESERVED_PERMISSIONS.intersection(permissions)):
            raise Unprocessable(
                f"permission {reserved[0]!r} is reserved and cannot be granted", field=field
            )
        ids = self.permission_ids(session, permissions, field=field)
        existing = set(
            session.scalars(
                select(RolePermission.permission_id).where(RolePermission.role_id == role.id)
            )
        )
        for permission_id in ids.values():
            if permission_id not in existing:
                session.add(
                    RolePermission(
                        tenant_id=role.tenant_id, role_id=role.id, permission_id=permission_id
                    )
                )
        session.flush()

    def _role_view(self, session: Session, role: Role) -> RoleView:
        names = session.scalars(
            select(Permission.name)
            .join(RolePermission, RolePermission.permission_id == Permission.id)
            .where(RolePermission.role_id == role.id)
            .order_by(Permission.name)
        ).all()
        return RoleView(role.id, role.name, role.description, list(names), role.created_at)

    # --- API keys ----------------------------------------------------------------------------
    def create_key(
        self, session: Session, tenant_id: UUID, data: KeyCreate, *, pepper: str
    ) -> KeyView:
        lock_chain(session, tenant_id)
        if data.scope == "admin" and data.roles:
            raise Unprocessable("admin keys see every tool; they take no roles", field="roles")
        role_ids = self.role_ids(session, data.roles, field="roles")
        key_id = uuid.uuid4()
        secret = keys.new_secret()
        raw = keys.format_key(tenant_id, key_id, secret)
        key = ApiKey(
            tenant_id=tenant_id,
            id=key_id,
            name=data.name,
            scope=data.scope,
            prefix=keys.display_prefix(secret),
            key_hash=keys.hash_key(raw, pepper),
        )
        session.add(key)
        session.flush()
        session.add_all(
            ApiKeyRole(tenant_id=tenant_id, key_id=key_id, role_id=r) for r in role_ids.values()
        )
        session.flush()
        view = self._key_view(session, key)
        return KeyView(**{**view.__dict__, "secret": raw})

    def list_keys(self, session: Session) -> list[KeyView]:
        return [
            self._key_view(session, k)
            for k in session.scalars(select(ApiKey).order_by(ApiKey.created_at, ApiKey.id))
        ]

    def get_key(self, session: Session, key_id: UUID) -> KeyView:
        return self._key_view(session, self._key(session, key_id))

    def revoke_key(self, session: Session, key_id: UUID) -> KeyView:
        lock_chain(session)
        key = self._key(session, key_id)
        if key.revoked_at is None:
            key.revoked_at = datetime.now(UTC)
            session.flush()
        return self._key_view(session, key)

    def _key(self, session: Session, key_id: UUID) -> ApiKey:
        key = session.get(ApiKey, (session.info["tenant_id"], key_id))
        if key is None:
            raise NotFound("key not found", field="key_id")
        return key

    def _key_view(self, session: Session, key: ApiKey) -> KeyView:
        roles = session.scalars(
            select(Role.name)
            .join(ApiKeyRole, ApiKeyRole.role_id == Role.id)
            .where(ApiKeyRole.key_id == key.id)
            .order_by(Role.name)
        ).all()
        return KeyView(
            key.id, key.name, key.scope, key.prefix, list(roles), key.created_at, key.revoked_at
        )


access = AccessService()
