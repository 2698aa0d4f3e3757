"""A select whose query vector is of another model than its tenant serves says so.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 15:00:00+00:00

Dense scores compare the query's vector only with vectors of the model the tenant serves
(`near` in `toolsift_select`): while the API embeds with one model and the tenant still
serves another (a model change half done, or a tenant nobody reindexed), dense scores
nothing. The answer said `missing_embeddings: 0` all the same, so dense went off without a
sign. The count is now taken against the query's model: every visible tool is missing when
the two differ, and nothing changes when they agree.

`toolsift_select` is 0011's function with that one line changed (`_counted_against_query`).
"""

from collections.abc import Sequence
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SERVED = "        missing := toolsift_missing_embeddings(p_tenant, served);\n"
# A model no vector has ('') counts every visible tool: dense can score none of them.
OF_THE_QUERY = (
    "        missing := toolsift_missing_embeddings(\n"
    "            p_tenant, CASE WHEN p_model IS NULL OR p_model = served THEN served ELSE '' END);\n"
)


def _revision_0011() -> ModuleType:
    path = Path(__file__).with_name("2026-12-04-1000_token_costs_per_format.py")
    spec = spec_from_file_location("toolsift_migration_0011", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _select_0011() -> str:
    previous = _revision_0011()
    return str(previous._per_format(previous._revision_0010().SELECT))


def _counted_against_query(select: str) -> str:
    if select.count(SERVED) != 1:
        raise RuntimeError("0011's select function changed: the missing-vector count")
    return select.replace(SERVED, OF_THE_QUERY)


def upgrade() -> None:
    op.execute(_counted_against_query(_select_0011()))


def downgrade() -> None:
    op.execute(_select_0011())
