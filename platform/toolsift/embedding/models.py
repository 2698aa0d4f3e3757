"""The local models' names and dimensions, and nothing to load: settings read them at every
start, before any backend (and numpy) is needed."""

from __future__ import annotations

MINILM_DYNAMIC = "all-MiniLM-L6-v2-int8-dynamic"
MINILM_PACKAGED = "all-MiniLM-L6-v2-int8"
BGE_SMALL = "bge-small-en-v1.5-int8"
ENSEMBLE = f"{MINILM_DYNAMIC}+{BGE_SMALL}"
DEFAULT = MINILM_DYNAMIC

#: Every local model and its dimension; the first is the default.
DIMENSIONS: dict[str, int] = {
    MINILM_DYNAMIC: 384,
    MINILM_PACKAGED: 384,
    BGE_SMALL: 384,
    ENSEMBLE: 768,
}
