"""`toolsift permission ...` and `toolsift role ...`: what agent keys may do, from the shell.

The admin API's operations (`/admin/v1/permissions`, `/admin/v1/roles`) through the same
service, audited as the CLI, so a tenant can be set up end to end without an admin key:
permissions, roles granting them, then `toolsift key create --role`.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..kit.commands import DataDir, Tenant, tenant_session, valid
from .schemas import PermissionCreate, RoleCreate
from .service import access

permission_app = typer.Typer(help="Permissions that tools require.", no_args_is_help=True)
role_app = typer.Typer(help="Roles: named sets of permissions.", no_args_is_help=True)
console = Console()

Description = Annotated[str, typer.Option(help="What it is for.")]


@permission_app.command("create")
def permission_create(
    name: Annotated[str, typer.Argument(help="e.g. billing.refund")],
    tenant: Tenant,
    description: Description = "",
    data_dir: DataDir = None,
) -> None:
    """Create a permission (tools may then require it, roles grant it)."""
    with tenant_session(tenant, data_dir) as session:
        data = valid(PermissionCreate, name=name, description=description)
        access.create_permission(session, tenant, data)
    console.print(f"created permission {name}")


@permission_app.command("list")
def permission_list(tenant: Tenant, data_dir: DataDir = None) -> None:
    """Every permission of the tenant, by name."""
    table = Table("name", "description", box=None)
    with tenant_session(tenant, data_dir) as session:
        for permission in access.list_permissions(session):
            table.add_row(permission.name, permission.description)
    console.print(table)


@permission_app.command("delete")
def permission_delete(name: str, tenant: Tenant, data_dir: DataDir = None) -> None:
    """Delete a permission no tool requires (roles lose it)."""
    with tenant_session(tenant, data_dir) as session:
        ids = access.permission_ids(session, [name], field="name")
        access.delete_permission(session, ids[name])
    console.print(f"deleted permission {name}")


@role_app.command("create")
def role_create(
    name: Annotated[str, typer.Argument(help="e.g. support")],
    tenant: Tenant,
    permission: Annotated[
        list[str] | None, typer.Option(help="A permission the role grants (repeat).")
    ] = None,
    description: Description = "",
    data_dir: DataDir = None,
) -> None:
    """Create a role granting permissions (agent keys may then assert it)."""
    with tenant_session(tenant, data_dir) as session:
        data = valid(RoleCreate, name=name, description=description, permissions=permission or [])
        role = access.create_role(session, tenant, data)
    console.print(f"created role {name}: {', '.join(role.permissions) or 'no permissions'}")


@role_app.command("list")
def role_list(tenant: Tenant, data_dir: DataDir = None) -> None:
    """Every role of the tenant with the permissions it grants."""
    table = Table("name", "permissions", "description", box=None)
    with tenant_session(tenant, data_dir) as session:
        for role in access.list_roles(session):
            table.add_row(role.name, ", ".join(role.permissions), role.description)
    console.print(table)


@role_app.command("grant")
def role_grant(role: str, permission: str, tenant: Tenant, data_dir: DataDir = None) -> None:
    """Let a role's keys use the tools that require a permission (from their next select)."""
    with tenant_session(tenant, data_dir) as session:
        ids = access.role_ids(session, [role], field="role")
        before = access.get_role(session, ids[role]).permissions
        view = access.grant(session, ids[role], permission)
    said = " (it already had it)" if permission in before else ""
    console.print(f"role {role}: {', '.join(view.permissions)}{said}")


@role_app.command("revoke")
def role_revoke(role: str, permission: str, tenant: Tenant, data_dir: DataDir = None) -> None:
    """Take a permission from a role (its keys lose the tools at their next select)."""
    with tenant_session(tenant, data_dir) as session:
        ids = access.role_ids(session, [role], field="role")
        before = access.get_role(session, ids[role]).permissions
        view = access.revoke(session, ids[role], permission)
    said = "" if permission in before else f" (it did not have {permission})"
    console.print(f"role {role}: {', '.join(view.permissions) or 'no permissions'}{said}")


@role_app.command("delete")
def role_delete(role: str, tenant: Tenant, data_dir: DataDir = None) -> None:
    """Delete a role (keys that held it no longer may assert it)."""
    with tenant_session(tenant, data_dir) as session:
        ids = access.role_ids(session, [role], field="role")
        access.delete_role(session, ids[role])
    console.print(f"deleted role {role}")
