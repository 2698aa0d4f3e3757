"""An MCP review pins the hash of what a model can be served, not of `_meta` or `icons`.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05 11:00:00+00:00

`mcp_tools.definition_hash` covered the whole definition a server listed, `_meta` and `icons`
included. Neither reaches a model, and a server may restamp `_meta` on every listing: each
sync then sent an approved tool back to review, which hides it from every agent. The hash
now covers the fields the registry takes (`mcp.catalog.REVIEWED`). Every stored hash is
computed again from the stored definition, and an approval or rejection that pinned the
current definition pins its new hash. A pin of an older definition (the tool is held again)
stays as it was: it matches no current hash, so the tool stays held until reviewed.
"""

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROWS = sa.text(
    "SELECT tenant_id, source_id, remote_name, definition, definition_hash, approved_hash"
    " FROM mcp_tools"
).execution_options(stream_results=True, max_row_buffer=1000)
UPDATE = sa.text(
    "UPDATE mcp_tools SET definition_hash = :hash, approved_hash = :approved"
    " WHERE tenant_id = :tenant_id AND source_id = :source_id AND remote_name = :remote_name"
)


# Frozen copies of `toolsift.mcp.catalog.definition_hash`, after and before this revision.
def _served_hash(definition: dict[str, Any]) -> str:
    served = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
    return _whole_hash({key: definition[key] for key in served if key in definition})


def _whole_hash(definition: dict[str, Any]) -> str:
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _rehash(content_hash: Callable[[dict[str, Any]], str]) -> None:
    """Every entry's hash, and its pin where it pinned the current definition; row-level
    security lifted for this transaction only, for every tenant's rows."""
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("LOCK TABLE mcp_tools IN ACCESS EXCLUSIVE MODE")
    op.execute("ALTER TABLE mcp_tools NO FORCE ROW LEVEL SECURITY")
    bind = op.get_bind()
    rows = bind.execute(ROWS)
    while batch := rows.fetchmany(1000):
        values = []
        for row in batch:
            new = content_hash(row.definition)
            pinned_current = row.approved_hash == row.definition_hash
            values.append(
                {
                    "tenant_id": row.tenant_id, "source_id": row.source_id,
                    "remote_name": row.remote_name, "hash": new,
                    "approved": new if pinned_current else row.approved_hash,
                }
            )  # fmt: skip
        bind.execute(UPDATE, values)
    op.execute("ALTER TABLE mcp_tools FORCE ROW LEVEL SECURITY")


def upgrade() -> None:
    _rehash(_served_hash)


def downgrade() -> None:
    _rehash(_whole_hash)
