from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import Field

from ..kit.schemas import ReadSchema, StoredSchema

# Names that read well in URLs, logs and SQL; dots allowed for `crm.read`-style permissions.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,63}$"
# A role as a caller asserts it: only a name a role can have (so never NUL or SQL).
RoleName = Annotated[str, Field(pattern=NAME_PATTERN)]


class PermissionCreate(StoredSchema):
    name: str = Field(pattern=NAME_PATTERN, examples=["billing.refund"])
    description: str = Field(default="", max_length=1000)


class PermissionRead(ReadSchema):
    id: UUID
    name: str
    description: str
    created_at: datetime


class RoleCreate(StoredSchema):
    name: str = Field(pattern=NAME_PATTERN, examples=["support"])
    description: str = Field(default="", max_length=1000)
    permissions: list[str] = Field(
        default_factory=list, max_length=1000, description="Permission names granted to the role."
    )


class RoleUpdate(StoredSchema):
    description: str | None = Field(default=None, max_length=1000)
    permissions: list[str] | None = Field(
        default=None, max_length=1000, description="Replaces the role's grants when given."
    )


class RoleRead(ReadSchema):
    id: UUID
    name: str
    description: str
    permissions: list[str]
    created_at: datetime


class KeyCreate(StoredSchema):
    name: str = Field(min_length=1, max_length=200, examples=["support-bot"])
    scope: Literal["admin", "agent"]
    roles: list[str] = Field(
        default_factory=list, max_length=100, description="Roles an agent key may assert."
    )


class KeyRead(ReadSchema):
    id: UUID
    name: str
    scope: str
    prefix: str
    roles: list[str]
    created_at: datetime
    revoked_at: datetime | None


class KeyCreated(KeyRead):
    secret: str = Field(description="The API key. Shown once; only a keyed hash is stored.")
