"""All ORM models in one package, so Alembic and the mappers see everything through one import."""

from .access import ApiKey, ApiKeyRole, Permission, Role, RolePermission
from .audit import AuditEntry
from .base import Base
from .embedding import EmbeddingRefusal, LearnedQuery, OutboxJob, ToolEmbedding
from .mcp import McpSource, McpTool
from .selection import SelectionLog, ToolCall, ToolVersion
from .tenant import Tenant
from .tool import CorpusStat, TermStat, Tool, ToolTerm

__all__ = [
    "ApiKey",
    "ApiKeyRole",
    "AuditEntry",
    "Base",
    "CorpusStat",
    "EmbeddingRefusal",
    "LearnedQuery",
    "McpSource",
    "McpTool",
    "OutboxJob",
    "Permission",
    "Role",
    "RolePermission",
    "SelectionLog",
    "Tenant",
    "TermStat",
    "Tool",
    "ToolCall",
    "ToolEmbedding",
    "ToolTerm",
    "ToolVersion",
]
