from __future__ import annotations

from datetime import date, datetime
from uuid import UUID

from pydantic import BaseModel, Field, StrictBool

from ..kit.schemas import Schema, StoredSchema
from ..tools.schemas import TOOL_NAME_PATTERN


class ToolCallCreate(StoredSchema):
    """What the model called after a select, as the agent saw it at execution time."""

    selection_id: UUID = Field(description="`selection_id` of the select that offered tools.")
    tool: str = Field(pattern=TOOL_NAME_PATTERN, description="Name of the tool the model called.")
    allowed: StrictBool = Field(description="Whether the call was allowed at execution time.")
    success: StrictBool | None = Field(
        default=None, description="Whether the call succeeded, if known."
    )


class ToolCallRead(Schema):
    id: UUID
    selection_id: UUID
    tool: str
    allowed: bool
    success: bool | None
    # Whether the select had offered this tool: one sample of recall of the called tool.
    selected: bool
    # Whether the call taught the tenant's ranking (its query is learned for the tool): an
    # allowed call of a live tool the key may use, not reported as failed, after a query.
    learned: bool
    created_at: datetime


class RecallRow(BaseModel):
    day: date
    mode: str
    calls: int
    hits: int
    recall: float


class TokensRow(BaseModel):
    day: date
    selections: int
    tokens_sent: int
    catalog_tokens: int
    tokens_saved: int
    saved_share: float | None
    avg_tokens: float
    avg_catalog_tokens: float


class LatencyRow(BaseModel):
    day: date
    mode: str
    selections: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


class ZeroResultRow(BaseModel):
    kind: str
    query: str
    selections: int
    first_seen: datetime
    last_seen: datetime


class NeverSelectedRow(BaseModel):
    tool_id: UUID
    name: str
    core: bool
    created_at: datetime


class NeverCalledRow(BaseModel):
    tool_id: UUID
    name: str
    core: bool
    selections: int
    last_selected: datetime


class ToolUsageRow(BaseModel):
    day: date
    tool_name: str
    selections: int
    calls: int


class TopToolRow(BaseModel):
    tool_name: str
    selections: int
    calls: int


class NearDuplicateRow(BaseModel):
    tool_a: UUID
    name_a: str
    tool_b: UUID
    name_b: str
    model: str | None
    cosine_similarity: float | None
    name_similarity: float


class DriftRow(BaseModel):
    tool_id: UUID
    name: str
    version: int
    changed_at: datetime
    description_changed: bool
    selections_before: int
    selected_before: int
    rate_before: float | None
    selections_after: int
    selected_after: int
    rate_after: float | None
    rate_change: float | None


class AnalystLogin(Schema):
    login: str = Field(description="PostgreSQL login of this tenant's analyst.")
    password: str = Field(description="Shown once; creating the login again replaces it.")
    database: str = Field(description="Database to connect to.")
    options: str = Field(
        description="Connection options (libpq `options`, or PGOPTIONS): the whole catalog of "
        "the tenant counts, not only its public tools."
    )
    views: list[str] = Field(description="What the login may read (schema `analytics`).")


class MaintenanceResult(BaseModel):
    created: list[str]
    dropped: list[str]
    deleted: int
    # Learned queries not called again within their tenant's retention.
    forgotten: int
