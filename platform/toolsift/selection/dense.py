"""Rank fusion of the BM25 and dense lists, as `toolsift_select` (selection/sql) serves it.

The served fusion runs in SQL, inside the select statement; this is its model in Python,
for the tuning loop (`benchmarks/quality/tune.py`), and a test holds the two to the same
floats. `Fusion`'s defaults are the only copy of the numbers: every select passes them to
SQL (`DEFAULTS`), and the benchmarks import them. Dense search itself is exact pgvector cosine distance over the vectors the caller
may see, not HNSW, by measurement (docs/decisions.md, `benchmarks/dense_index.py`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TypeVar

T = TypeVar("T", bound=Hashable)


@dataclass(frozen=True)
class Fusion:
    """Reciprocal rank fusion, gated by lexical evidence; a tenant overrides it in
    settings["fusion"].

    How much a query shares with the catalog's words differs from catalog to catalog and
    from query to query: a request that repeats a tool's rare words is answered by BM25, a
    paraphrase by meaning. So the lists are weighted by the best BM25 score of the query:
    BM25 gets `top / (top + bm25_scale)` of the weight, but never less than `bm25_floor`,
    and dense the rest, each times its own weight. The floor keeps a tool found by its
    words alone (one not embedded yet, say) within reach of the top; it is scaled by the
    query's coverage in BM25's first tool (the idf-weighted share of the query's words,
    among those some tool has, that it contains), so a match on one common word of several
    does not hold dense's answer down. No lexical match at all leaves dense alone. A small
    `k` lets the first ranks of each list count more than agreement deep down both
    (docs/quality.md measured these choices).

    Usage is a third list: the tools ranked by the nearest query they were called for
    (`learned_queries`), weighted `usage_weight` times dense's share. Dense already ranks a
    tool by the nearest of its own vector and its learned queries; the list of its own
    lets a tool learned for this kind of request outweigh BM25's words, which learn nothing
    (docs/quality.md, "The usage list"). A tenant without reported calls has an empty list.

    Tools called together lift each other (hybrid): each of the fused first
    `companion_leads` tools looks at the selections of its last `companion_window` calls
    (`tool_calls`); with at least `companion_support` of them, it lifts every other
    candidate called in some of the same selections, by `companion_weight` times the share
    of those selections times its own score (`lift_companions`). A task that needs
    `create_document` mostly needs `add_paragraph` too, whatever its words say; no tool
    enters the candidates by this alone (docs/quality.md, "Tools called together").
    """

    k: float = 3.0
    bm25_weight: float = 1.0
    dense_weight: float = 1.0
    bm25_scale: float = 13.0
    bm25_floor: float = 0.45
    usage_weight: float = 0.25
    companion_weight: float = 0.5
    companion_leads: int = 3
    companion_support: int = 2
    companion_window: int = 32


def settings(fusion: Fusion) -> dict[str, float]:
    """The fusion as `toolsift_select` reads it (`p_fusion`, and a tenant's `fusion` setting)."""
    return asdict(fusion)


#: What a select fuses with where the tenant set nothing: passed to SQL on every select.
DEFAULTS = settings(Fusion())


def lexical_share(fusion: Fusion, bm25_top: float, bm25_coverage: float) -> float:
    """BM25's share of the weight for a query that some tool matched (see `Fusion`); dense
    and usage share the rest."""
    top = max(bm25_top, 0.0)
    return max(top / (top + fusion.bm25_scale), fusion.bm25_floor * bm25_coverage)


def fuse(
    bm25_ids: Sequence[T],
    dense_ids: Sequence[T],
    fusion: Fusion,
    *,
    bm25_top: float = 0.0,
    bm25_coverage: float = 1.0,
    usage_ids: Sequence[T] = (),
) -> dict[T, float]:
    """Weighted RRF: weight / (k + rank) summed over the lists a tool appears in.

    `bm25_top` is the best BM25 score of the query and `bm25_coverage` the share of the
    query's words its tool matched: they split the weight (see `Fusion`). `usage_ids` are
    the tools by their nearest learned query.
    """
    lexical = lexical_share(fusion, bm25_top, bm25_coverage) if bm25_ids else 0.0
    fused: dict[T, float] = {}
    for weight, ids in (
        (fusion.bm25_weight * lexical, bm25_ids),
        (fusion.dense_weight * (1.0 - lexical), dense_ids),
        (fusion.usage_weight * (1.0 - lexical), usage_ids),
    ):
        for rank, tool_id in enumerate(ids, start=1):
            fused[tool_id] = fused.get(tool_id, 0.0) + weight / (fusion.k + rank)
    return fused


def lift_companions(
    fused: Mapping[T, float],
    position: Mapping[T, int],
    selections: Mapping[T, Sequence[Hashable]],
    fusion: Fusion,
) -> dict[T, float]:
    """The fused scores with tools called together lifted (see `Fusion`).

    `position` is each candidate's registry position (ties), `selections` the selection of
    each call of each tool, oldest first: a lead counts the selections of its last
    `companion_window` calls. Lifts add in the leads' order, as `toolsift_select` sums them.
    """
    lifted = dict(fused)
    if fusion.companion_weight <= 0:
        return lifted
    leads = sorted(fused, key=lambda t: (-fused[t], position[t]))[: fusion.companion_leads]
    lifts: dict[T, float] = {}
    for lead in leads:
        window = set(selections.get(lead, ())[-fusion.companion_window :])
        if len(window) < fusion.companion_support:
            continue
        for tool in fused:
            together = len(window.intersection(selections.get(tool, ()))) if tool != lead else 0
            if together:
                lift = fusion.companion_weight * together / len(window) * fused[lead]
                lifts[tool] = lifts[tool] + lift if tool in lifts else lift
    for tool, lift in lifts.items():
        lifted[tool] = fused[tool] + lift
    return lifted
