"""Deterministic synthetic tenants: tool catalogs, roles, and held-out queries.

Everything derives from one seed through per-catalog `random.Random(str)` streams (seeded by
SHA-512 of the string, so PYTHONHASHSEED has no say): the same seed gives byte-identical
catalogs and queries on every machine, and changing one tenant's size leaves the others alone.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from toolsift.tools.schemas import ToolCreate

from .vocabulary import (
    CONTEXT_SENTENCES,
    CORE_TOOLS,
    DETAIL_SENTENCES,
    DOMAINS,
    EXPORT_FIELDS,
    FILTER_FIELDS,
    GENERIC_VERBS,
    IDENTIFIERS,
    NOISE_QUERIES,
    QUERY_LEADS,
    QUERY_TAILS,
    VERBS,
    Domain,
    Field,
    Obj,
    Verb,
)

# Verbs whose tool names read better with the plural object: list_orders, not list_order.
_PLURAL_VERBS = frozenset({"list", "search", "count", "export", "compare", "tail", "query"})
PERMISSION_SHARE = 0.2
NOISE_SHARE = 0.06
#: Roles every tenant defines; the benchmark's agent key holds AGENT_ROLES, so admin-guarded
#: tools stay hidden from it by row-level security, as in production.
AGENT_ROLES = ("viewer", "editor")


@dataclass(frozen=True)
class Query:
    """A user turn; `target` is the tool it paraphrases, None for small talk."""

    text: str
    target: str | None


@dataclass(frozen=True)
class _Spec:
    domain: Domain
    vendor: tuple[str, str]
    obj: Obj
    verb: Verb
    version: int = 1


@dataclass
class Catalog:
    """One tenant: its tools, its access model, and queries its agent would send."""

    name: str
    tools: list[ToolCreate]
    permissions: list[str]
    roles: dict[str, list[str]]
    agent_roles: list[str]
    queries: list[Query] = field(default_factory=list)

    def visible(self) -> list[ToolCreate]:
        """Tools the benchmark's agent may see: public ones and those its roles grant."""
        granted = {p for r in self.agent_roles for p in self.roles[r]}
        return [
            t
            for t in self.tools
            if t.required_permission is None or t.required_permission in granted
        ]


@dataclass(frozen=True)
class Sizes:
    """How many tenants and tools; the defaults are the benchmark's 100 tenants."""

    small_tenants: int = 98
    small_min: int = 20
    small_max: int = 50
    big: int = 1000
    huge: int = 10_000
    queries: int = 400
    small_queries: int = 10


def plural(word: str) -> str:
    """Good enough English plurals for the vocabulary's noun phrases."""
    if word.endswith("s") or word.isupper():
        return word if word.endswith("s") else word + "s"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    if word.endswith(("ch", "sh", "x")):
        return word + "es"
    return word + "s"


def _human(identifier: str) -> str:
    return identifier.replace("_", " ")


def _verbs_of(obj: Obj) -> list[str]:
    return list(dict.fromkeys((*GENERIC_VERBS, *obj.verbs)))


def _pool(domains: Sequence[Domain], vendors_per_domain: int) -> list[_Spec]:
    return [
        _Spec(domain, vendor, obj, VERBS[verb])
        for domain in domains
        for vendor in domain.vendors[:vendors_per_domain]
        for obj in domain.objects
        for verb in _verbs_of(obj)
    ]


def _choose_specs(rng: random.Random, size: int) -> list[_Spec]:
    """Few domains for a small tenant, every integration and vendor for a huge one."""
    domains = list(DOMAINS)
    rng.shuffle(domains)
    per_domain = sum(len(_verbs_of(o)) for d in DOMAINS for o in d.objects) / len(DOMAINS)
    count = min(len(domains), max(2, round(size * 1.6 / per_domain)))
    vendors = 1
    pool = _pool(domains[:count], vendors)
    max_vendors = max(len(d.vendors) for d in DOMAINS)
    while len(pool) < size and vendors < max_vendors:
        vendors += 1
        pool = _pool(domains[:count], vendors)
    specs = rng.sample(pool, min(size, len(pool)))
    version = 1
    while len(specs) < size:  # past every vendor: API versions, as big aggregators list them
        version += 1
        extra = [_Spec(s.domain, s.vendor, s.obj, s.verb, version) for s in pool]
        specs += rng.sample(extra, min(size - len(specs), len(extra)))
    return specs


def _name(spec: _Spec, prefixed: bool) -> str:
    noun = spec.obj.plural if spec.verb.key in _PLURAL_VERBS else spec.obj.name
    name = f"{spec.verb.key}_{noun}"
    if prefixed:
        name = f"{spec.vendor[0]}_{name}"
    if spec.version > 1:
        name += f"_v{spec.version}"
    return name


def _property(field_: Field) -> dict[str, Any]:
    _name, kind, description = field_
    prop: dict[str, Any] = {"type": kind, "description": description}
    if kind == "array":
        prop["items"] = {"type": "string"}
    return prop


def _input_schema(rng: random.Random, spec: _Spec) -> dict[str, Any]:
    obj, style = spec.obj, spec.verb.params
    id_field: Field = (f"{obj.name}_id", "string", f"Id of the {_human(obj.name)}.")
    own = list(obj.fields)
    rng.shuffle(own)
    required: list[str] = []
    if style == "id":
        fields = [id_field, *own[: rng.randint(0, 2)]]
        required = [id_field[0]]
    elif style == "id_fields":
        fields = [id_field, *own[: rng.randint(1, 3)]]
        required = [id_field[0]]
    elif style == "fields":
        fields = own[: rng.randint(1, 4)]
        required = [fields[0][0]]
    elif style == "export":
        fields = [*EXPORT_FIELDS[: rng.randint(1, 2)], FILTER_FIELDS[3]]
    else:  # filters
        fields = rng.sample(FILTER_FIELDS, rng.randint(1, 3)) + own[: rng.randint(0, 1)]
    fields = list({f[0]: f for f in fields}.values())[:5]
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {f[0]: _property(f) for f in fields},
    }
    if required:
        schema["required"] = required
    return schema


def _fill(template: str, rng: random.Random, spec: _Spec) -> str:
    fields = [_human(f[0]) for f in spec.obj.fields] + ["id", "status"]
    return template.format(
        obj=_human(spec.obj.name),
        objs=_human(spec.obj.plural),
        vendor=spec.vendor[1],
        domain=spec.domain.title,
        words=" or ".join(spec.obj.words[:2]),
        field_a=fields[0],
        field_b=fields[1],
        n=rng.choice(IDENTIFIERS),
    )


def _description(rng: random.Random, spec: _Spec) -> str:
    sentences = [_fill(rng.choice(spec.verb.describe), rng, spec)]
    if rng.random() < 0.7:
        sentences.append(_fill(rng.choice(DETAIL_SENTENCES[spec.verb.kind]), rng, spec))
    if rng.random() < 0.3:
        sentences.append(_fill(rng.choice(CONTEXT_SENTENCES), rng, spec))
    if spec.version > 1:
        sentences.append(f"Uses version {spec.version} of the {spec.vendor[1]} API.")
    return " ".join(sentences)


def _tool(rng: random.Random, spec: _Spec, name: str) -> ToolCreate:
    examples: list[str] = []
    if rng.random() < 0.5:
        count = rng.randint(1, min(2, len(spec.verb.example)))
        examples = [_fill(t, rng, spec) for t in rng.sample(spec.verb.example, count)]
    permission = None
    if rng.random() < PERMISSION_SHARE:
        permission = f"{spec.domain.key}.{spec.verb.kind}"
    title = None
    if rng.random() < 0.5:
        title = f"{spec.vendor[1]}: {_human(spec.verb.key)} {_human(spec.obj.plural if spec.verb.key in _PLURAL_VERBS else spec.obj.name)}"
    return ToolCreate(
        name=name,
        title=title,
        description=_description(rng, spec),
        input_schema=_input_schema(rng, spec),
        examples=examples,
        required_permission=permission,
        core=False,
    )


def _paraphrase(rng: random.Random, spec: _Spec) -> str:
    """A held-out wording of the tool's intent: `ask` templates and user words for the object."""
    word = rng.choice(spec.obj.words)
    template = rng.choice(spec.verb.ask).replace("{word}s", "{words}")
    text = template.format(word=word, words=plural(word), n=rng.choice(IDENTIFIERS))
    if rng.random() < 0.35:
        text += f" in {spec.vendor[1]}"
    return f"{rng.choice(QUERY_LEADS)}{text}{rng.choice(QUERY_TAILS)}"


def generate_catalog(name: str, size: int, *, seed: int, queries: int) -> Catalog:
    """`size` tools (core ones included) and `queries` queries for tenant `name`."""
    rng = random.Random(f"toolsift-bench:{seed}:{name}")
    cores = [
        ToolCreate.model_construct(
            name=n,
            title=t,
            description=d,
            input_schema={"type": "object", "properties": {}},
            examples=[],
            required_permission=None,
            core=True,
        )
        for n, t, d in rng.sample(CORE_TOOLS, rng.randint(1, min(2, max(1, size - 1))))
    ]
    specs = _choose_specs(rng, max(0, size - len(cores)))
    prefixed = size > 100 or rng.random() < 0.5
    tools: list[ToolCreate] = list(cores)
    by_name: dict[str, _Spec] = {}
    taken = {t.name for t in cores}
    for spec in specs:
        tool_name = _name(spec, prefixed)
        if tool_name in taken:
            tool_name = _name(spec, True)
        if tool_name in taken:  # pragma: no cover - the pool has no duplicates
            continue
        taken.add(tool_name)
        by_name[tool_name] = spec
        tools.append(_tool(rng, spec, tool_name))
    permissions = sorted({t.required_permission for t in tools if t.required_permission})
    roles = {
        "viewer": [p for p in permissions if p.endswith(".read")],
        "editor": [p for p in permissions if p.endswith((".read", ".write"))],
        "admin": list(permissions),
    }
    catalog = Catalog(name, tools, permissions, roles, list(AGENT_ROLES))
    targets = [t.name for t in catalog.visible() if not t.core]
    for _ in range(queries):
        if not targets or rng.random() < NOISE_SHARE:
            catalog.queries.append(Query(rng.choice(NOISE_QUERIES), None))
        else:
            target = rng.choice(targets)
            catalog.queries.append(Query(_paraphrase(rng, by_name[target]), target))
    return catalog


def generate(sizes: Sizes, *, seed: int) -> list[Catalog]:
    """The benchmark's tenants: the small ones first, then the big and the huge one."""
    rng = random.Random(f"toolsift-bench:{seed}:sizes")
    catalogs = [
        generate_catalog(
            f"small-{i + 1:03d}",
            rng.randint(sizes.small_min, sizes.small_max),
            seed=seed,
            queries=sizes.small_queries,
        )
        for i in range(sizes.small_tenants)
    ]
    if sizes.big:
        catalogs.append(generate_catalog("big", sizes.big, seed=seed, queries=sizes.queries))
    if sizes.huge:
        catalogs.append(generate_catalog("huge", sizes.huge, seed=seed, queries=sizes.queries))
    return catalogs
