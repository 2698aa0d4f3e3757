from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class EmbeddingStatusRead(BaseModel):
    """How far the vectors lag the catalog; BM25 serves whatever is not embedded yet."""

    model: str | None = Field(description="The model whose vectors serve dense scores.")
    query_model: str = Field(
        description="The model this API embeds queries with. Dense and hybrid scores need it"
        " to equal `model`; while they differ (a model change in progress), BM25 serves alone"
        " and selects count every tool in `missing_embeddings`."
    )
    tools: int = Field(description="Live tools.")
    embedded: int = Field(description="Live tools with a vector of their current version.")
    stale: int = Field(description="Live tools whose vector is of an older version (it serves).")
    missing: int = Field(description="Live tools with no vector in the served model.")
    pending_jobs: int = Field(description="Embedding jobs not finished yet.")
    refused_jobs: int = Field(
        description="Pending jobs whose text the embedding server refused at least once (the"
        " worker log names the tool); dropped after five refusals."
    )
    other_models: dict[str, int] = Field(
        description="Vectors of models other than the served one, by model: a model change in"
        " progress (the new model takes over once it covers every live tool)."
    )
    refused_tools: int = Field(
        description="Live tools the embedding server refused five times at their current"
        " version: no vector (BM25 finds them), a model change does not wait for them, and a"
        " new version or a reindex tries again."
    )
    refused: list[RefusedToolRead] = Field(
        description="The first 100 of those, in registry order, with the server's reason."
    )
    learned_queries: int = Field(
        description="Queries learned from reported tool calls (POST /v1/tool-calls): each"
        " one more vector of the tool called after it."
    )
    learned_embedded: int = Field(
        description="Of those, the ones with a vector of the served model (they rank now)."
    )


class RefusedToolRead(BaseModel):
    name: str
    model: str
    version: int = Field(description="The version whose text was refused.")
    reason: str = Field(description="What the embedding server answered.")
    refused_at: datetime


class ReindexResult(BaseModel):
    queued: int
