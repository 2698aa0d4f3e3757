"""All ORM models in one package, so Alembic and the mappers see everything through one import."""

from .access import ApiKey, ApiKeyRole, Permission, Role, RolePermission
from .audit import AuditEntry
from .base import Base
from .embedding import OutboxJob, ToolEmbedding
from .selection import SelectionLog, ToolCall, ToolVersion
from .tenant import Tenant
from .tool import CorpusStat, TermStat, Tool, ToolTerm

__all__ = [
    "ApiKey",
    "ApiKeyRole",
    "AuditEntry",
    "Base",
    "CorpusStat",
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
