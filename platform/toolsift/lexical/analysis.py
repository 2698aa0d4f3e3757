"""What text a tool contributes to the index, and with what weight.

PostgreSQL's text search does stemming and stop words; it does not split identifiers, so
`getOrderStatus`, `order_status` and `orders.v2.status` are split here first. Nor does it
split Chinese, Japanese or Korean runs into words: the database does that as it analyses
(`lexical/sql/toolsift_cjk_bigrams.sql`), for queries and tools alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The text search configuration text is analysed with, unless a tenant chose another.
TEXT_SEARCH_CONFIG = "english"
#: PostgreSQL's own configurations (`pg_catalog.pg_ts_config`; a test checks the server has
#: these): a language's Snowball stemmer and stop words, or `simple`, which only lowercases.
#: A tenant's `text_search` setting names one (`lexical/sql/toolsift_text_search.sql`).
TEXT_SEARCH_CONFIGS = (
    "arabic", "armenian", "basque", "catalan", "danish", "dutch", "english", "estonian",
    "finnish", "french", "german", "greek", "hindi", "hungarian", "indonesian", "irish",
    "italian", "lithuanian", "nepali", "norwegian", "portuguese", "romanian", "russian",
    "serbian", "simple", "spanish", "swedish", "tamil", "turkish", "yiddish",
)  # fmt: skip


#: The schema of each configuration's twin that folds accents first (migration 0037), for a
#: tenant whose `unaccent` setting is true.
UNACCENT_SCHEMA = "toolsift_unaccent"


def text_search(settings: Mapping[str, Any]) -> str:
    """The configuration a tenant's settings choose, as `toolsift_text_search` reads them
    (and as PostgreSQL names it: a twin's name is qualified)."""
    chosen = settings.get("text_search")
    name = chosen if chosen in TEXT_SEARCH_CONFIGS else TEXT_SEARCH_CONFIG
    return f"{UNACCENT_SCHEMA}.{name}" if settings.get("unaccent") is True else name


@dataclass(frozen=True)
class FieldWeights:
    name: float = 3.0
    title: float = 2.0
    description: float = 1.0
    parameter_names: float = 1.0
    parameter_descriptions: float = 0.5
    examples: float = 1.5


DEFAULT_WEIGHTS = FieldWeights()

#: The weight of each word of a tool's learned queries (`embedding.learning`), beside its
#: fields': the words users asked for the tool with reach its BM25 document, a sixteenth as
#: heavy as a description's, so that up to `KEPT_PER_TOOL` queries add to what the tool says
#: of itself and never drown it. Chosen on the tune halves (docs/quality.md, "Learned words");
#: a power of two, like every field weight, so a term's weighted count is the same float
#: whatever order PostgreSQL sums its parts in.
LEARNED_WEIGHT = 0.0625
#: At most this many words per tool come from its learned queries, the most frequent: a
#: bound on the postings learning adds (every added posting is a row a query with that word
#: scans), at a cost within half a point of no bound on each tune quarter; 12 cost more.
LEARNED_TERMS = 16

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[_.\-/:]+")


_IDENTIFIER = re.compile(r"[a-z][A-Z]|\w[./:]\w")


def split_identifier(text: str) -> str:
    """`getHTTPStatus_v2.list` -> `get HTTP Status v2 list`."""
    return _CAMEL.sub(" ", _SEPARATORS.sub(" ", text))


def expand_identifiers(text: str) -> str:
    """Append the parts of identifiers PostgreSQL keeps whole (camelCase, dotted, paths).

    The parser already splits snake_case; `getOrderStatus` and `api.v1.users` stay one token
    there, so their parts are added beside them and both spellings match.
    """
    parts = [split_identifier(token) for token in text.split() if _IDENTIFIER.search(token)]
    return " ".join([text, *parts]) if parts else text


def _parameters(schema: dict[str, Any], depth: int = 0) -> tuple[list[str], list[str]]:
    names: list[str] = []
    descriptions: list[str] = []
    properties = schema.get("properties")
    if not isinstance(properties, dict) or depth > 3:
        return names, descriptions
    for key, spec in properties.items():
        names.append(split_identifier(str(key)))
        if isinstance(spec, dict):
            if isinstance(spec.get("description"), str):
                descriptions.append(spec["description"])
            for nested in (spec, spec.get("items")):
                if isinstance(nested, dict):
                    sub_names, sub_descriptions = _parameters(nested, depth + 1)
                    names += sub_names
                    descriptions += sub_descriptions
    return names, descriptions


def field_texts(
    *,
    name: str,
    title: str | None,
    description: str,
    input_schema: dict[str, Any],
    examples: list[str],
) -> dict[str, str]:
    """The text of each weighted field, keyed by its `FieldWeights` attribute."""
    parameter_names, parameter_descriptions = _parameters(input_schema)
    return {
        "name": expand_identifiers(name),
        "title": expand_identifiers(title or ""),
        "description": expand_identifiers(description),
        "parameter_names": " ".join(parameter_names),
        "parameter_descriptions": expand_identifiers(" ".join(parameter_descriptions)),
        "examples": expand_identifiers(" ".join(examples)),
    }


def tool_fields(
    *,
    name: str,
    title: str | None,
    description: str,
    input_schema: dict[str, Any],
    examples: list[str],
    weights: FieldWeights = DEFAULT_WEIGHTS,
) -> list[tuple[float, str]]:
    """(weight, text) pairs; each is analysed by to_tsvector and summed into weighted tf."""
    texts = field_texts(
        name=name,
        title=title,
        description=description,
        input_schema=input_schema,
        examples=examples,
    )
    fields = [(float(getattr(weights, field)), text) for field, text in texts.items()]
    return [(weight, text) for weight, text in fields if text.strip() and weight > 0]
