"""What if a tool's server and category (optional fields of the datasets' format) were read?

`toolsift tools import` keeps `name`, `title`, `description`, `parameters` and `examples` of a
record; the datasets also carry `server` (an MCP server, a RapidAPI tool, a model hub) and
`category`. This adds them in tune.py's loop, two ways:

- as BM25 fields of their own, weighted `server` and `category` times a term's count
  (the name's weight is 3, the title's 2);
- in the embedded text: after it (`... Server: S. Category: C`) or before it (`S / C: ...`).

    python benchmarks/quality/groups.py /path/to/datasets/* --cache /tmp/toolsift-tune

Per dataset and variant it prints recall@5 of bm25, dense and hybrid (the fusion of
`toolsift.selection.dense`); "!" marks a hybrid below the dataset's target (docs/quality.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tune

from toolsift.lexical.analysis import expand_identifiers, split_identifier
from toolsift.selection import dense
from toolsift.selection.service import CANDIDATE_POOL
from toolsift_tooling.eval.dataset import EvalTool, NoQueries, load

# recall@5 targets with the current baselines (docs/quality.md, first summary).
TARGETS = {
    "mcptoolbench_pp": 0.973, "livemcpbench": 0.378, "metatool": 0.790, "toollens": 0.295,
    "gorilla_apibench": 0.277, "bfcl_pooled": 0.875, "seal_tools": 0.823,
}  # fmt: skip
# (server weight, category weight, embedded text)
VARIANTS = [
    (0.0, 0.0, "as now"),
    (2.0, 0.0, "as now"),
    (2.0, 1.0, "as now"),
    (2.0, 1.0, "after"),
    (2.0, 1.0, "before"),
]

Group = tuple[str, str]


def groups_of(directory: Path, tools: list[EvalTool]) -> list[Group]:
    """Each tool's (server, category), from the dataset's own records."""
    records = {}
    with (directory / "tools.jsonl").open() as lines:
        for line in lines:
            record = json.loads(line)
            records[str(record["id"])] = record
    return [
        (
            str(records[t.source_id].get("server") or ""),
            str(records[t.source_id].get("category") or ""),
        )
        for t in tools
    ]


def embedded(placement: str) -> Callable[[EvalTool, Group], str]:
    def text(tool: EvalTool, group: Group) -> str:
        base = tune.product_document(tool)
        server, category = split_identifier(group[0]) if group[0] else "", group[1]
        if placement == "after":
            parts = [
                f"Server: {server}" if server else "",
                f"Category: {category}" if category else "",
            ]
            extra = ". ".join(p for p in parts if p)
            return f"{base}. {extra}" if extra else base
        if placement == "before":
            head = " / ".join(p for p in (server, category) if p)
            return f"{head}: {base}" if head else base
        return base

    return text


def evaluate(
    tuner: tune.Tuner,
    prepared: tune.Prepared,
    groups: list[Group],
    server_weight: float,
    category_weight: float,
    placement: str,
) -> tuple[float, float, float]:
    config = tune.Config()
    per_field = tuner._fields(prepared, config.text_search)
    servers = tuner.analyser.lexemes(
        config.text_search, [expand_identifiers(split_identifier(g[0])) for g in groups]
    )
    categories = tuner.analyser.lexemes(
        config.text_search, [expand_identifiers(g[1]) for g in groups]
    )
    weights = {f: float(getattr(config.weights, f)) for f in tune.FIELDS}
    tfs: list[dict[str, float]] = []
    for i in range(len(prepared.names)):
        tf: dict[str, float] = defaultdict(float)
        for f in tune.FIELDS:
            for lexeme, count in per_field[f][i].items():
                tf[lexeme] += weights[f] * count
        for extra, weight in ((servers[i], server_weight), (categories[i], category_weight)):
            for lexeme, count in extra.items():
                tf[lexeme] += weight * count
        tfs.append(tf)
    queries = tuner._queries(prepared, config)
    terms = tuner.analyser.lexemes(config.text_search, queries)
    lexical = tune.rank_bm25(tfs, terms, k1=config.k1, b=config.b)
    assert tuner.vectors is not None
    text = embedded(placement)
    documents = tuner.vectors.embed(
        [text(t, g) for t, g in zip(prepared.dataset.tools, groups, strict=True)]
    )
    similarity = tuner.vectors.embed(queries) @ documents.T
    positions = np.arange(documents.shape[0])
    near = [
        [int(i) for i in np.lexsort((positions, 1.0 - row.astype(np.float64)))[:CANDIDATE_POOL]]
        for row in similarity
    ]
    hybrid = tuner.hybrid(lexical, near, dense.Fusion())
    everyone = range(len(prepared.dataset.queries))
    bm25 = [r.ids for r in lexical]
    return (
        tune.recall5(prepared, bm25, everyone),
        tune.recall5(prepared, near, everyone),
        tune.recall5(prepared, hybrid, everyone),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    args = parser.parse_args()
    with tune.session(args.cache) as tuner:
        for directory in args.datasets:
            try:
                dataset = load(directory)
            except NoQueries:
                continue
            prepared = tuner.prepare(dataset)
            groups = groups_of(directory, dataset.tools)
            for server_weight, category_weight, placement in VARIANTS:
                bm25, near, hybrid = evaluate(
                    tuner, prepared, groups, server_weight, category_weight, placement
                )
                miss = "!" if hybrid < TARGETS.get(directory.name, 0.0) else ""
                print(
                    f"{directory.name:<18} server {server_weight:g} category {category_weight:g}"
                    f" text {placement:<7} bm25 {bm25:.3f} dense {near:.3f} hybrid {hybrid:.3f}{miss}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
