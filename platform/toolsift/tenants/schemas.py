from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import ConfigDict, Field, field_validator

from ..access.schemas import KeyCreated
from ..kit.schemas import ReadSchema, Schema, StoredSchema
from ..kit.text import escape_unstorable, find_unstorable
from ..lexical.analysis import TEXT_SEARCH_CONFIGS


class TenantCreate(StoredSchema):
    name: str = Field(min_length=1, max_length=200, examples=["acme-support"])


_NUMBER: dict[str, Any] = {"strict": True, "allow_inf_nan": False}


class FusionSettings(Schema):
    """Reciprocal rank fusion of hybrid selects: a tool scores sum(weight / (k + rank)), the
    weights split by the query's best BM25 score (see `selection.dense.Fusion`).

    Omitted (or null) values take the defaults of `selection.dense.Fusion`.
    """

    # Bounded above too: far past any useful value, 1e300 only hides a mistake.
    k: float | None = Field(
        default=None, gt=0, le=1e6, description="Rank constant, > 0.", **_NUMBER
    )
    bm25_weight: float | None = Field(
        default=None, ge=0, le=1e6, description="Not 0 with dense_weight 0.", **_NUMBER
    )
    dense_weight: float | None = Field(default=None, ge=0, le=1e6, **_NUMBER)
    bm25_scale: float | None = Field(
        default=None,
        gt=0,
        le=1e6,
        description="BM25 score at which both lists weigh the same.",
        **_NUMBER,
    )
    bm25_floor: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description=(
            "Least share of the weight BM25 keeps, times the query's coverage in BM25's"
            " first tool (1 when it has every word of the query)."
        ),
        **_NUMBER,
    )
    usage_weight: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="Weight of learned usage (tools by the nearest query they were called"
        " for), times dense's share; 0 turns the list off.",
        **_NUMBER,
    )
    companion_weight: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="How much a leading tool lifts the candidates called together with it"
        " (the share of its last calls' selections they were called in, times its score);"
        " 0 turns it off.",
        **_NUMBER,
    )
    companion_leads: int | None = Field(
        default=None,
        ge=1,
        le=100,
        strict=True,
        description="How many of the first fused tools lift the tools called with them.",
    )
    companion_support: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        strict=True,
        description="Selections a tool must have been called for before it lifts others.",
    )
    companion_window: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        strict=True,
        description="How many of a leading tool's latest calls count.",
    )


class TenantSettings(StoredSchema):
    """Known settings are checked (a bad value is a 422 naming it); others are kept as given."""

    model_config = ConfigDict(extra="allow")

    fusion: FusionSettings | None = None
    text_search: str | None = Field(
        default=None,
        strict=True,
        description="The PostgreSQL text search configuration its tools and queries are"
        " analysed with for BM25: a language's stemmer and stop words, or 'simple' (words"
        " only lowercased). English if omitted or null. A change indexes the catalog again,"
        " within the request.",
        examples=["spanish"],
    )
    unaccent: bool | None = Field(
        default=None,
        strict=True,
        description="Fold accents before stemming, in tools and queries alike, so that"
        " 'créer' and 'creer' are one word (PostgreSQL's unaccent). Off if omitted or null. A"
        " change indexes the catalog again, within the request.",
        examples=[True],
    )
    log_retention_days: int | None = Field(
        default=None,
        ge=1,
        le=36_500,
        strict=True,
        description="Days this tenant's selection logs are kept (the deployment's default if"
        " omitted or null).",
    )

    @field_validator("text_search")
    @classmethod
    def _known_text_search(cls, value: str | None) -> str | None:
        if value is not None and value not in TEXT_SEARCH_CONFIGS:
            raise ValueError(f"{value!r} is not one of: {', '.join(TEXT_SEARCH_CONFIGS)}")
        return value


class TenantUpdate(StoredSchema):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    settings: TenantSettings | None = Field(
        default=None,
        description="Per-tenant retrieval settings, merged key by key (at every depth) into the"
        " current ones (a JSON merge patch): a null removes its key, which resets a known"
        " setting to its default.",
        examples=[{"fusion": {"k": 60, "bm25_weight": 1.0, "dense_weight": 1.5}}],
    )

    @field_validator("settings", mode="before")
    @classmethod
    def _storable_extras(cls, value: Any) -> Any:
        """Unknown settings are stored as given: NUL and lone surrogates are refused in them
        too, before parsing."""
        if (found := find_unstorable(value)) is not None:
            path, why = found
            where = escape_unstorable(f" (at {path})") if path else ""
            raise ValueError(f"{why} are not allowed{where}")
        return value


class TenantRead(ReadSchema):
    id: UUID
    name: str
    settings: dict[str, Any]
    created_at: datetime


class TenantCreated(Schema):
    tenant: TenantRead
    admin_key: KeyCreated


class TenantSummary(ReadSchema):
    id: UUID
    name: str
    created_at: datetime
    tools: int = Field(description="Live (not deleted) tools in its catalog.")


class TenantPage(Schema):
    """Oldest first; `next_cursor` is passed back as `after`."""

    items: list[TenantSummary]
    next_cursor: str | None = Field(
        description="Opaque and URL-safe: pass it back as it is.",
        examples=["dAAGYdnochEI1fQmzMZQTxawCodj5XjHzA"],
    )
