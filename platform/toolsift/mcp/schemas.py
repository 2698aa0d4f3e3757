"""What the admin API takes and shows for MCP sources and their tools.

Secrets go in (`headers`, `bearer_token`, `env`) and never come out: a source is shown with
the names of its headers and environment variables and whether it has a token, nothing more.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import ConfigDict, Field, StrictBool, field_validator

from ..access.schemas import NAME_PATTERN
from ..kit.schemas import ReadSchema, Schema, StoredSchema

PREFIX_PATTERN = r"^[A-Za-z0-9_-]{0,32}$"
HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$"
ReviewState = Literal["clean", "held", "approved", "rejected"]

EXAMPLE_SOURCE: dict[str, Any] = {
    "name": "github",
    "transport": "http",
    "url": "https://mcp.example.com/mcp",
    "bearer_token": "ghp_...",
    "default_permission": "github.use",
}


def _headers(value: dict[str, str] | None) -> dict[str, str] | None:
    if value is None:
        return None
    for name, item in value.items():
        if not re.match(HEADER_NAME, name):
            raise ValueError(f"{name[:100]!r} is not a valid header name")
        if len(item) > 8192 or any(c in item for c in "\r\n"):
            raise ValueError(f"header {name!r}: at most 8192 characters, no line breaks")
    if len(value) > 50:
        raise ValueError("at most 50 headers")
    return value


def _env(value: dict[str, str] | None) -> dict[str, str] | None:
    if value is None:
        return None
    if len(value) > 100:
        raise ValueError("at most 100 variables")
    for name in value:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
            raise ValueError(f"{name[:64]!r} is not an environment variable name")
    return value


class SourceCreate(StoredSchema):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [EXAMPLE_SOURCE]})

    name: str = Field(pattern=NAME_PATTERN, description="Unique in the tenant.")
    prefix: str | None = Field(
        default=None,
        pattern=PREFIX_PATTERN,
        description="Prepended to the server's tool names as `<prefix>_<name>`, so two"
        " servers never collide; defaults to the source name.",
    )
    transport: Literal["http", "stdio"]
    url: str | None = Field(default=None, max_length=2048, description="Streamable HTTP endpoint.")
    headers: dict[str, str] | None = Field(
        default=None, description="Sent with every request; stored encrypted, never shown."
    )
    bearer_token: str | None = Field(
        default=None, max_length=8192, description="Sent as `Authorization: Bearer`; never shown."
    )
    command: str | None = Field(
        default=None, max_length=1024, description="stdio: the program (allowed by the operator)."
    )
    args: list[str] = Field(default_factory=list, max_length=100)
    env: dict[str, str] | None = Field(
        default=None, description="stdio: environment of the process; stored encrypted."
    )
    default_permission: str | None = Field(
        default=None, pattern=NAME_PATTERN, description="Required by the source's tools."
    )
    sync_interval_seconds: int | None = Field(
        default=None,
        ge=60,
        le=7 * 86400,
        description="Between scheduled syncs when the server gives no list TTL.",
    )
    listen: StrictBool = Field(
        default=True, description="Sync on tools/list_changed notifications."
    )
    enabled: StrictBool = True

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _headers(value)

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _env(value)


class SourceUpdate(StoredSchema):
    """Fields to change. `headers`, `bearer_token` and `env` replace what is stored; null
    removes it."""

    url: str | None = Field(default=None, max_length=2048)
    headers: dict[str, str] | None = None
    bearer_token: str | None = Field(default=None, max_length=8192)
    command: str | None = Field(default=None, max_length=1024)
    args: list[str] | None = Field(default=None, max_length=100)
    env: dict[str, str] | None = None
    default_permission: str | None = Field(default=None, pattern=NAME_PATTERN)
    sync_interval_seconds: int | None = Field(default=None, ge=60, le=7 * 86400)
    listen: StrictBool | None = None
    enabled: StrictBool | None = None

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _headers(value)

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _env(value)


class SourceRead(ReadSchema):
    id: UUID
    name: str
    prefix: str
    transport: str
    url: str | None
    command: str | None
    args: list[str]
    header_names: list[str]
    env_names: list[str]
    has_bearer_token: bool
    default_permission: str | None
    enabled: bool
    listen: bool
    sync_interval_seconds: int
    server_ttl_ms: int | None
    next_sync_at: datetime | None
    health: str = Field(description="new (never synced), healthy or unhealthy")
    last_error: str | None
    last_attempt_at: datetime | None
    last_synced_at: datetime | None
    consecutive_failures: int
    tool_count: int
    held_count: int = Field(description="Tools waiting for review (kept out of selection).")
    created_at: datetime
    updated_at: datetime


class McpToolRead(ReadSchema):
    source_id: UUID
    remote_name: str
    tool_id: UUID
    name: str = Field(description="The registry name (`<prefix>_<remote name>`).")
    review_state: ReviewState = Field(
        description="clean (screened, served), held (out of selection until approved),"
        " approved (served at the pinned hash), rejected (kept out)"
    )
    findings: list[dict[str, str]]
    definition: dict[str, Any] = Field(description="The definition as the server gave it.")
    definition_hash: str
    approved_hash: str | None
    reviewed_at: datetime | None
    required_permission: str | None = Field(description="What serving the tool requires.")
    permission_override: bool
    removed_at: datetime | None
    annotations: dict[str, Any] | None = Field(
        description="The server's hints (readOnlyHint, ...); shown, never trusted."
    )


class ReviewDecision(Schema):
    definition_hash: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="The hash you reviewed; refused (409) if the definition changed since.",
    )


class McpToolUpdate(Schema):
    """A per-tool permission instead of the source's default; `inherit` returns to it."""

    required_permission: str | None = Field(default=None, pattern=NAME_PATTERN)
    inherit: StrictBool = False


class SyncRead(ReadSchema):
    source_id: UUID
    status: Literal["synced", "failed", "skipped"]
    error: str | None = None
    field: str | None = None
    pages: int = 0
    tools: int = 0
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    held: int = 0
