"""Select modes for the permission and isolation cases: each runs in bm25, dense and hybrid.

Dense and hybrid only mean something with vectors in place, so `embedded` embeds a tenant's
pending tools (the real ONNX model, no worker) before the case selects in those modes.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from tests.fixtures.factories import embed_pending
from toolsift.db import Database

MODES = ["bm25", "dense", "hybrid"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def embedded(database: Database, mode: str, *tenant_ids: UUID) -> None:
    """Vectors for every tool written so far, when the mode reads them."""
    if mode != "bm25":
        for tenant_id in tenant_ids:
            embed_pending(database, tenant_id)
