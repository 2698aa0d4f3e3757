"""The BM25 index: postings and per-tenant statistics, written in the tool's own transaction.

A tool is findable by BM25 the moment its write commits; there is no index lag to monitor.

Statistics are kept per (tenant, required permission) bucket, public tools in the nil-UUID
bucket. Row-level security shows a caller only the buckets it may use, so document counts,
lengths and document frequencies are those of the caller's allowed catalog: a hidden tool
moves no score the caller can see.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import NamedTuple
from uuid import UUID

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ..models import Tool
from ..security.audit import lock_chain
from ..tools.definitions import TokenCosts
from .analysis import (
    DEFAULT_WEIGHTS,
    LEARNED_TERMS,
    LEARNED_WEIGHT,
    TEXT_SEARCH_CONFIG,
    FieldWeights,
    tool_fields,
)

# The fields given, and the words of the tools' learned queries as read here (a new tool has
# none): each tool's `learned_terms` most frequent, ties by lexeme (in code point order, as
# the tuning loop sorts them). CJK runs become pairs of characters first, as in the query;
# the tenant's text search configuration is read as `toolsift_bm25` reads it.
_ANALYSE = text(
    """
    WITH cfg AS (
        SELECT public.toolsift_text_search(:tenant_id, CAST(:config AS regconfig)) AS config
    ),
    fields AS (
        SELECT f.tool_id, l.lexeme, sum(f.weight * cardinality(l.positions)) AS tf
        FROM cfg,
             unnest(CAST(:tool_ids AS uuid[]), CAST(:weights AS float8[]),
                    CAST(:bodies AS text[])) AS f(tool_id, weight, body),
             unnest(to_tsvector(cfg.config, public.toolsift_cjk_bigrams(f.body))) AS l
        GROUP BY f.tool_id, l.lexeme
    ),
    learned AS (
        SELECT c.tool_id, c.lexeme, c.n
        FROM (SELECT q.tool_id, l.lexeme, sum(cardinality(l.positions)) AS n,
                     row_number() OVER (PARTITION BY q.tool_id
                                        ORDER BY sum(cardinality(l.positions)) DESC,
                                                 l.lexeme COLLATE "C") AS r
              FROM cfg, learned_queries q,
                   unnest(to_tsvector(cfg.config, public.toolsift_cjk_bigrams(q.query))) AS l
              WHERE q.tenant_id = :tenant_id AND q.tool_id = ANY(CAST(:learners AS uuid[]))
              GROUP BY q.tool_id, l.lexeme) c
        WHERE c.r <= :learned_terms
    )
    SELECT coalesce(f.tool_id, l.tool_id), coalesce(f.lexeme, l.lexeme),
           coalesce(f.tf, 0) + coalesce(CAST(:learned_weight AS float8) * l.n, 0)
    FROM fields f FULL JOIN learned l ON l.tool_id = f.tool_id AND l.lexeme = f.lexeme
    """
)
_REMOVE = text(
    """
    DELETE FROM tool_terms WHERE tenant_id = :tenant_id AND tool_id = ANY(CAST(:tool_ids AS uuid[]))
    RETURNING term, required_permission_id
    """
)
# The new postings and both statistics' changes, in one round trip (the three tables are
# independent, so one snapshot serves them all).
_WRITE = text(
    """
    WITH postings AS (
        INSERT INTO tool_terms
               (tenant_id, term, tool_id, tf, doc_length, required_permission_id, position)
        SELECT :tenant_id, p.term, p.tool_id, p.tf, p.doc_length, p.permission_id, p.position
        FROM unnest(CAST(:terms AS text[]), CAST(:tool_ids AS uuid[]), CAST(:tfs AS float8[]),
                    CAST(:lengths AS float8[]), CAST(:permissions AS uuid[]),
                    CAST(:positions AS bigint[]))
             AS p(term, tool_id, tf, doc_length, permission_id, position)
    ),
    df AS (
        INSERT INTO term_stats (tenant_id, permission_key, term, df)
        SELECT :tenant_id, d.permission_key, d.term, d.delta
        FROM unnest(CAST(:df_keys AS uuid[]), CAST(:df_terms AS text[]),
                    CAST(:df_deltas AS int[]))
             AS d(permission_key, term, delta)
        ON CONFLICT (tenant_id, permission_key, term) DO UPDATE
        SET df = term_stats.df + excluded.df
    )
    INSERT INTO corpus_stats (tenant_id, permission_key, doc_count, total_length, total_tokens,
                              openai_total_tokens, mcp_total_tokens,
                              openai_responses_total_tokens)
    SELECT :tenant_id, c.permission_key, c.count, c.length, c.tokens, c.openai, c.mcp,
           c.openai_responses
    FROM unnest(CAST(:corpus_keys AS uuid[]), CAST(:counts AS int[]),
                CAST(:corpus_lengths AS float8[]), CAST(:tokens AS bigint[]),
                CAST(:openai_tokens AS bigint[]), CAST(:mcp_tokens AS bigint[]),
                CAST(:openai_responses_tokens AS bigint[]))
         AS c(permission_key, count, length, tokens, openai, mcp, openai_responses)
    ON CONFLICT (tenant_id, permission_key) DO UPDATE
    SET doc_count = corpus_stats.doc_count + excluded.doc_count,
        total_length = corpus_stats.total_length + excluded.total_length,
        total_tokens = corpus_stats.total_tokens + excluded.total_tokens,
        openai_total_tokens = corpus_stats.openai_total_tokens + excluded.openai_total_tokens,
        mcp_total_tokens = corpus_stats.mcp_total_tokens + excluded.mcp_total_tokens,
        openai_responses_total_tokens = corpus_stats.openai_responses_total_tokens
                                        + excluded.openai_responses_total_tokens
    """
)
# Only the rows this write moved down, all of them already locked by its upsert.
_DROP_EMPTY = text(
    """
    DELETE FROM term_stats s
    USING unnest(CAST(:keys AS uuid[]), CAST(:terms AS text[])) AS d(permission_key, term)
    WHERE s.tenant_id = :tenant_id AND s.permission_key = d.permission_key
      AND s.term = d.term AND s.df <= 0
    """
)
PUBLIC = UUID(int=0)

# Weighted term frequencies of each tool, by tool id.
Postings = dict[UUID, dict[str, float]]


class Previous(NamedTuple):
    """What a live tool contributed to the statistics before this write."""

    doc_length: float
    permission_id: UUID | None
    token_costs: TokenCosts

    @classmethod
    def of(cls, tool: Tool) -> Previous:
        return cls(tool.doc_length, tool.required_permission_id, _costs(tool))


def _costs(tool: Tool) -> TokenCosts:
    return TokenCosts(
        tool.token_cost,
        tool.openai_token_cost,
        tool.mcp_token_cost,
        tool.openai_responses_token_cost,
    )


def bucket(permission_id: UUID | None) -> UUID:
    return permission_id or PUBLIC


def reindex(
    session: Session,
    tenant_id: UUID,
    *,
    indexed: Sequence[Tool],
    postings: Postings,
    removed: Sequence[Tool] = (),
    previous: dict[UUID, Previous] | None = None,
) -> None:
    """Replace the postings of `indexed` tools, drop those of `removed` ones, fix the statistics.

    `postings` is what `analyse` returned for `indexed`. `previous` maps each tool that was
    live before this write to its old document length, required permission and token cost,
    so every statistics bucket moves by exactly the change.
    """
    previous = previous or {}
    if not indexed and not removed:
        return
    df_delta: Counter[tuple[UUID, str]] = Counter()
    # Only a tool that was live has postings (a delete drops them): a new one has none.
    live = [t.id for t in (*indexed, *removed) if t.id in previous]
    if live:
        for term, permission_id in session.execute(
            _REMOVE, {"tenant_id": tenant_id, "tool_ids": live}
        ):
            df_delta[bucket(permission_id), term] -= 1

    rows: dict[str, list[object]] = {
        "terms": [],
        "tool_ids": [],
        "tfs": [],
        "lengths": [],
        "permissions": [],
        "positions": [],
    }
    docs: Counter[UUID] = Counter()
    lengths: defaultdict[UUID, float] = defaultdict(float)
    tokens: dict[str, Counter[UUID]] = {fmt: Counter() for fmt in TokenCosts._fields}
    for tool in indexed:
        key = bucket(tool.required_permission_id)
        docs[key] += 1
        lengths[key] += tool.doc_length
        for fmt, cost in _costs(tool)._asdict().items():
            tokens[fmt][key] += cost
        for term, tf in postings.get(tool.id, {}).items():
            df_delta[key, term] += 1
            rows["terms"].append(term)
            rows["tool_ids"].append(tool.id)
            rows["tfs"].append(tf)
            rows["lengths"].append(tool.doc_length)
            rows["permissions"].append(tool.required_permission_id)
            rows["positions"].append(tool.position)

    for tool in (*indexed, *removed):
        if tool.id in previous:
            old = previous[tool.id]
            docs[bucket(old.permission_id)] -= 1
            lengths[bucket(old.permission_id)] -= old.doc_length
            for fmt, cost in old.token_costs._asdict().items():
                tokens[fmt][bucket(old.permission_id)] -= cost

    # In one order for every writer, so two writes of one tenant lock the rows they share in
    # the same order.
    changed = sorted((key, term, delta) for (key, term), delta in df_delta.items() if delta)
    buckets = sorted(set(docs) | set(lengths) | set().union(*tokens.values()))
    session.execute(
        _WRITE,
        {
            "tenant_id": tenant_id,
            **rows,
            "df_keys": [key for key, _, _ in changed],
            "df_terms": [term for _, term, _ in changed],
            "df_deltas": [delta for _, _, delta in changed],
            "corpus_keys": buckets,
            "counts": [docs[k] for k in buckets],
            "corpus_lengths": [lengths[k] for k in buckets],
            "tokens": [tokens["anthropic"][k] for k in buckets],
            "openai_tokens": [tokens["openai"][k] for k in buckets],
            "mcp_tokens": [tokens["mcp"][k] for k in buckets],
            "openai_responses_tokens": [tokens["openai_responses"][k] for k in buckets],
        },
    )
    if emptied := [(key, term) for key, term, delta in changed if delta < 0]:
        session.execute(
            _DROP_EMPTY,
            {
                "tenant_id": tenant_id,
                "keys": [key for key, _ in emptied],
                "terms": [term for _, term in emptied],
            },
        )


def analyse(
    session: Session, tools: Sequence[Tool], weights: FieldWeights = DEFAULT_WEIGHTS
) -> Postings:
    """Each tool's terms, its fields' and its learned queries', and its `doc_length` set
    from them.

    Called before the tools are flushed, and without flushing them, so that a tool's row is
    written once with its length: a second UPDATE would also be a second audit entry.
    """
    tenants = {tool.tenant_id for tool in tools}
    if len(tenants) > 1:
        raise ValueError("tools of one tenant at a time")
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
    postings: Postings = defaultdict(dict)
    if tools:
        with session.no_autoflush:
            result = session.execute(
                _ANALYSE,
                {
                    "tool_ids": ids,
                    "weights": field_weights,
                    "bodies": bodies,
                    "config": TEXT_SEARCH_CONFIG,
                    "tenant_id": next(iter(tenants)),
                    "learners": [t.id for t in tools],
                    "learned_weight": LEARNED_WEIGHT,
                    "learned_terms": LEARNED_TERMS,
                },
            )
        for tool_id, term, tf in result:
            postings[tool_id][term] = float(tf)
    for tool in tools:
        tool.doc_length = sum(postings.get(tool.id, {}).values())
    return postings


def relearn(session: Session, tenant_id: UUID, tool_ids: Iterable[UUID]) -> None:
    """Index again the live tools whose learned queries changed: their words follow them.

    Takes the tenant's tool-writer lock first, as a tool write does, so the statistics move
    from the last committed write and no write of these tools runs in between. A caller
    that writes rows a tool write also writes must take that lock before them.
    """
    ids = sorted(set(tool_ids))
    if not ids:
        return
    lock_chain(session, tenant_id)
    tools = list(
        session.scalars(
            select(Tool)
            .where(Tool.tenant_id == tenant_id, Tool.id.in_(ids), Tool.deleted_at.is_(None))
            .order_by(Tool.position)
            .execution_options(populate_existing=True)
        )
    )
    previous = {tool.id: Previous.of(tool) for tool in tools}
    postings = analyse(session, tools)
    session.flush()
    reindex(session, tenant_id, indexed=tools, postings=postings, previous=previous)


#: Tools analysed per statement when a whole catalog is: the rows of one batch are held in
#: memory twice (postings, then the write's arrays).
CATALOG_BATCH = 500


def reanalyse_catalog(session: Session, tenant_id: UUID) -> None:
    """Index again every live tool of the tenant, in this transaction: after a change of its
    text search configuration, no select may read postings analysed the old way."""
    lock_chain(session, tenant_id)
    ids = list(
        session.scalars(
            select(Tool.id)
            .where(Tool.tenant_id == tenant_id, Tool.deleted_at.is_(None))
            .order_by(Tool.position)
        )
    )
    for start in range(0, len(ids), CATALOG_BATCH):
        batch = ids[start : start + CATALOG_BATCH]
        relearn(session, tenant_id, batch)
        session.flush()
        # Done with: a catalog of many thousands is not kept in the identity map.
        for tool in [o for o in session.identity_map.values() if isinstance(o, Tool)]:
            session.expunge(tool)
