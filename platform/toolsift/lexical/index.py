"""The BM25 index: postings and per-tenant statistics, written in the tool's own transaction.

A tool is findable by BM25 the moment its write commits; there is no index lag to monitor.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..models import Tool
from .analysis import DEFAULT_WEIGHTS, TEXT_SEARCH_CONFIG, FieldWeights, tool_fields

_ANALYSE = text(
    """
    SELECT f.tool_id, l.lexeme, sum(f.weight * cardinality(l.positions))
    FROM unnest(CAST(:tool_ids AS uuid[]), CAST(:weights AS float8[]), CAST(:bodies AS text[]))
         AS f(tool_id, weight, body),
         unnest(to_tsvector(CAST(:config AS regconfig), f.body)) AS l
    GROUP BY f.tool_id, l.lexeme
    """
)
_REMOVE = text(
    """
    DELETE FROM tool_terms WHERE tenant_id = :tenant_id AND tool_id = ANY(CAST(:tool_ids AS uuid[]))
    RETURNING term
    """
)
_INSERT = text(
    """
    INSERT INTO tool_terms (tenant_id, term, tool_id, tf, doc_length, required_permission_id, position)
    SELECT :tenant_id, p.term, p.tool_id, p.tf, p.doc_length, p.permission_id, p.position
    FROM unnest(CAST(:terms AS text[]), CAST(:tool_ids AS uuid[]), CAST(:tfs AS float8[]),
                CAST(:lengths AS float8[]), CAST(:permissions AS uuid[]), CAST(:positions AS bigint[]))
         AS p(term, tool_id, tf, doc_length, permission_id, position)
    """
)
_BUMP_DF = text(
    """
    INSERT INTO term_stats (tenant_id, term, df)
    SELECT :tenant_id, d.term, d.delta
    FROM unnest(CAST(:terms AS text[]), CAST(:deltas AS int[])) AS d(term, delta)
    ON CONFLICT (tenant_id, term) DO UPDATE SET df = term_stats.df + excluded.df
    """
)
_DROP_EMPTY = text(
    "DELETE FROM term_stats WHERE tenant_id = :tenant_id AND term = ANY(CAST(:terms AS text[]))"
    " AND df <= 0"
)
_BUMP_CORPUS = text(
    """
    INSERT INTO corpus_stats (tenant_id, doc_count, total_length)
    VALUES (:tenant_id, :count, :length)
    ON CONFLICT (tenant_id) DO UPDATE
    SET doc_count = corpus_stats.doc_count + excluded.doc_count,
        total_length = corpus_stats.total_length + excluded.total_length
    """
)


def reindex(
    session: Session,
    tenant_id: UUID,
    *,
    indexed: Sequence[Tool],
    removed: Sequence[Tool] = (),
    previous_lengths: dict[UUID, float] | None = None,
    weights: FieldWeights = DEFAULT_WEIGHTS,
) -> None:
    """Replace the postings of `indexed` tools, drop those of `removed` ones, fix the statistics.

    `previous_lengths` maps tools that were live before this write to their old document
    length, so the corpus totals move by exactly the change.
    """
    previous_lengths = previous_lengths or {}
    touched = [t.id for t in (*indexed, *removed)]
    if not touched:
        return
    df_delta: Counter[str] = Counter()
    for (term,) in session.execute(_REMOVE, {"tenant_id": tenant_id, "tool_ids": touched}):
        df_delta[term] -= 1

    postings = _analyse(session, indexed, weights)
    lengths = {tool_id: sum(terms.values()) for tool_id, terms in postings.items()}
    rows: dict[str, list[object]] = defaultdict(list)
    for tool in indexed:
        tool.doc_length = lengths.get(tool.id, 0.0)
        for term, tf in postings.get(tool.id, {}).items():
            df_delta[term] += 1
            rows["terms"].append(term)
            rows["tool_ids"].append(tool.id)
            rows["tfs"].append(tf)
            rows["lengths"].append(tool.doc_length)
            rows["permissions"].append(tool.required_permission_id)
            rows["positions"].append(tool.position)
    if rows:
        session.execute(_INSERT, {"tenant_id": tenant_id, **rows})

    changed = {term: delta for term, delta in df_delta.items() if delta}
    if changed:
        terms = list(changed)
        params = {"tenant_id": tenant_id, "terms": terms}
        session.execute(_BUMP_DF, {**params, "deltas": [changed[t] for t in terms]})
        session.execute(_DROP_EMPTY, params)

    count = len(indexed) - sum(1 for t in indexed if t.id in previous_lengths)
    count -= sum(1 for t in removed if t.id in previous_lengths)
    length = sum(t.doc_length for t in indexed) - sum(
        previous_lengths.get(t.id, 0.0) for t in (*indexed, *removed)
    )
    session.execute(_BUMP_CORPUS, {"tenant_id": tenant_id, "count": count, "length": length})


def _analyse(
    session: Session, tools: Sequence[Tool], weights: FieldWeights
) -> dict[UUID, dict[str, float]]:
    ids: list[UUID] = []
    field_weights: list[float] = []
    bodies: list[str] = []
    for tool in tools:
        for weight, body in tool_fields(
            name=tool.name,
            title=tool.title,
            description=tool.description,
            input_schema=tool.input_schema,
            examples=tool.examples,
            weights=weights,
        ):
            ids.append(tool.id)
            field_weights.append(weight)
            bodies.append(body)
    postings: dict[UUID, dict[str, float]] = defaultdict(dict)
    if ids:
        result = session.execute(
            _ANALYSE,
            {
                "tool_ids": ids,
                "weights": field_weights,
                "bodies": bodies,
                "config": TEXT_SEARCH_CONFIG,
            },
        )
        for tool_id, term, tf in result:
            postings[tool_id][term] = float(tf)
    return postings
