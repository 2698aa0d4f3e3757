"""A dense or hybrid select without a query vector counts every tool as missing.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04 18:30:00+00:00

When the query could not be embedded in time (the model still loading after a start, an
embedding server down or slow), BM25 serves alone. The answer still said
`missing_embeddings: 0`, as if dense had scored every tool: a hybrid select that was BM25
alone could not be told from one that was not. The API now passes the model `''` for a query
it meant to embed but has no vector for, and the count is then taken against no model, so
every visible tool counts: dense scored none of them. An empty query (nothing to embed)
counts as before.

`toolsift_select` is 0013's function with that one line changed.
"""

from collections.abc import Sequence
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OF_THE_QUERY = "            p_tenant, CASE WHEN p_model IS NULL OR p_model = served THEN served ELSE '' END);\n"
# No model asked (NULL: bm25, or an empty query): against the served one, as before. A
# query that was to be embedded but has no vector (the API passes the model '') or one of
# another model: against '', which no vector has, so every visible tool counts.
OF_THE_VECTOR = (
    "            p_tenant, CASE WHEN p_model IS NULL THEN served\n"
    "                           WHEN p_vector IS NOT NULL AND p_model = served THEN served\n"
    "                           ELSE '' END);\n"
)


def _revision_0013() -> ModuleType:
    path = Path(__file__).with_name("2026-12-04-1500_missing_embeddings_of_the_query_model.py")
    spec = spec_from_file_location("toolsift_migration_0013", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _select_0013() -> str:
    previous = _revision_0013()
    return str(previous._counted_against_query(previous._select_0011()))


def _counted_against_the_vector(select: str) -> str:
    if select.count(OF_THE_QUERY) != 1:
        raise RuntimeError("0013's select function changed: the missing-vector count")
    return select.replace(OF_THE_QUERY, OF_THE_VECTOR)


def upgrade() -> None:
    op.execute(_counted_against_the_vector(_select_0013()))


def downgrade() -> None:
    op.execute(_select_0013())
