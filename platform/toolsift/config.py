"""Settings: the only reader of the environment."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .embedding import models

# The role the application runs as: neither owner of the tables nor BYPASSRLS.
APP_ROLE = "toolsift_app"


def normalise_database_url(url: str) -> str:
    """Use psycopg 3 whatever scheme the user wrote."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def libpq_url(url: str) -> str:
    """The same URL for `psycopg.connect`, which knows no SQLAlchemy driver suffix."""
    return url.replace("postgresql+psycopg://", "postgresql://")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TOOLSIFT_", env_file=".env", env_ignore_empty=True, extra="ignore"
    )

    env: Literal["development", "testing", "production"] = "development"
    # Unset means: run the embedded PostgreSQL / Redis in `data_dir`.
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("TOOLSIFT_DATABASE_URL", "DATABASE_URL")
    )
    redis_url: str | None = Field(
        default=None, validation_alias=AliasChoices("TOOLSIFT_REDIS_URL", "REDIS_URL")
    )
    data_dir: Path = Path(".toolsift")
    db_pool_size: int = 10
    # The select path's own connections per API process: its statements run on the event
    # loop, and a few in flight keep one process's core busy; more only add backends.
    select_pool_size: int = Field(default=4, ge=1)
    # `toolsift serve`'s defaults for --host, --port and --workers.
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    # Peers whose X-Forwarded-For uvicorn believes (comma-separated addresses or networks;
    # `*` for any, only where nothing else can reach the port): the client address that
    # failed authentications are limited by. uvicorn's own variable is read too.
    forwarded_allow_ips: str = Field(
        default="127.0.0.1,::1",
        validation_alias=AliasChoices("TOOLSIFT_FORWARDED_ALLOW_IPS", "FORWARDED_ALLOW_IPS"),
    )
    # Keyed hash of API keys; a leaked table alone then cannot be brute-forced offline.
    key_pepper: str = "changethis-development-pepper"
    # Bootstrap secret that may create tenants over the API (the CLI needs none).
    operator_key: str | None = None
    # When set, GET /metrics needs `Authorization: Bearer <token>` (Prometheus'
    # `authorization` scrape setting); unset, /metrics is open and must not be reachable
    # from outside (bind or firewall it to the scraper's network).
    metrics_token: str | None = None
    max_body_bytes: int = 262_144
    # Longest URL query string accepted (414 past it), so a query cannot carry a body's load.
    max_query_bytes: int = 8_192
    # Logs: "json" (one object a line, for collectors) or "text"; level by name.
    log_format: Literal["json", "text"] = "text"
    log_level: str = "INFO"
    # Requests per key per window (Redis-backed; 0 turns a limit off). Without Redis, or
    # while it is down, requests are let through: selects must keep working.
    rate_limit_agent: int = 1200
    rate_limit_admin: int = 300
    rate_limit_operator: int = 60
    # Failed authentications (401s) per client address per window; past them the address's
    # requests are refused with 429, any key, before the key is looked up, until the window
    # ends: made-up keys, each a bucket of its own above, cost the database nothing more.
    rate_limit_failed_auth: int = 60
    rate_limit_window_seconds: int = 60
    rate_limit_redis_timeout: float = 0.05
    # Browser origins allowed to call the API; empty (the default) sends no CORS headers.
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Uvicorn worker processes of `toolsift serve`; Celery's of `toolsift worker`.
    api_workers: int = Field(default=1, ge=1)
    worker_concurrency: int = Field(default=1, ge=1)
    # Embeddings: the bundled ONNX model by default, or an OpenAI-compatible server.
    embedding_backend: Literal["onnx", "http"] = "onnx"
    # The HTTP model's; for the onnx backend, the local model's unless set.
    embedding_dimension: int = 384
    embedding_threads: int = 1
    embedding_batch_size: int = 32
    # The local model (docs/benchmarks.md, "The default model"): MiniLM's packaged weights
    # rebuilt to multiply in int8, the packaged graph as shipped, bge-small, or MiniLM and
    # bge-small together (docs/quality.md, "A second model"). Different vectors: change it
    # as any model change (README, "Embeddings").
    embedding_onnx_model: Literal[
        "all-MiniLM-L6-v2-int8-dynamic",
        "all-MiniLM-L6-v2-int8",
        "bge-small-en-v1.5-int8",
        "all-MiniLM-L6-v2-int8-dynamic+bge-small-en-v1.5-int8",
    ] = "all-MiniLM-L6-v2-int8-dynamic"
    # Where the default local model's built file is kept; unset: $XDG_CACHE_HOME/toolsift,
    # else ~/.cache/toolsift.
    embedding_cache_dir: Path | None = None
    embedding_http_url: str | None = None
    embedding_http_model: str = "all-MiniLM-L6-v2"
    embedding_http_token: str | None = None
    embedding_http_timeout: float = 10.0
    embedding_http_retries: int = 3
    # A select waits this long for its query's embedding, then BM25 serves alone; the API's
    # embedder does not retry (the worker's does), and after a failure it rests a few seconds.
    embedding_query_timeout: float = Field(default=2.0, gt=0)
    # The outbox: how often the relay publishes, how long a published job may stay undone
    # before it is published again (a lost message, a killed worker), tools per embed task.
    # The interval is the floor of freshness: one update with nothing queued was searchable
    # after 0.51 s (median) at 1 s and 0.17 s at 0.25 s; idle, worker and PostgreSQL spent
    # 1.3% and 4.6% of a core (benchmarks/embed_single_update.py).
    outbox_relay_interval: float = 0.25
    outbox_lease_seconds: float = 60.0
    embed_batch_tools: int = 64
    # Selection logs: monthly partitions kept ready this many months ahead; days a tenant's
    # logs are kept unless its settings say otherwise (`log_retention_days`); how often the
    # maintenance task runs (seconds).
    partition_months_ahead: int = Field(default=3, ge=1, le=24)
    log_retention_days: int = Field(default=90, ge=1)
    partition_maintenance_interval: float = 3600.0
    # MCP sources. Their headers, bearer tokens and stdio environments are encrypted at rest
    # with a key derived from this secret (rotate: re-enter the sources' secrets). In
    # production a source's secrets are refused while this is the development default.
    secret_key: str = "changethis-development-secret-key"
    # Commands a stdio source may run, as exact paths. Empty (the default) refuses stdio
    # sources: a tenant admin must not start processes on the workers.
    mcp_stdio_commands: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Environment variables a stdio source may set (exact names): empty, none. A list of
    # allowed names, since many variables make an interpreter or the loader run other code.
    mcp_stdio_env: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Whether an MCP source's URL may reach loopback, private, link-local (cloud metadata) or
    # other non-public addresses from the API and workers. None: yes, except in production,
    # where tenant admins must not be able to probe the operator's own network.
    mcp_private_networks: bool | None = None
    # How often the beat looks for due sources; the default interval of a new source.
    mcp_schedule_interval: float = 30.0
    mcp_sync_interval: int = 3600
    # A server's list TTL shorter than this is stretched to it: a hint, not a hammer.
    mcp_min_sync_interval: int = 60

    @field_validator("cors_origins", "mcp_stdio_commands", "mcp_stdio_env", mode="before")
    @classmethod
    def _origins(cls, value: object) -> object:
        """A comma-separated list in the environment, a JSON list also accepted."""
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)
            return [origin.strip() for origin in value.split(",") if origin.strip()]
        return value

    @model_validator(mode="after")
    def _local_dimension(self) -> Settings:
        """A local model says its own dimension: naming the model is enough."""
        if self.embedding_backend == "onnx" and "embedding_dimension" not in self.model_fields_set:
            self.embedding_dimension = models.DIMENSIONS[self.embedding_onnx_model]
        return self

    @field_validator("database_url")
    @classmethod
    def _psycopg(cls, value: str | None) -> str | None:
        return normalise_database_url(value) if value else value

    @property
    def mcp_private_networks_allowed(self) -> bool:
        if self.mcp_private_networks is not None:
            return self.mcp_private_networks
        return self.env != "production"

    def check_secrets(self) -> None:
        """Refuse to serve production with guessable secrets: the operator key and the
        metrics token are compared as given (only the operator key's failures are limited,
        and by client address, which a client with many addresses spreads), and the pepper
        and the secret key guard what a database dump holds."""
        if self.env != "production":
            return
        if self.key_pepper.startswith("changethis"):
            raise ValueError("TOOLSIFT_KEY_PEPPER must be set in production")
        development_secret_key = self.secret_key.startswith("changethis")
        for name, value in (
            ("KEY_PEPPER", self.key_pepper),
            ("OPERATOR_KEY", self.operator_key),
            ("METRICS_TOKEN", self.metrics_token),
            ("SECRET_KEY", None if development_secret_key else self.secret_key),
        ):
            if value is not None and len(value) < MIN_SECRET_CHARS:
                raise ValueError(
                    f"TOOLSIFT_{name} must be at least {MIN_SECRET_CHARS} characters in"
                    " production (`openssl rand -hex 32` makes one)"
                )


#: Shortest secret production accepts (pepper, operator key, metrics token, secret key).
MIN_SECRET_CHARS = 32


@lru_cache
def get_settings() -> Settings:
    return Settings()
