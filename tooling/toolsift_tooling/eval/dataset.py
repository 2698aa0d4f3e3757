"""Labelled datasets: `tools.jsonl` (the catalog) and `queries.jsonl` (query, relevant ids).

Tools go through the product's own importer, so names, titles and schemas are exactly what
`toolsift tools import` would store. Errors name the file and line.
"""

from __future__ import annotations

import hashlib
import json
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolsift.selection.schemas import MAX_TEXT
from toolsift.tools.importer import CatalogError, read_catalog
from toolsift.tools.schemas import ToolCreate, schema_error

TOOLS_FILE = "tools.jsonl"
QUERIES_FILE = "queries.jsonl"
# Every dataset's queries fall in two halves: tuning may look at "tune" only; reports give
# "check", so that no figure of record was chosen on the queries it is measured on.
HALVES = ("tune", "check")
# Keywords dropped one at a time before a schema is given up on (then it becomes {}).
_MAX_REPAIRS = 20


class DatasetError(ValueError):
    """The dataset cannot be read; the message names the file and line."""


class NoQueries(DatasetError):
    """A catalog without labels (no queries.jsonl): nothing to evaluate."""


@dataclass(frozen=True)
class EvalTool:
    source_id: str
    tool: ToolCreate

    @property
    def label(self) -> str:
        """The dataset's own name for the tool (the registry name may be a derived one)."""
        return self.tool.title or self.tool.name


@dataclass(frozen=True)
class EvalQuery:
    id: str
    text: str
    relevant: frozenset[str]  # registry names


@dataclass
class Dataset:
    name: str
    tools: list[EvalTool]
    queries: list[EvalQuery]
    # "file:line: what was dropped", for schemas that are not valid JSON Schema.
    repairs: list[str] = field(default_factory=list)
    # Which queries these are: a name of `HALVES` after `half`, or "all" (every query read).
    which_half: str = "all"

    def sample(self, count: int | None, seed: int = 0) -> Dataset:
        """A seeded subset of the queries (all tools), for quick runs while tuning."""
        if count is None or count >= len(self.queries):
            return self
        chosen = sorted(random.Random(seed).sample(range(len(self.queries)), count))
        queries = [self.queries[i] for i in chosen]
        return Dataset(self.name, self.tools, queries, self.repairs, self.which_half)

    def half(self, name: str) -> Dataset:
        """The queries of one half (`HALVES`), or all of them for "all"."""
        if name == "all":
            return self
        if name not in HALVES:
            raise ValueError(f"unknown half {name!r}: expected one of {', '.join(HALVES)} or all")
        queries = [q for q in self.queries if half_of(q.id) == name]
        return Dataset(self.name, self.tools, queries, self.repairs, name)


def half_of(query_id: str) -> str:
    """The half a query belongs to, by a hash of its id: stable across runs and machines,
    and independent of the order or the number of queries in the file."""
    return HALVES[hashlib.sha1(query_id.encode()).digest()[0] % 2]


def _repair_schema(schema: Any) -> tuple[Any, list[str]]:
    """Drop the keywords that make `schema` invalid JSON Schema, one at a time.

    Public datasets carry pseudo-schemas (`"type": "HashMap"`, draft-4 boolean
    `exclusiveMinimum`); the product rightly refuses them, but the tool must still be in the
    catalog or its queries could never be answered.
    """
    if not isinstance(schema, dict) or not schema:
        return schema, []
    dropped: list[str] = []
    for _ in range(_MAX_REPAIRS):
        if (error := schema_error(schema)) is None:
            return schema, dropped
        path, _ = error
        if not path:
            break
        parent: Any = schema
        for part in path[:-1]:
            parent = parent[part]
        del parent[path[-1]]
        dropped.append("/".join(str(p) for p in path))
    return {}, [*dropped, "(whole schema)"]


def _json_lines(path: Path) -> list[tuple[int, Any]]:
    try:
        handle = path.open("rb")
    except OSError as error:
        raise DatasetError(f"{path}: cannot read: {error.strerror}") from None
    rows: list[tuple[int, Any]] = []
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:  # each line decoded alone, so that the one that is not UTF-8 is named
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DatasetError(f"{path}:{number}: not UTF-8 text ({error.reason})") from None
            if not line.strip():
                continue
            try:
                rows.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise DatasetError(f"{path}:{number}: not valid JSON ({error.msg})") from None
            except RecursionError:
                raise DatasetError(f"{path}:{number}: not valid JSON (nested too deeply)") from None
    return rows


def _load_tools(path: Path) -> tuple[list[EvalTool], list[str]]:
    repairs: list[str] = []
    lines: list[str] = []
    expected = 1
    for number, record in _json_lines(path):
        lines += [""] * (number - expected)  # keep line numbers for the importer's messages
        expected = number + 1
        if isinstance(record, dict) and "parameters" in record:
            fixed, dropped = _repair_schema(record["parameters"])
            if dropped:
                record = {**record, "parameters": fixed}
                repairs.append(f"{path}:{number}: dropped {', '.join(dropped)}")
        lines.append(json.dumps(record))
    with tempfile.TemporaryDirectory(prefix="toolsift-eval-") as scratch:
        copy = Path(scratch) / TOOLS_FILE
        copy.write_text("\n".join(lines) + "\n", encoding="utf-8")
        try:
            tools = [EvalTool(i.source_id, i.tool) for i in read_catalog(copy)]
        except CatalogError as error:
            raise DatasetError(str(error).replace(str(copy), str(path))) from None
    if not tools:
        raise DatasetError(f"{path}: no tools")
    return tools, repairs


def _load_queries(path: Path, names: dict[str, str]) -> list[EvalQuery]:
    queries: list[EvalQuery] = []
    seen: dict[str, int] = {}  # query id -> its line
    for number, record in _json_lines(path):
        where = f"{path}:{number}"
        if not isinstance(record, dict):
            raise DatasetError(f"{where}: expected a JSON object")
        text, relevant = record.get("query"), record.get("relevant")
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(f"{where}: `query` must be a non-empty string")
        # Found here rather than as a 422 at the first select, after the stack came up.
        if len(text) > MAX_TEXT:
            raise DatasetError(
                f"{where}: `query` has {len(text):,} characters; a select reads at most "
                f"{MAX_TEXT:,}"
            )
        if (
            not isinstance(relevant, list)
            or not relevant
            or not all(isinstance(r, str) for r in relevant)
        ):
            raise DatasetError(f"{where}: `relevant` must be a non-empty list of tool ids")
        unknown = [r for r in relevant if r not in names]
        if unknown:
            raise DatasetError(f"{where}: `relevant` names unknown tool id {unknown[0]!r}")
        query_id = str(record.get("id", number))
        # Per-query results are keyed by id: two queries of one id would be one row.
        if query_id in seen:
            raise DatasetError(f"{where}: query id {query_id!r} repeats line {seen[query_id]}")
        seen[query_id] = number
        queries.append(EvalQuery(query_id, text, frozenset(names[r] for r in relevant)))
    if not queries:
        raise DatasetError(f"{path}: no queries")
    return queries


def load(directory: Path) -> Dataset:
    """Read and check a dataset folder; raises DatasetError (or NoQueries) naming file:line."""
    if not directory.is_dir():
        raise DatasetError(f"{directory}: not a directory")
    tools_path = directory / TOOLS_FILE
    queries_path = directory / QUERIES_FILE
    if not tools_path.is_file():
        raise DatasetError(f"{tools_path}: missing")
    if not queries_path.is_file():
        raise NoQueries(
            f"{directory}: no {QUERIES_FILE}, an unlabelled catalog: nothing to evaluate"
        )
    tools, repairs = _load_tools(tools_path)
    names = {t.source_id: t.tool.name for t in tools}
    queries = _load_queries(queries_path, names)
    return Dataset(directory.resolve().name, tools, queries, repairs)
